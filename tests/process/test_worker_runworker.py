"""Real `manage.py runworker` processes: start-up refusals, structured logs, drain and stop."""

import signal
import subprocess

import pytest

from tests.conftest import manage
from tests.support.worker import (
    PROCESS_SETTINGS,
    WorkerProcess,
    action,
    checkpoint_rows,
    claim,
    create_flow,
    enqueue,
    execution_row,
    expire_lease,
    flow_definition,
    status_of,
    wait_until,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.process]

EXIT_SECONDS = 2.0  # seconds from "worker stopped" to the process's exit, at most


@pytest.fixture
def pending(runtime_conn):
    """One PENDING execution that a worker which starts at all would claim."""
    flow_id = create_flow(runtime_conn, flow_definition([action("a", "NO_OP")]))
    return enqueue(runtime_conn, flow_id)


def _refused(env, **overrides):
    result = subprocess.run(
        manage("runworker"),
        env={**env, **PROCESS_SETTINGS, **overrides},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode != 0, result.stdout
    return result.stderr


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            {"WORKER_LEASE_SECONDS": "10", "WORKER_RENEW_SECONDS": "5"},
            "WORKER_RENEW_SECONDS must be strictly less than half of WORKER_LEASE_SECONDS",
        ),
        ({"WORKER_CONCURRENCY": "0"}, "WORKER_CONCURRENCY must be positive"),
        ({"WORKER_DRAIN_SECONDS": "-3"}, "WORKER_DRAIN_SECONDS must be positive"),
        ({"WORKER_POLL_MS": "soon"}, "WORKER_POLL_MS must be a positive integer"),
    ],
)
def test_runworker__refuses_invalid_configuration_naming_the_variable(
    process_env, runtime_conn, pending, overrides, message
):
    assert message in _refused(process_env, **overrides)
    assert execution_row(runtime_conn, pending.execution_id)["attempts"] == 0


def test_runworker__disabled_exits_non_zero_saying_so(process_env, runtime_conn, pending):
    assert "WORKER_ENABLED is false" in _refused(process_env, WORKER_ENABLED="false")
    assert execution_row(runtime_conn, pending.execution_id)["attempts"] == 0


def test_runworker__refuses_an_unrestricted_database_role(process_env, runtime_conn, pending):
    as_owner = {**process_env, "DATABASE_URL": process_env["MIGRATION_DATABASE_URL"]}
    stderr = _refused(as_owner)
    assert "DATABASE_URL must name a restricted runtime role" in stderr
    assert "owns schema" in stderr
    assert execution_row(runtime_conn, pending.execution_id)["attempts"] == 0


def test_runworker__refuses_a_bad_integrations_file(process_env, tmp_path, pending):
    bad = tmp_path / "integrations.toml"
    bad.write_text('[contracts."x.y@1"]\neffect = "SOMETIMES"\n')
    assert "INTEGRATIONS_FILE" in _refused(process_env, INTEGRATIONS_FILE=str(bad))


def test_runworker__runs_work_and_logs_one_json_line_per_event(
    process_env, runtime_conn, pending, tmp_path
):
    with WorkerProcess(process_env, tmp_path / "worker.log") as worker:
        wait_until(lambda: status_of(runtime_conn, pending.execution_id) == "SUCCEEDED")
        worker.signal(signal.SIGTERM)
        assert worker.wait() == 0
        events = {e["event"]: e for e in worker.events()}
    for name in ("execution claimed", "action started", "execution completed"):
        line = events[name]
        assert line["execution_id"] == str(pending.execution_id)
        assert line["request_id"] == str(pending.request_id)
        assert (line["attempt"], line["token"]) == (1, 1)
        assert {"ts", "level", "logger"} <= set(line)
    assert events["worker stopped"]["claimed"] == 1


def test_runworker__sigterm_drains_running_work_and_claims_nothing_more(
    process_env, runtime_conn, tmp_path
):
    flow_id = create_flow(
        runtime_conn, flow_definition([action("nap", "SIM_SLEEP", input={"seconds": 3})])
    )
    first = enqueue(runtime_conn, flow_id)
    with WorkerProcess(process_env, tmp_path / "worker.log", WORKER_DRAIN_SECONDS="30") as worker:
        wait_until(lambda: "nap" in checkpoint_rows(runtime_conn, first.execution_id))
        worker.signal(signal.SIGTERM)
        worker.wait_for_event("worker draining")
        later = enqueue(runtime_conn, flow_id)  # announced, but the worker stopped claiming
        status, after = worker.wait_after_stopped(30)
        assert status == 0
        assert after < EXIT_SECONDS, (after, worker.output())
        assert worker.events()[-1]["abandoned"] == 0
    assert status_of(runtime_conn, first.execution_id) == "SUCCEEDED"
    assert execution_row(runtime_conn, later.execution_id)["attempts"] == 0


def test_runworker__past_the_drain_stops_and_leaves_the_rest_recoverable(
    process_env, runtime_conn, tmp_path
):
    flow_id = create_flow(
        runtime_conn, flow_definition([action("nap", "SIM_SLEEP", input={"seconds": 120})])
    )
    accepted = enqueue(runtime_conn, flow_id)
    with WorkerProcess(process_env, tmp_path / "worker.log", WORKER_DRAIN_SECONDS="0.5") as worker:
        wait_until(lambda: "nap" in checkpoint_rows(runtime_conn, accepted.execution_id))
        worker.signal(signal.SIGTERM)
        status, after = worker.wait_after_stopped(30)  # long before the 120 s action would end
        assert status == 0
        assert after < EXIT_SECONDS, (after, worker.output())
        assert worker.events()[-1]["abandoned"] == 1
    execution = execution_row(runtime_conn, accepted.execution_id)
    assert execution["status"] == "RUNNING"
    assert checkpoint_rows(runtime_conn, accepted.execution_id)["nap"]["status"] == "RUNNING"
    expire_lease(runtime_conn, accepted.execution_id)  # nobody renews it any more
    (found,) = claim(runtime_conn, "rescuer")
    assert (found.execution_id, found.fence.token) == (
        accepted.execution_id,
        execution["fencing_token"] + 1,
    )
