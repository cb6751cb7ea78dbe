"""Cancelling a RUNNING execution from another process stops the `runworker` holding it.

`manage.py cancelexecution` runs in a process of its own, as the API and the admin do; the
worker hears of it on the connection it already LISTENs on and stops the run at once: the slow
read it waits on is abandoned, the write after it never starts. Its lease (30 s, renewed every
10 s) could not have told it within the deadline below.
"""

import subprocess

import pytest

from tests.conftest import manage
from tests.support.providers import JsonProvider, slow
from tests.support.worker import (
    WorkerProcess,
    action,
    audit_events,
    checkpoint_rows,
    create_flow,
    enqueue,
    execution_row,
    flow_definition,
    wait_until,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.process]

LONG_LEASE = {"WORKER_LEASE_SECONDS": "30", "WORKER_RENEW_SECONDS": "10"}
STOPPED_WITHIN = 5.0  # seconds: well inside the first renewal period


def test_cancelexecution__stops_the_worker_holding_it_at_once(process_env, runtime_conn, tmp_path):
    with JsonProvider() as provider:
        provider.plan("/quote", slow(9))
        integrations = tmp_path / "integrations.toml"
        integrations.write_text(
            '[contracts."quotes.get@1"]\n'
            'effect = "READ_ONLY"\n'
            "timeout_seconds = 10\n"
            '[contracts."payments.charge@1"]\n'
            'effect = "NON_IDEMPOTENT_WRITE"\n'
            "timeout_seconds = 10\n"
            "\n"
            '[routes."quotes.get@1"]\n'
            'adapter = "http.json"\n'
            f'url = "{provider.url("/quote")}"\n'
            '[routes."payments.charge@1"]\n'
            'adapter = "http.json"\n'
            f'url = "{provider.url("/charges")}"\n'
        )
        env = {**process_env, "INTEGRATIONS_FILE": str(integrations)}
        flow_id = create_flow(
            runtime_conn,
            flow_definition([action("quote", "quotes.get"), action("charge", "payments.charge")]),
        )
        accepted = enqueue(runtime_conn, flow_id)
        with WorkerProcess(env, tmp_path / "worker.log", **LONG_LEASE) as worker:
            provider.wait_for_calls(1, "/quote", timeout=30)
            # The read outlasts half a second: its RUNNING checkpoint is written while it runs.
            wait_until(
                lambda: "quote" in checkpoint_rows(runtime_conn, accepted.execution_id),
                what="the slow read's RUNNING checkpoint",
            )
            cancelled = subprocess.run(
                manage(
                    "cancelexecution", str(accepted.execution_id), "--reason", "customer withdrew"
                ),
                env=env,
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert cancelled.returncode == 0, cancelled.stderr
            lost = worker.wait_for_event("lease lost", timeout=STOPPED_WITHIN)
            interrupted = worker.wait_for_event("execution interrupted", timeout=STOPPED_WITHIN)
            assert lost["reason"] == "cancelled"
            assert interrupted["execution_id"] == str(accepted.execution_id)
        assert provider.requests("/charges") == []  # the write after it never started
        assert len(provider.requests("/quote")) == 1  # nothing called twice
    execution = execution_row(runtime_conn, accepted.execution_id)
    assert execution["status"] == "CANCELLED"
    assert list(checkpoint_rows(runtime_conn, accepted.execution_id)) == ["quote"]
    kinds = [kind for kind, _ in audit_events(runtime_conn, accepted.request_id)]
    assert kinds == ["TRANSITION_ACCEPTED", "EXECUTION_CANCELLED"]
