"""quote -> wait for approval -> charge, through real `runworker` processes.

The approval arrives over HTTP (a live server on loopback) with a real signed JWT; the charge goes
through the trusted `http.json` adapter to a loopback provider that records every call. One
worker is SIGKILLed after the execution suspended, another after it resumed (in the middle of a
later action): nothing is lost and the charge happens exactly once.
"""

import collections
import os
import signal

import pytest
import requests

from tests.integration.api.conftest import api_enabled
from tests.support import tokens
from tests.support.providers import JsonProvider
from tests.support.worker import (
    WorkerProcess,
    action,
    audit_events,
    checkpoint_rows,
    create_flow,
    enqueue,
    execution_row,
    flow_definition,
    request_row,
    wait_until,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.process]

TIMEOUT = 60  # seconds for any step, leases and polls included
APPROVAL = {
    "id": "approval",
    "wait": {
        "event": "manager.approval",
        "payloadSchema": {
            "type": "object",
            "required": ["approved"],
            "properties": {"approved": {"type": "boolean"}},
        },
        "timeoutSeconds": 3600,
    },
}


@pytest.fixture
def provider():
    with JsonProvider() as double:
        yield double


@pytest.fixture
def integrations(tmp_path, provider):
    path = tmp_path / "integrations.toml"
    path.write_text(
        '[contracts."payments.charge@1"]\n'
        'effect = "NON_IDEMPOTENT_WRITE"\n'
        "max_attempts = 3\n"
        "timeout_seconds = 1\n"
        "\n"
        '[routes."payments.charge@1"]\n'
        'adapter = "http.json"\n'
        f'url = "{provider.url("/charges")}"\n'
        'method = "POST"\n'
    )
    return str(path)


def _flow(conn) -> int:
    actions = [
        action("quote", "NO_OP", input={"amount": {"from": "/data/amount"}}),
        APPROVAL,
        action("charge", "payments.charge", input={"amount": {"from": "/data/amount"}}),
        action("settle", "SIM_SLEEP", input={"seconds": 1.5}),
    ]
    return create_flow(
        conn,
        flow_definition(
            actions,
            key="quote-approval",
            rules=[
                {
                    "id": "approved",
                    "when": {"eq": [{"from": "/actions/approval/approved"}, True]},
                    "target": "DONE",
                    "outcome": "ACCEPTED",
                },
                {"id": "declined", "when": True, "target": "OTHER", "outcome": "DECLINED"},
            ],
            updates=[
                {"path": "/approved", "from": "/actions/approval/approved"},
                {"path": "/charge", "from": "/actions/charge"},
            ],
        ),
    )


def _status(conn, execution_id) -> str:
    return execution_row(conn, execution_id)["status"]


def test_approval__survives_a_sigkill_after_suspension_and_one_after_resume(
    process_env, runtime_conn, provider, integrations, tmp_path, live_server
):
    accepted = enqueue(runtime_conn, _flow(runtime_conn), data={"amount": 42})
    env = {**process_env, "INTEGRATIONS_FILE": integrations}
    workers = [WorkerProcess(env, tmp_path / f"worker-{i}.log") for i in range(2)]
    try:
        wait_until(
            lambda: _status(runtime_conn, accepted.execution_id) == "SUSPENDED",
            timeout=TIMEOUT,
            what="the execution to suspend",
        )
        # SIGKILL the worker that suspended it; a fresh one takes its place.
        # (it logs right after the commit that the test saw)
        suspender = wait_until(
            lambda: next((w for w in workers if "execution suspended" in w.output()), None),
            timeout=TIMEOUT,
            what="the suspending worker's log line",
        )
        os.kill(suspender.pid, signal.SIGKILL)
        assert suspender.wait() == -signal.SIGKILL
        suspender.close()
        workers.remove(suspender)
        workers.append(WorkerProcess(env, tmp_path / "worker-2.log"))
        assert provider.calls("/charges") == 0  # nothing runs past the wait

        # The manager approves over HTTP, with a real token of the request's tenant.
        with api_enabled():
            token = tokens.token(sub="maria", tenant="acme", scope="executions:resume")
            response = requests.post(
                f"{live_server.url}/api/v1/executions/{accepted.execution_id}/events",
                json={
                    "eventId": "approval-1",
                    "event": "manager.approval",
                    "payload": {"approved": True},
                },
                headers={"Authorization": f"Bearer {token}"},
                timeout=10,
            )
        assert response.status_code == 202, response.text
        assert response.json()["status"] in ("PENDING", "RUNNING", "SUCCEEDED")

        # SIGKILL whichever worker runs it after the charge, in the middle of `settle`.
        def holder_in_settle():
            if checkpoint_rows(runtime_conn, accepted.execution_id).get("settle") is None:
                return None
            return next(
                (w for w in workers if accepted.execution_id in w.holds(runtime_conn)), None
            )

        victim = wait_until(holder_in_settle, timeout=TIMEOUT, what="a run inside settle")
        os.kill(victim.pid, signal.SIGKILL)
        assert victim.wait() == -signal.SIGKILL

        wait_until(
            lambda: _status(runtime_conn, accepted.execution_id) == "SUCCEEDED",
            timeout=TIMEOUT,
            what="the execution to succeed",
        )
    finally:
        for worker in workers:
            worker.close()

    # The charge happened exactly once, with the execution's key, and nothing was lost.
    keys = collections.Counter(r.headers["idempotency-key"] for r in provider.requests("/charges"))
    assert keys == {f"{accepted.execution_id}:charge": 1}
    checkpoints = checkpoint_rows(runtime_conn, accepted.execution_id)
    assert checkpoints["quote"]["attempt"] == 1
    assert (checkpoints["approval"]["status"], checkpoints["approval"]["output"]) == (
        "SUCCEEDED",
        {"approved": True},
    )
    assert checkpoints["charge"]["attempt"] == 1  # reused after the second kill
    assert checkpoints["settle"]["attempt"] == 2  # the read ran again
    request = request_row(runtime_conn, accepted.request_id)
    assert (request["state"], request["blocked_by_id"]) == ("DONE", None)
    assert request["data"]["approved"] is True
    types = [kind for kind, _ in audit_events(runtime_conn, accepted.request_id)]
    assert types.count("EXECUTION_SUSPENDED") == 1
    assert types.count("EXECUTION_RESUMED") == 1
    assert types[-1] == "TRANSITION_COMPLETED"
