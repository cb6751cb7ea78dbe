"""The worker's counters against real runs (a scheduler in this process, real PostgreSQL), and its
endpoint over loopback HTTP."""

import socket

import pytest
import requests

from executions.queue.cancel import execution_cancel
from executions.worker.metrics import (
    CLAIMED,
    CLAIMS,
    FINISHED,
    INTERRUPTED,
    LEASE_LOSSES,
    RECONCILIATIONS,
    RETRIES,
    WorkerMetrics,
    metrics_listen,
)
from orquestador.exposition import CONTENT_TYPE
from orquestador.workerconfig import WorkerConfigError
from tests.support.prometheus import scrape
from tests.support.worker import (
    GateAdapter,
    ScriptedAdapter,
    action,
    binding,
    enqueue,
    ok,
    permanent,
    registry,
    running_scheduler,
    transient,
    unknown,
    wait_until,
)

pytestmark = pytest.mark.django_db(transaction=True)

TIMEOUT = 10  # seconds per HTTP call
TOKEN = "w" * 40


def test_worker_metrics__count_what_the_runs_ended_in(conn, make_flow, runtime_dsn):
    flaky = ScriptedAdapter(script=[transient()], default=ok())
    refusing = ScriptedAdapter(default=permanent())
    silent = ScriptedAdapter(default=unknown())
    reg = registry(
        binding("FLAKY", flaky),
        binding("REFUSING", refusing),
        binding("SILENT", silent, effect="NON_IDEMPOTENT_WRITE"),
    )
    for capability in ("NO_OP", "FLAKY", "REFUSING", "SILENT"):
        enqueue(conn, make_flow([action("a", capability)]))

    with running_scheduler(runtime_dsn, reg) as scheduler:
        metrics = scheduler.metrics
        wait_until(
            lambda: (
                (
                    metrics.value(FINISHED, "SUCCEEDED"),
                    metrics.value(FINISHED, "FAILED"),
                    metrics.value(RETRIES),
                    metrics.value(RECONCILIATIONS),
                )
                == (2, 1, 1, 1)
            ),
            what="two successes (one after a retry), a failure and a reconciliation",
        )
        found = scrape(metrics.text())
    assert found.value(CLAIMED) == 5  # four claims, and the retry claimed again
    assert found.value(CLAIMS) >= 1
    assert found.value("orquestador_worker_claim_latency_seconds_count") == found.value(CLAIMS)
    assert found.value("orquestador_worker_slots") == 2


def test_worker_metrics__count_a_lost_lease_and_the_run_it_stopped(conn, make_flow, runtime_dsn):
    gate = GateAdapter()
    accepted = enqueue(conn, make_flow([action("a", "G")]))
    with running_scheduler(runtime_dsn, registry(binding("G", gate))) as scheduler:
        wait_until(gate.entered.is_set, what="the run inside the adapter")
        assert scheduler.metrics.value(LEASE_LOSSES) == 0
        execution_cancel(execution_id=accepted.execution_id, actor="ops", reason="not needed")
        wait_until(
            lambda: scheduler.metrics.value(INTERRUPTED) == 1,
            what="the heartbeat to stop the run",
        )
        assert scheduler.metrics.value(LEASE_LOSSES) == 1


# ------------------------------------------------------------------------------
# The endpoint
# ------------------------------------------------------------------------------
@pytest.fixture
def endpoint():
    metrics = WorkerMetrics()
    metrics.claim_done(claimed=3, seconds=0.002)
    with metrics_listen(metrics=metrics, address=("127.0.0.1", 0), token=TOKEN) as served:
        host, port = served.address
        yield f"http://{host}:{port}"


def test_endpoint__serves_the_text_format_with_the_token(endpoint):
    response = requests.get(
        f"{endpoint}/metrics", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=TIMEOUT
    )
    assert response.status_code == 200
    assert response.headers["Content-Type"] == CONTENT_TYPE
    assert scrape(response.text).value(CLAIMED) == 3


def test_endpoint__refuses_without_the_token_and_serves_nothing_else(endpoint):
    response = requests.get(f"{endpoint}/metrics", timeout=TIMEOUT)
    assert response.status_code == 401
    assert response.headers["WWW-Authenticate"] == 'Bearer realm="metrics"'
    assert "orquestador" not in response.text
    auth = {"Authorization": f"Bearer {TOKEN}"}
    assert requests.get(f"{endpoint}/", headers=auth, timeout=TIMEOUT).status_code == 404
    assert requests.post(f"{endpoint}/metrics", headers=auth, timeout=TIMEOUT).status_code == 501


def test_endpoint__a_port_in_use_is_refused_naming_the_variable():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        with pytest.raises(WorkerConfigError, match="WORKER_METRICS_PORT: cannot listen on"):
            metrics_listen(metrics=WorkerMetrics(), address=taken.getsockname(), token="")


def test_endpoint__closing_it_stops_listening():
    served = metrics_listen(metrics=WorkerMetrics(), address=("127.0.0.1", 0), token="")
    host, port = served.address
    assert requests.get(f"http://{host}:{port}/metrics", timeout=TIMEOUT).status_code == 200
    served.close()
    with pytest.raises(requests.ConnectionError):
        requests.get(f"http://{host}:{port}/metrics", timeout=TIMEOUT)


def test_endpoint__off_when_no_address_is_set():
    with metrics_listen(metrics=WorkerMetrics(), address=None, token="") as served:
        assert served.address is None
