"""A backlog of failing webhook deliveries leaves the adapters' calls alone: a real `runworker`
whose receivers' names resolve slowly (a nameserver on loopback that never answers:
tests/support/slowdns.py) still sends a limited route's calls to a 1.0 s provider at their pace.

Before, the deliveries resolved on the event loop's resolver, which under uvloop is libuv's pool
of four threads for the whole process, where each adapter connection's own lookup (uvloop's
sock_connect looks up even a numeric address) waited behind them: every call "timed out
connecting", and the provider saw none (actions/resolver.py).
"""

import signal

import psycopg
import pytest

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
    statuses,
    wait_until,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.process]

BACKLOG = 3000  # deliveries due, each to a receiver whose name resolves slowly
CALLS = 12  # executions, one call each, on a route with max_in_flight = 3
PROVIDER_SECONDS = 1.0  # what each call takes at the provider
IN_FLIGHT = 3
DRAIN_SECONDS = 5


@pytest.fixture(autouse=True)
def _route_tables_empty(migration_dsn):
    route_tables_clear(migration_dsn)
    yield
    route_tables_clear(migration_dsn)


def backlog(conn, subscription_id, count: int) -> None:
    """`count` pings due now for one subscription, as WEBHOOK_PING writes them."""
    conn.execute(
        "WITH ev AS ("
        " INSERT INTO webhook_event (id, tenant, execution_id, type, data, created_at)"
        " SELECT gen_random_uuid(), 'acme', NULL, 'webhook.ping', jsonb_build_object('n', g),"
        "        clock_timestamp() FROM generate_series(1, %(count)s) AS g RETURNING id)"
        " INSERT INTO webhook_delivery (event_id, subscription_id, execution_id, status,"
        "  attempts, claim_token, next_attempt_at, retry_from, created_at)"
        " SELECT ev.id, %(subscription)s, NULL, 'PENDING', 0, 0, clock_timestamp(),"
        "        clock_timestamp(), clock_timestamp() FROM ev",
        {"count": count, "subscription": subscription_id},
    )


def claimed(conn) -> int:
    return conn.execute("SELECT count(*) FROM webhook_delivery WHERE attempts > 0").fetchone()[0]


def settled(conn, ids) -> bool:
    return all(status in ("SUCCEEDED", "FAILED") for status in statuses(conn, ids))


@pytest.mark.skipif(slowdns.usable() is not None, reason=str(slowdns.usable()))
def test_failing_deliveries__a_limited_route_keeps_its_pace(
    process_env, runtime_conn, migration_dsn, tmp_path
):
    flow = create_flow(runtime_conn, flow_definition([action("call", "metered.call")]))
    with (
        slowdns.SilentNameserver() as nameserver,
        MeteredProvider(delay=PROVIDER_SECONDS) as provider,
    ):
        subscription = WebhookSubscription.objects.create(
            tenant="acme",
            url="https://receiver.slow.test/hook",
            events=["execution.failed"],
            secret=secret_new(),
        )
        with psycopg.connect(migration_dsn, autocommit=True) as owner:
            backlog(owner, subscription.id, BACKLOG)
        env = {
            **process_env,
            "INTEGRATIONS_FILE": metered_integrations(
                tmp_path, provider.url(), f"max_in_flight = {IN_FLIGHT}\n"
            ),
        }
        with WorkerProcess(
            env,
            tmp_path / "worker.log",
            command_prefix=slowdns.with_resolv_conf(nameserver.resolv_conf(tmp_path)),
            WORKER_CONCURRENCY="10",
            WORKER_BATCH="10",
            WORKER_DRAIN_SECONDS=str(DRAIN_SECONDS),
            WORKER_LEASE_SECONDS="12",  # room for the contract's 5 s
            WORKER_RENEW_SECONDS="1",
        ) as worker:
            # The delivery loop's attempts all in flight, each resolving its receiver's name.
            wait_until(
                lambda: worker.process.poll() is not None or claimed(runtime_conn) >= 100,
                timeout=30,
                what="deliveries in flight",
            )
            assert worker.process.poll() is None, worker.output()
            queries_before = nameserver.queries
            ids = [enqueue(runtime_conn, flow).execution_id for _ in range(CALLS)]
            wait_until(lambda: settled(runtime_conn, ids), timeout=40, what="the executions")
            queries_during = nameserver.queries - queries_before
            worker.signal(signal.SIGTERM)
            status = worker.wait(DRAIN_SECONDS + 10)
            output = worker.output()

    calls = provider.answered()
    errors = runtime_conn.execute(
        "SELECT DISTINCT error_detail FROM action_execution WHERE execution_id = ANY(%s)"
        " AND error_detail IS NOT NULL",
        [ids],
    ).fetchall()
    assert set(statuses(runtime_conn, ids)) == {"SUCCEEDED"}, (errors, output[-3000:])
    assert len(calls) == CALLS and {code for _, _, code in calls} == {200}
    assert provider.most == IN_FLIGHT  # the limit was reached, and held
    # At their pace: CALLS / IN_FLIGHT rounds of PROVIDER_SECONDS, the next call of a place
    # started as the one before ended (within a second: a hand-off, a checkpoint, a claim).
    rounds = CALLS // IN_FLIGHT
    span = max(end for _, end, _ in calls) - min(start for start, _, _ in calls)
    assert span < rounds * (PROVIDER_SECONDS + 1.0), span
    # Meanwhile the backlog kept its hundred lookups going (two queries each, A and AAAA).
    assert queries_during >= 50, queries_during
    assert claimed(runtime_conn) < BACKLOG  # and most of it still due: it never ran dry
    assert status == 0, output[-3000:]
