"""A real crash: SIGKILL a `runworker` in the middle of an action, and another one recovers.

The provider is a loopback HTTP double (tests/support/providers.py) that records every request
with its Idempotency-Key; the write goes through the trusted `http.json` adapter, configured as
NON_IDEMPOTENT_WRITE in an INTEGRATIONS_FILE, exactly as in production.
"""

import collections
import os
import signal

import pytest

from tests.support.providers import JsonProvider, slow
from tests.support.worker import (
    WorkerProcess,
    action,
    checkpoint_rows,
    create_flow,
    enqueue,
    execution_row,
    flow_definition,
    request_row,
    statuses,
    wait_until,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.process]

CRASH_TIMEOUT = 60  # seconds for a whole recovery, leases and polls included


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
        'input_schema = { type = "object", required = ["amount"] }\n'
        "\n"
        '[routes."payments.charge@1"]\n'
        'adapter = "http.json"\n'
        f'url = "{provider.url("/charges")}"\n'
        'method = "POST"\n'
    )
    return str(path)


def _flow(conn, *, nap_seconds: float | None):
    actions = [action("charge", "payments.charge", input={"amount": {"from": "/data/amount"}})]
    if nap_seconds is not None:
        actions.append(action("settle", "SIM_SLEEP", input={"seconds": nap_seconds}))
    return create_flow(
        conn,
        flow_definition(actions, updates=[{"path": "/charge", "from": "/actions/charge"}]),
    )


def test_sigkill__another_worker_finishes_without_repeating_the_write(
    process_env, runtime_conn, provider, integrations, tmp_path
):
    flow_id = _flow(runtime_conn, nap_seconds=1.5)
    accepted = [enqueue(runtime_conn, flow_id, data={"amount": n + 1}) for n in range(8)]
    ids = [a.execution_id for a in accepted]
    env = {**process_env, "INTEGRATIONS_FILE": integrations}

    # The doomed worker runs one execution at a time, so when it is killed inside the second
    # action nothing else of it is in flight: a charge caught mid-call would rightly go to an
    # operator, which is the next test's subject, not this one's.
    with WorkerProcess(
        env, tmp_path / "doomed.log", WORKER_CONCURRENCY="1", WORKER_BATCH="1"
    ) as doomed:
        # Wait until the doomed worker is inside the second action of something: its write
        # has happened, its sleep is running.
        def doomed_mid_action():
            held = doomed.holds(runtime_conn)
            return [e for e in held if checkpoint_rows(runtime_conn, e).get("settle")]

        victims = wait_until(doomed_mid_action, timeout=CRASH_TIMEOUT, what="a doomed run")
        os.kill(doomed.pid, signal.SIGKILL)
        assert doomed.wait() == -signal.SIGKILL

    with WorkerProcess(env, tmp_path / "survivor.log") as survivor:
        wait_until(
            lambda: statuses(runtime_conn, ids) == ["SUCCEEDED"] * len(ids),
            timeout=CRASH_TIMEOUT,
            what="every execution to succeed",
        )
        assert survivor.process.poll() is None

    # No execution lost, none written twice: one request per key, one effect per execution.
    keys = collections.Counter(r.headers["idempotency-key"] for r in provider.requests("/charges"))
    assert keys == {f"{eid}:charge": 1 for eid in ids}
    assert len(provider.effects("/charges")) == len(ids)
    for victim in victims:
        execution = execution_row(runtime_conn, victim)
        assert execution["attempts"] == 2  # reclaimed once, after the kill
        checkpoints = checkpoint_rows(runtime_conn, victim)
        assert checkpoints["charge"]["attempt"] == 1  # reused from its checkpoint
        assert checkpoints["settle"]["attempt"] == 2  # the read was safely run again
    responses = {effect.key: effect.response for effect in provider.effects("/charges")}
    for item in accepted:
        request = request_row(runtime_conn, item.request_id)
        assert (request["state"], request["blocked_by_id"]) == ("DONE", None)
        assert request["data"]["charge"] == responses[f"{item.execution_id}:charge"]


def test_sigkill__a_write_in_flight_goes_to_reconciliation_and_is_never_repeated(
    process_env, runtime_conn, provider, integrations, tmp_path
):
    provider.plan("/charges", slow(30))  # the provider holds the first charge open
    accepted = enqueue(runtime_conn, _flow(runtime_conn, nap_seconds=None), data={"amount": 5})
    env = {**process_env, "INTEGRATIONS_FILE": integrations}

    with WorkerProcess(env, tmp_path / "doomed.log") as doomed:
        provider.wait_for_calls(1, "/charges", timeout=CRASH_TIMEOUT)
        os.kill(doomed.pid, signal.SIGKILL)  # mid-call: did the charge happen? nobody knows
        doomed.wait()

    with WorkerProcess(env, tmp_path / "survivor.log"):
        wait_until(
            lambda: (
                execution_row(runtime_conn, accepted.execution_id)["status"]
                == "RECONCILIATION_REQUIRED"
            ),
            timeout=CRASH_TIMEOUT,
        )

    execution = execution_row(runtime_conn, accepted.execution_id)
    assert (execution["error_code"], execution["attempts"]) == ("UNCERTAIN_WRITE", 2)
    assert provider.calls("/charges") == 1
    assert request_row(runtime_conn, accepted.request_id)["blocked_by_id"] == accepted.execution_id
    assert checkpoint_rows(runtime_conn, accepted.execution_id)["charge"]["status"] == "RUNNING"
