"""Held work rides through a database outage: a real runworker, a real loopback provider, and a
PostgreSQL cluster of the test's own that the test stops and starts under them.

A write's adapter returns while PostgreSQL is down, so its SUCCEEDED checkpoint cannot be
written. The holder keeps its lease, waits for the database, writes the checkpoint itself once it
is back and finishes within seconds: one provider call, one attempt. Fencing still decides: when
the outage outlasts the lease, the holder gives the write up, and the execution that was claimed
again goes to an operator with its write never repeated.
"""

import time
from collections.abc import Iterator

import psycopg
import pytest

from tests.support.cluster import Cluster, own_cluster
from tests.support.providers import JsonProvider, slow
from tests.support.worker import (
    WorkerProcess,
    action,
    create_flow,
    enqueue,
    execution_row,
    flow_definition,
    wait_until,
)

pytestmark = pytest.mark.process

TIMEOUT = 60.0  # seconds for anything but the target below
BACK_WITHIN = 5.0  # seconds from the database's return to the execution's end: the target
PROVIDER_HOLD = 4.0  # seconds the provider holds the call: the database stops meanwhile


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with own_cluster("pg-ride") as made:
        yield made


@pytest.fixture
def provider() -> Iterator[JsonProvider]:
    with JsonProvider() as double:
        yield double


def _integrations(tmp_path, provider: JsonProvider, *, timeout_seconds: int = 10) -> str:
    path = tmp_path / "integrations.toml"
    path.write_text(
        '[contracts."payments.charge@1"]\n'
        'effect = "NON_IDEMPOTENT_WRITE"\n'
        "max_attempts = 3\n"
        f"timeout_seconds = {timeout_seconds}\n"
        "\n"
        '[routes."payments.charge@1"]\n'
        'adapter = "http.json"\n'
        f'url = "{provider.url("/charges")}"\n'
        'method = "POST"\n'
    )
    return str(path)


def _charge_in_outage(cluster: Cluster, provider: JsonProvider, worker: WorkerProcess, key: str):
    """Accept one charge; stop the database while the provider holds its call; return its id
    once the worker says its write waits for the database."""
    with psycopg.connect(cluster.env["DATABASE_URL"], autocommit=True) as conn:
        flow = create_flow(conn, flow_definition([action("charge", "payments.charge")], key=key))
        accepted = enqueue(conn, flow).execution_id
    provider.wait_for_calls(1, "/charges", timeout=TIMEOUT)
    cluster.stop()
    worker.wait_for_event("fenced write waits for the database; lease kept", timeout=TIMEOUT)
    return accepted


def test_outage__the_holder_writes_its_result_itself_once_the_database_is_back(
    cluster, provider, tmp_path
):
    provider.plan("/charges", slow(PROVIDER_HOLD))
    env = {**cluster.env, "INTEGRATIONS_FILE": _integrations(tmp_path, provider)}
    settings = {"WORKER_LEASE_SECONDS": "60", "WORKER_RENEW_SECONDS": "1"}
    with WorkerProcess(env, tmp_path / "worker.log", **settings) as worker:
        try:
            accepted = _charge_in_outage(cluster, provider, worker, "ride-1")
        finally:
            cluster.start()
        back_at = time.monotonic()
        with psycopg.connect(cluster.env["DATABASE_URL"], autocommit=True) as conn:
            wait_until(
                lambda: execution_row(conn, accepted)["status"] == "SUCCEEDED",
                timeout=TIMEOUT,
                what="the held execution to finish",
            )
            finished_after = time.monotonic() - back_at
            row = execution_row(conn, accepted)
        assert worker.process.poll() is None, worker.output()
    assert finished_after <= BACK_WITHIN, (finished_after, worker.output())
    assert provider.calls("/charges") == 1  # the adapter was not called again
    assert (row["attempts"], row["fencing_token"]) == (1, 1)  # never claimed again
    assert "fenced write retried after the outage" in worker.output()
    assert not [e for e in worker.events() if e.get("logger") == "executions.worker" and "exc" in e]


def test_outage__past_the_lease_the_write_is_given_up_and_fencing_decides(
    cluster, provider, tmp_path
):
    provider.plan("/charges", slow(PROVIDER_HOLD))
    # A call's timeout must fit in half the lease: 5 s for a 10 s lease, above the provider's hold.
    integrations = _integrations(tmp_path, provider, timeout_seconds=5)
    env = {**cluster.env, "INTEGRATIONS_FILE": integrations}
    settings = {"WORKER_LEASE_SECONDS": "10", "WORKER_RENEW_SECONDS": "2"}
    with WorkerProcess(env, tmp_path / "worker.log", **settings) as worker:
        try:
            accepted = _charge_in_outage(cluster, provider, worker, "ride-2")
            worker.wait_for_event("fenced write given up: lease lost", timeout=TIMEOUT)
        finally:
            cluster.start()
        with psycopg.connect(cluster.env["DATABASE_URL"], autocommit=True) as conn:
            wait_until(
                lambda: execution_row(conn, accepted)["status"] == "RECONCILIATION_REQUIRED",
                timeout=TIMEOUT,
                what="the write to go to an operator",
            )
            row = execution_row(conn, accepted)
    assert provider.calls("/charges") == 1  # an uncertain write is never sent twice
    assert (row["error_code"], row["attempts"]) == ("UNCERTAIN_WRITE", 2)
