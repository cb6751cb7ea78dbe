"""The worker's counters and histogram, and the validation of WORKER_METRICS_PORT/HOST."""

import threading
import uuid

import pytest

from executions.models import ExecutionStatus
from executions.queue.claims import Dispatch
from executions.queue.leases import Fence
from executions.worker.metrics import (
    CLAIM_LATENCY,
    CLAIMED,
    CLAIMS,
    FINISHED,
    INTERRUPTED,
    LEASE_LOSSES,
    RECONCILIATIONS,
    RETRIES,
    RUN_ERRORS,
    SUPERSEDED,
    WorkerMetrics,
    metrics_address,
)
from executions.worker.wire import Ending, ExecutionResult, RunOutcome
from orquestador.workerconfig import WorkerConfigError
from tests.support.prometheus import scrape

ID = uuid.UUID("3f1c1f5e-4b4e-4f57-9b0e-0d3c7b1a2c9d")
DISPATCH = Dispatch(Fence(ID, uuid.uuid4(), 1, "w"), 1, "go", 1, None)


def test_worker_metrics__every_series_exists_from_the_start_at_zero():
    found = scrape(WorkerMetrics().text())
    assert found.value(CLAIMS) == 0
    assert found.value(FINISHED, status="SUCCEEDED") == 0
    assert found.value(FINISHED, status="FAILED") == 0
    assert found.value(f"{CLAIM_LATENCY}_count") == 0
    assert found.value(f"{CLAIM_LATENCY}_bucket", le="+Inf") == 0


def test_worker_metrics__counts_each_run_outcome_once_where_it_belongs():
    metrics = WorkerMetrics()
    for status in (
        "SUCCEEDED",
        "SUCCEEDED",
        "FAILED",
        "COMPENSATED",
        "RETRY_WAIT",
        "RECONCILIATION_REQUIRED",
    ):
        metrics.run_ended(ExecutionResult.of(DISPATCH, RunOutcome(status=ExecutionStatus(status))))
    metrics.run_ended(ExecutionResult(DISPATCH, Ending.SUPERSEDED))
    metrics.run_ended(ExecutionResult(DISPATCH, Ending.INTERRUPTED))
    metrics.run_raised()
    metrics.lease_lost()

    found = scrape(metrics.text())
    assert found.value(FINISHED, status="SUCCEEDED") == 2
    assert found.value(FINISHED, status="FAILED") == 1
    assert found.value(FINISHED, status="COMPENSATED") == 1
    assert (found.value(RETRIES), found.value(RECONCILIATIONS)) == (1, 1)
    assert (found.value(SUPERSEDED), found.value(INTERRUPTED)) == (1, 1)
    assert (found.value(RUN_ERRORS), found.value(LEASE_LOSSES)) == (1, 1)


def test_claim_latency__buckets_are_upper_inclusive_and_cumulative():
    metrics = WorkerMetrics()
    metrics.claim_done(claimed=2, seconds=0.001)  # exactly on a bound: in that bucket
    metrics.claim_done(claimed=0, seconds=0.004)
    metrics.claim_done(claimed=1, seconds=30.0)  # past every bound: +Inf only

    found = scrape(metrics.text())
    assert found.value(CLAIMS) == 3 and found.value(CLAIMED) == 3
    bucket = f"{CLAIM_LATENCY}_bucket"
    assert found.value(bucket, le="0.0005") == 0
    assert found.value(bucket, le="0.001") == 1
    assert found.value(bucket, le="0.005") == 2
    assert found.value(bucket, le="2.5") == 2
    assert found.value(bucket, le="+Inf") == found.value(f"{CLAIM_LATENCY}_count") == 3
    assert found.value(f"{CLAIM_LATENCY}_sum") == pytest.approx(30.005)


def test_worker_metrics__concurrent_increments_are_never_lost():
    metrics = WorkerMetrics()
    barrier = threading.Barrier(8)

    def hammer():
        barrier.wait()
        for _ in range(2000):
            metrics.claim_done(claimed=1, seconds=0.002)
            metrics.lease_lost()

    threads = [threading.Thread(target=hammer) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    found = scrape(metrics.text())
    assert found.value(CLAIMED) == found.value(f"{CLAIM_LATENCY}_count") == 16000
    assert found.value(LEASE_LOSSES) == 16000


def test_worker_metrics__slots_are_read_at_each_scrape():
    metrics = WorkerMetrics()
    busy = [0]
    metrics.track_slots(slots=4, busy=lambda: busy[0])
    busy[0] = 3
    found = scrape(metrics.text())
    assert found.value("orquestador_worker_slots") == 4
    assert found.value("orquestador_worker_slots_busy") == 3


def test_metrics_address__off_unless_a_port_is_set():
    assert metrics_address({}) is None
    assert metrics_address({"WORKER_METRICS_PORT": " "}) is None
    assert metrics_address({"WORKER_METRICS_PORT": "9464"}) == ("127.0.0.1", 9464)
    assert metrics_address({"WORKER_METRICS_PORT": "9464", "WORKER_METRICS_HOST": "::1"}) == (
        "::1",
        9464,
    )


@pytest.mark.parametrize("port", ["0", "65536", "-1", "http", "94 64", "9_464", "+9464", "1e3"])
def test_metrics_address__refuses_a_bad_port_naming_the_variable(port):
    with pytest.raises(WorkerConfigError, match="WORKER_METRICS_PORT must be a TCP port"):
        metrics_address({"WORKER_METRICS_PORT": port})


@pytest.mark.parametrize("host", ["localhost", "127.0.0.256", "any"])
def test_metrics_address__refuses_a_host_that_is_not_an_ip_address(host):
    with pytest.raises(WorkerConfigError, match="WORKER_METRICS_HOST must be an IP address"):
        metrics_address({"WORKER_METRICS_PORT": "9464", "WORKER_METRICS_HOST": host})
