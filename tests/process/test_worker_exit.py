"""A `runworker` that logs "worker stopped" exits, within WORKER_DRAIN_SECONDS of SIGTERM and
a margin, whatever it was doing: webhook deliveries in flight (to a receiver that never answers,
or whose name never resolves), a limited route's calls parked for a place, a provider that never
answers, or one whose name never resolves.

Before, a worker whose lookups (a receiver's or a provider's name) waited on a silent nameserver
logged "worker stopped" and stayed alive: uvloop's `close` runs the loop until every lookup
queued on libuv's four threads has ended, one resolver timeout after another
(actions/resolver.py).
"""

import signal
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
import pytest

from executions.webhooks.delivery import STOP_GRACE_SECONDS
from executions.webhooks.models import WebhookSubscription
from executions.webhooks.signing import secret_new
from tests.support import slowdns
from tests.support.meteredprovider import MeteredProvider, route_tables_clear
from tests.support.worker import (
    WorkerProcess,
    action,
    create_flow,
    enqueue,
    flow_definition,
    metered_integrations,
    wait_until,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.process]

DRAIN_SECONDS = 3
EXIT_MARGIN_SECONDS = 8  # past the drain: the stop grace, cancellations, the interpreter's exit
# From the "worker stopped" line to the exit, at most: the deliveries in flight get their grace
# then (docs/worker-protocol.md, "Shutdown and drain"), and the interpreter ends.
EXIT_AFTER_STOPPED_SECONDS = STOP_GRACE_SECONDS + 2.0
SLOW_NAME = "slow.test"  # no such name in /etc/hosts: the silent nameserver is asked
LOOKUP_SECONDS = 30  # what a lookup of it takes: far past the drain and the margin

NEEDS_NAMESERVER = pytest.mark.skipif(slowdns.usable() is not None, reason=str(slowdns.usable()))


@pytest.fixture(autouse=True)
def _route_tables_empty(migration_dsn):
    route_tables_clear(migration_dsn)
    yield
    route_tables_clear(migration_dsn)


@contextmanager
def silent_receiver() -> Iterator[str]:
    """A receiver on 127.0.0.1 that accepts connections and never answers: its URL."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1024)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except TimeoutError:
                continue
            except OSError:
                return

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.getsockname()[1]}/hook"
    finally:
        stop.set()
        thread.join(5)
        for conn in held:
            conn.close()
        server.close()


def backlog(migration_dsn: str, url: str, count: int) -> None:
    """`count` pings due now to one subscription at `url`."""
    subscription = WebhookSubscription.objects.create(
        tenant="acme", url=url, events=["execution.failed"], secret=secret_new()
    )
    with psycopg.connect(migration_dsn, autocommit=True) as conn:
        conn.execute(
            "WITH ev AS ("
            " INSERT INTO webhook_event (id, tenant, execution_id, type, data, created_at)"
            " SELECT gen_random_uuid(), 'acme', NULL, 'webhook.ping', '{}'::jsonb,"
            "        clock_timestamp() FROM generate_series(1, %(count)s) RETURNING id)"
            " INSERT INTO webhook_delivery (event_id, subscription_id, execution_id, status,"
            "  attempts, claim_token, next_attempt_at, retry_from, created_at)"
            " SELECT ev.id, %(subscription)s, NULL, 'PENDING', 0, 0, clock_timestamp(),"
            "        clock_timestamp(), clock_timestamp() FROM ev",
            {"count": count, "subscription": subscription.id},
        )


def in_flight(conn) -> int:
    """Deliveries claimed and not yet answered."""
    return conn.execute(
        "SELECT count(*) FROM webhook_delivery WHERE held_until > clock_timestamp()"
    ).fetchone()[0]


def parked(conn) -> int:
    return conn.execute("SELECT count(*) FROM route_park").fetchone()[0]


def stops_in_time(worker: WorkerProcess) -> None:
    """SIGTERM, then its exit: status 0 within the drain and a margin, its last lines said."""
    worker.signal(signal.SIGTERM)
    sent = time.monotonic()
    status, after_stopped = worker.wait_after_stopped(DRAIN_SECONDS + EXIT_MARGIN_SECONDS)
    took = time.monotonic() - sent
    output = worker.output()
    events = [e.get("event") for e in worker.events()]
    assert status == 0, output[-3000:]
    assert "worker draining" in events and "worker stopped" in events, output[-3000:]
    assert output.rstrip().endswith("worker stopped"), output[-3000:]  # the command's own line
    assert took < DRAIN_SECONDS + EXIT_MARGIN_SECONDS, took
    assert after_stopped < EXIT_AFTER_STOPPED_SECONDS, after_stopped


def start(process_env, tmp_path, url: str, limits: str = "", prefix=()) -> WorkerProcess:
    return WorkerProcess(
        {**process_env, "INTEGRATIONS_FILE": metered_integrations(tmp_path, url, limits)},
        tmp_path / "worker.log",
        command_prefix=prefix,
        WORKER_CONCURRENCY="10",
        WORKER_BATCH="10",
        WORKER_DRAIN_SECONDS=str(DRAIN_SECONDS),
        WORKER_LEASE_SECONDS="12",  # room for the contract's 5 s
        WORKER_RENEW_SECONDS="1",
        WEBHOOK_ALLOW_HTTP="true",
        WEBHOOK_ALLOW_PRIVATE_NETWORKS="true",  # the receiver is on 127.0.0.1
    )


def test_deliveries_in_flight_to_a_receiver_that_never_answers(
    process_env, runtime_conn, migration_dsn, tmp_path
):
    with silent_receiver() as receiver, MeteredProvider() as provider:
        backlog(migration_dsn, receiver, 500)
        with start(process_env, tmp_path, provider.url()) as worker:
            wait_until(lambda: in_flight(runtime_conn) >= 100, what="deliveries in flight")
            stops_in_time(worker)


@NEEDS_NAMESERVER
def test_deliveries_in_flight_to_a_receiver_whose_name_never_resolves(
    process_env, runtime_conn, migration_dsn, tmp_path
):
    with slowdns.SilentNameserver() as nameserver, MeteredProvider() as provider:
        backlog(migration_dsn, f"http://{SLOW_NAME}/hook", 500)
        prefix = slowdns.with_resolv_conf(nameserver.resolv_conf(tmp_path, LOOKUP_SECONDS))
        with start(process_env, tmp_path, provider.url(), prefix=prefix) as worker:
            wait_until(lambda: in_flight(runtime_conn) >= 100, what="deliveries in flight")
            wait_until(lambda: nameserver.queries >= 1, what="receivers' names looked up")
            stops_in_time(worker)


def test_a_limited_route_with_calls_parked_for_a_place(process_env, runtime_conn, tmp_path):
    flow = create_flow(runtime_conn, flow_definition([action("call", "metered.call")]))
    with MeteredProvider(delay=4.0) as provider:
        with start(process_env, tmp_path, provider.url(), "max_in_flight = 1\n") as worker:
            for _ in range(6):
                enqueue(runtime_conn, flow)
            wait_until(lambda: len(provider.answered()) == 1, what="the one call in flight")
            wait_until(lambda: parked(runtime_conn) >= 5, what="the others parked")
            stops_in_time(worker)


def test_a_provider_that_never_answers(process_env, runtime_conn, tmp_path):
    flow = create_flow(runtime_conn, flow_definition([action("call", "metered.call")]))
    with silent_receiver() as provider_url:
        with start(process_env, tmp_path, provider_url) as worker:
            ids = [enqueue(runtime_conn, flow).execution_id for _ in range(4)]
            wait_until(
                lambda: (
                    runtime_conn.execute(
                        "SELECT count(*) FROM action_execution WHERE execution_id = ANY(%s)"
                        " AND status = 'RUNNING'",
                        [ids],
                    ).fetchone()[0]
                    == 4
                ),
                what="four calls waiting for their answer",
            )
            stops_in_time(worker)


@NEEDS_NAMESERVER
def test_a_provider_whose_name_never_resolves(process_env, runtime_conn, tmp_path):
    flow = create_flow(runtime_conn, flow_definition([action("call", "metered.call")]))
    with slowdns.SilentNameserver() as nameserver:
        prefix = slowdns.with_resolv_conf(nameserver.resolv_conf(tmp_path, LOOKUP_SECONDS))
        url = f"http://{SLOW_NAME}:9/calls"
        with start(process_env, tmp_path, url, prefix=prefix) as worker:
            for _ in range(10):
                enqueue(runtime_conn, flow)
            # One lookup for them all: aiohttp shares a lookup of one host among its callers.
            wait_until(lambda: nameserver.queries >= 1, what="the provider's name looked up")
            stops_in_time(worker)
