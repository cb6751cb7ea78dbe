"""Metrics from real processes: a `runworker` serving its counters on a loopback port, its start-up
refusals, and a web process answering GET /metrics as the runtime role."""

import signal
import socket
import subprocess
import time
from collections.abc import Iterator

import pytest
import requests

from orquestador.exposition import CONTENT_TYPE
from tests.conftest import manage
from tests.support.dashboards import dashboard_expressions, exported_series, metric_names, rules
from tests.support.prometheus import Scrape, assert_no_identifiers, scrape
from tests.support.worker import (
    PROCESS_SETTINGS,
    WorkerProcess,
    action,
    create_flow,
    enqueue,
    execution_row,
    flow_definition,
    status_of,
    wait_until,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.process]

TIMEOUT = 10  # seconds per HTTP call
START_DEADLINE = 60.0  # seconds for a process to answer over HTTP
TOKEN = "t" * 40


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def fetch(url: str, **headers: str) -> requests.Response | None:
    """GET `url`, or None while nothing listens there yet."""
    try:
        return requests.get(url, headers=headers, timeout=TIMEOUT)
    except requests.ConnectionError:
        return None


def read_metrics(url: str) -> Scrape:
    response = fetch(url, Authorization=f"Bearer {TOKEN}")
    assert response is not None and response.status_code == 200, response
    assert response.headers["Content-Type"] == CONTENT_TYPE
    return scrape(response.text)


def named_metrics() -> set[str]:
    """Every metric the shipped dashboard and alert rules mention (docker/grafana, prometheus)."""
    return metric_names(dashboard_expressions() + [r["expr"] for r in rules()])


def worker_metrics_named() -> set[str]:
    prefixes = ("orquestador_worker_", "orquestador_action_")
    return {name for name in named_metrics() if name.startswith(prefixes)}


def test_runworker__serves_counters_that_move_as_it_runs_executions(
    process_env, runtime_conn, tmp_path
):
    flow_id = create_flow(runtime_conn, flow_definition([action("a", "NO_OP")]))
    port = free_port()
    url = f"http://127.0.0.1:{port}/metrics"
    env = {**process_env, "METRICS_TOKEN": TOKEN}
    with WorkerProcess(env, tmp_path / "worker.log", WORKER_METRICS_PORT=str(port)) as worker:
        listening = worker.wait_for_event("worker metrics listening", timeout=START_DEADLINE)
        assert (listening["host"], listening["port"]) == ("127.0.0.1", port)
        wait_until(lambda: fetch(url) is not None, what="the metrics endpoint")
        before = read_metrics(url)
        assert before.value("orquestador_worker_claimed_executions_total") == 0

        accepted = [enqueue(runtime_conn, flow_id) for _ in range(3)]
        wait_until(
            lambda: (
                read_metrics(url).value(
                    "orquestador_worker_executions_finished_total", status="SUCCEEDED"
                )
                == 3
            ),
            what="the worker to count three finished executions",
        )
        after = read_metrics(url)
        refused = fetch(url)
        owner = worker.wait_started()["owner"]  # host:pid:random
        worker.signal(signal.SIGTERM)
        assert worker.wait() == 0
    assert refused is not None and refused.status_code == 401
    assert all(status_of(runtime_conn, a.execution_id) == "SUCCEEDED" for a in accepted)
    assert after.value("orquestador_worker_claimed_executions_total") == 3
    assert after.value("orquestador_worker_claims_total") >= 1
    assert after.value("orquestador_worker_claim_latency_seconds_count") >= 1
    assert after.value("orquestador_worker_executions_finished_total", status="FAILED") == 0
    assert after.value("orquestador_worker_slots") == 2
    # Each adapter call, by capability@version and outcome (executions/worker/callmetrics.py).
    calls = {"capability": "NO_OP@1"}
    assert after.value("orquestador_action_calls_total", **calls, outcome="SUCCEEDED") == 3
    assert after.value("orquestador_action_calls_total", **calls, outcome="UNKNOWN") == 0
    assert after.value("orquestador_action_call_seconds_count", **calls) == 3
    assert worker_metrics_named() <= exported_series(after.text)
    ids = [str(a.execution_id) for a in accepted] + [str(a.request_id) for a in accepted]
    assert_no_identifiers(after.text, *ids, "alice", "acme", owner, owner.split(":")[-1], TOKEN)
    assert fetch(url) is None  # the endpoint stopped with the worker


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"METRICS_TOKEN": "too short"}, "METRICS_TOKEN must be at least 32 characters"),
        ({"WORKER_METRICS_PORT": "metrics"}, "WORKER_METRICS_PORT must be a TCP port"),
        ({"WORKER_METRICS_PORT": "70000"}, "WORKER_METRICS_PORT must be a TCP port"),
        (
            {"WORKER_METRICS_PORT": "9464", "WORKER_METRICS_HOST": "localhost"},
            "WORKER_METRICS_HOST must be an IP address",
        ),
    ],
)
def test_runworker__refuses_an_invalid_metrics_setting_naming_it(
    process_env, runtime_conn, overrides, message
):
    accepted = enqueue(runtime_conn, create_flow(runtime_conn, flow_definition([])))
    result = subprocess.run(
        manage("runworker"),
        env={**process_env, **PROCESS_SETTINGS, **overrides},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode != 0, result.stdout
    assert message in result.stderr
    assert execution_row(runtime_conn, accepted.execution_id)["attempts"] == 0  # nothing claimed


def test_runworker__refuses_a_metrics_port_already_taken(process_env, runtime_conn):
    accepted = enqueue(runtime_conn, create_flow(runtime_conn, flow_definition([])))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        result = subprocess.run(
            manage("runworker"),
            env={
                **process_env,
                **PROCESS_SETTINGS,
                "WORKER_METRICS_PORT": str(taken.getsockname()[1]),
            },
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert result.returncode != 0, result.stdout
    assert "WORKER_METRICS_PORT: cannot listen on 127.0.0.1 port" in result.stderr
    assert execution_row(runtime_conn, accepted.execution_id)["attempts"] == 0


# ------------------------------------------------------------------------------
# The web process
# ------------------------------------------------------------------------------
@pytest.fixture
def web(process_env, tmp_path) -> Iterator[str]:
    """A web process on the runtime role with METRICS_TOKEN set; yields its /metrics URL."""
    port = free_port()
    log = (tmp_path / "server.log").open("w")
    process = subprocess.Popen(
        manage("runserver", f"127.0.0.1:{port}", "--noreload", "--skip-checks"),
        env={**process_env, "METRICS_TOKEN": TOKEN, "DEBUG": "false"},
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + START_DEADLINE
        while fetch(f"http://127.0.0.1:{port}/healthz") is None:
            assert process.poll() is None, (tmp_path / "server.log").read_text()
            assert time.monotonic() < deadline, "the server did not answer /healthz in time"
            time.sleep(0.1)  # polling a condition (the port answering), with a deadline
        yield f"http://127.0.0.1:{port}/metrics"
    finally:
        process.terminate()
        process.wait(timeout=30)
        log.close()


def test_web__metrics_as_the_runtime_role(web, runtime_conn):
    assert fetch(web).status_code == 401
    assert read_metrics(web).value("orquestador_queue_depth", status="PENDING") == 0

    flow_id = create_flow(runtime_conn, flow_definition([action("a", "NO_OP")]))
    accepted = enqueue(runtime_conn, flow_id)  # no worker runs: it stays PENDING
    found = read_metrics(web)
    assert found.value("orquestador_database_up") == 1
    assert found.value("orquestador_queue_depth", status="PENDING") == 1
    assert found.value("orquestador_queue_due", status="PENDING") == 1
    assert found.value("orquestador_requests_blocked") == 1
    assert_no_identifiers(found.text, str(accepted.execution_id), str(accepted.request_id))
    assert named_metrics() - worker_metrics_named() <= exported_series(found.text)
