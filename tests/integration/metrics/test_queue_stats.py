"""The queue statistics behind GET /metrics, read as the runtime role against real PostgreSQL:
what they count, that they follow the queue, that they only read, and that each statement walks
its partial index and never the finished history."""

import psycopg
import pytest

from executions import sql
from executions.metrics.queuestats import QueueStats, queue_stats
from executions.webhooks.models import WebhookSubscription
from executions.webhooks.signing import secret_new
from tests.support.plans import plan_nodes
from tests.support.worker import action, claim, create_flow, enqueue, flow_definition

pytestmark = pytest.mark.django_db(transaction=True)


def read(conn) -> QueueStats:
    with conn.transaction(), conn.cursor() as cursor:
        return queue_stats(cursor=cursor)


def test_queue_stats__an_empty_queue_is_all_zeros(conn):
    assert read(conn) == QueueStats(
        depth={"PENDING": 0, "RETRY_WAIT": 0, "RUNNING": 0, "SUSPENDED": 0},
        due={"PENDING": 0, "RETRY_WAIT": 0, "RUNNING": 0, "SUSPENDED": 0},
        oldest_due_age_seconds=0.0,
        reconciliation_backlog=0,
        reconciliation_oldest_age_seconds=0.0,
        requests_blocked=0,
        webhooks_pending=0,
        webhooks_oldest_pending_age_seconds=0.0,
        webhook_subscriptions_failing=0,
    )


def test_queue_stats__counts_depth_due_work_and_ages_by_the_database_clock(conn, shaped_queue):
    stats = read(conn)

    assert stats.depth == {"PENDING": 1, "RETRY_WAIT": 2, "RUNNING": 2, "SUSPENDED": 0}
    # Due: the overdue PENDING, the overdue retry, and the RUNNING one whose lease expired.
    assert stats.due == {"PENDING": 1, "RETRY_WAIT": 1, "RUNNING": 1, "SUSPENDED": 0}
    assert 90 <= stats.oldest_due_age_seconds < 120
    assert stats.reconciliation_backlog == 1
    assert 3600 <= stats.reconciliation_oldest_age_seconds < 3630
    assert stats.requests_blocked == 6


def test_queue_stats__follow_the_queue_as_work_is_claimed_and_finished(conn, shaped_queue):
    (taken,) = claim(conn, "metrics-test", lease_seconds=60)  # the oldest due: the PENDING one
    assert taken.execution_id == shaped_queue["pending"].execution_id

    stats = read(conn)
    assert stats.depth == {"PENDING": 0, "RETRY_WAIT": 2, "RUNNING": 3, "SUSPENDED": 0}
    assert stats.due == {"PENDING": 0, "RETRY_WAIT": 1, "RUNNING": 1, "SUSPENDED": 0}
    # The oldest due one is now the RUNNING execution whose lease expired 30 s ago.
    assert 30 <= stats.oldest_due_age_seconds < 60

    conn.execute(
        "UPDATE execution SET status = 'SUCCEEDED', lease_owner = NULL, lease_expires_at = NULL,"
        " finished_at = clock_timestamp() WHERE status IN ('RUNNING', 'RETRY_WAIT')"
    )
    conn.execute("UPDATE request SET blocked_by_id = NULL WHERE blocked_by_id IS NOT NULL")
    stats = read(conn)
    assert stats.depth == {"PENDING": 0, "RETRY_WAIT": 0, "RUNNING": 0, "SUSPENDED": 0}
    assert stats.oldest_due_age_seconds == 0
    assert stats.requests_blocked == 0
    assert stats.reconciliation_backlog == 1  # only an operator clears that one


def test_queue_stats__run_in_a_read_only_transaction_with_a_statement_timeout(conn):
    with conn.transaction(), conn.cursor() as cursor:
        queue_stats(cursor=cursor)
        assert cursor.execute("SHOW statement_timeout").fetchone() == ("2s",)
        with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
            cursor.execute("UPDATE request SET version = version + 1")
    # Both settings were local to that transaction.
    assert conn.execute("SHOW statement_timeout").fetchone() == ("0",)


# ------------------------------------------------------------------------------
# Plans: partial indexes only, never the finished history
# ------------------------------------------------------------------------------
@pytest.fixture
def long_history(migration_dsn, conn):
    """20,000 finished executions beside a little live work, analysed as a real table would be."""
    flow_id = create_flow(conn, flow_definition([action("a", "NO_OP")], key="history"))
    with psycopg.connect(migration_dsn, autocommit=True) as owner:
        owner.execute(
            "INSERT INTO request (id, flow_id, owner, scope, data, state) "
            "SELECT gen_random_uuid(), %s, 'someone', 'tenant', '{}', 'DONE' "
            "FROM generate_series(1, 20000)",
            [flow_id],
        )
        owner.execute(
            "INSERT INTO execution (id, request_id, flow_id, transition_id, status, "
            "accepted_revision, attempts, actor_snapshot, finished_at) "
            "SELECT gen_random_uuid(), r.id, r.flow_id, 'go', "
            "(ARRAY['SUCCEEDED', 'FAILED', 'CANCELLED'])[1 + (row_number() OVER () % 3)], "
            "1, 1, '{}', clock_timestamp() FROM request AS r"
        )
        for _ in range(3):
            enqueue(conn, flow_id)
        owner.execute("ANALYZE execution")
        owner.execute("ANALYZE request")


@pytest.mark.parametrize(
    ("statement", "index"),
    [
        ("METRICS_QUEUE", "execution_claim_idx"),
        ("METRICS_RECONCILIATION", "execution_reconcile_idx"),
        ("METRICS_BLOCKED_REQUESTS", "request_blocked_idx"),
    ],
)
def test_metrics_statements__walk_their_partial_index_never_the_history(
    conn, long_history, statement, index
):
    (plan,) = conn.execute("EXPLAIN (FORMAT JSON) " + getattr(sql, statement)).fetchone()[0]
    nodes = list(plan_nodes(plan["Plan"]))
    assert not [n for n in nodes if n["Node Type"] == "Seq Scan"], nodes
    assert index in {n.get("Index Name") for n in nodes}, nodes


def test_queue_stats__count_webhook_deliveries_on_their_way_and_failing_subscriptions(conn):
    def subscribe(tenant: str, failures: int) -> WebhookSubscription:
        return WebhookSubscription.objects.create(
            tenant=tenant,
            url="https://hooks.example/orquestador",
            events=["execution.succeeded"],
            secret=secret_new(),
            consecutive_failures=failures,
        )

    subscribe("acme", failures=0)
    subscribe("acme", failures=3)  # failing: its last three attempts failed
    subscribe("globex", failures=2)  # not yet
    flow = create_flow(conn, flow_definition([action("noop", "NO_OP")]))
    ended = [enqueue(conn, flow, scope="acme").execution_id for _ in range(2)]
    # Ending them writes one delivery per acme subscription each (the outbox trigger).
    conn.execute(
        "UPDATE execution SET status = 'SUCCEEDED', finished_at = clock_timestamp()"
        " WHERE id = ANY(%s)",
        [ended],
    )
    conn.execute(
        "UPDATE webhook_delivery SET created_at = clock_timestamp() - interval '90 seconds'"
    )

    stats = read(conn)
    assert stats.webhooks_pending == 4
    assert 90 <= stats.webhooks_oldest_pending_age_seconds < 120
    assert stats.webhook_subscriptions_failing == 1

    conn.execute("UPDATE webhook_delivery SET status = 'DELIVERED', delivered_at = now()")
    stats = read(conn)
    assert (stats.webhooks_pending, stats.webhooks_oldest_pending_age_seconds) == (0, 0.0)
