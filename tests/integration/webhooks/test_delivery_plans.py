"""Plans of the delivery loop's claim and results: key lookups and index walks whatever the
statistics (docs/adr/0009). The outbox tables are analysed while empty, then hold hundreds of
settled deliveries and a few due ones; with a worker connection's session settings, neither
statement reads a delivery, an event or a subscription but through an index condition."""

import psycopg
import pytest
from psycopg.types.json import Jsonb

from executions import sql
from executions.worker.pooling import PoolingConfig
from tests.support.plans import planned

from .conftest import end, subscribe

pytestmark = pytest.mark.django_db(transaction=True)

SETTLED = 300  # delivered after the tables were analysed
DUE = 20

TABLES = ("webhook_delivery", "webhook_event", "webhook_subscription")


@pytest.fixture
def stale_outbox(runtime_conn, migration_dsn, accepted):
    with psycopg.connect(migration_dsn, autocommit=True) as owner:
        owner.execute("ANALYZE webhook_delivery, webhook_event, webhook_subscription")
    subscribe("https://hooks.example.com/a")
    for _ in range(SETTLED + DUE):
        end(runtime_conn, accepted(), "SUCCEEDED")
    runtime_conn.execute(
        "UPDATE webhook_delivery SET status = 'DELIVERED' WHERE id IN"
        " (SELECT id FROM webhook_delivery ORDER BY id LIMIT %s)",
        [SETTLED],
    )
    return runtime_conn


def _assert_by_index_conditions(nodes: list[dict]) -> None:
    for node in nodes:
        relation = node.get("Relation Name")
        if relation not in TABLES:
            continue
        kind = node["Node Type"]
        assert kind in ("Index Scan", "Index Only Scan", "Bitmap Heap Scan", "ModifyTable"), node
        if kind in ("Index Scan", "Index Only Scan"):
            # A lookup or a bounded walk (the due index, up to the statement's start), never a
            # walk of a whole index.
            assert "Index Cond" in node, node
    bitmap_indexes = [n for n in nodes if n["Node Type"] == "Bitmap Index Scan"]
    assert all("Index Cond" in n for n in bitmap_indexes), bitmap_indexes


def test_claim__reads_every_event_and_subscription_by_its_key(stale_outbox, runtime_dsn):
    with psycopg.connect(runtime_dsn, autocommit=True) as worker:
        for statement in PoolingConfig().session_statements(claims=False):
            worker.execute(statement)
        nodes = planned(worker, sql.WEBHOOK_DELIVERIES_CLAIM, {"limit": 50, "hold_seconds": 15.0})
    _assert_by_index_conditions(nodes)
    events = [n for n in nodes if n.get("Relation Name") == "webhook_event"]
    assert events and all(n.get("Index Name") == "webhook_event_pkey" for n in events)


def test_record__looks_up_each_delivery_by_its_key(stale_outbox, runtime_dsn):
    ids = [
        row[0]
        for row in stale_outbox.execute(
            "SELECT id FROM webhook_delivery WHERE status = 'PENDING' ORDER BY id"
        ).fetchall()
    ]
    items = [
        {"id": i, "token": 1, "delivered": True, "code": 200, "error": None, "body": "ok"}
        | {"delay": 0.0}
        for i in ids
    ]
    with psycopg.connect(runtime_dsn, autocommit=True) as worker:
        for statement in PoolingConfig().session_statements(claims=False):
            worker.execute(statement)
        nodes = planned(
            worker,
            sql.WEBHOOK_DELIVERIES_RECORD,
            {"items": Jsonb(items), "max_age_seconds": 3600.0},
        )
    _assert_by_index_conditions(nodes)
    deliveries = [
        n for n in nodes if n.get("Relation Name") == "webhook_delivery" and "Index Name" in n
    ]
    by_key = [n for n in deliveries if n.get("Parent Relationship") != "SubPlan"]
    assert by_key and all(n["Index Name"] == "webhook_delivery_pkey" for n in by_key)
    # Whether a later delivery of the same execution waits: one order-index lookup each.
    probes = [n for n in deliveries if n.get("Parent Relationship") == "SubPlan"]
    assert probes and all(n["Index Name"] == "webhook_delivery_exec_idx" for n in probes)


DRAINED = 20_000  # deliveries of a backlog come and gone before the connection plans


@pytest.fixture
def empty_outbox(migration_dsn):
    """The outbox as a new worker connection may first find it: no row, vacuumed (no page) and
    analysed, its indexes left as large as a drained backlog made them (the order index, of
    wider keys, the largest)."""
    hook = subscribe("https://hooks.example.com/a")
    with psycopg.connect(migration_dsn, autocommit=True) as owner:
        owner.execute(
            "WITH e AS (INSERT INTO webhook_event (id, tenant, execution_id, type, data)"
            " SELECT gen_random_uuid(), 'acme', gen_random_uuid(), 'execution.succeeded', '{}'"
            " FROM generate_series(1, %(n)s) RETURNING id, execution_id)"
            " INSERT INTO webhook_delivery (event_id, subscription_id, execution_id)"
            " SELECT e.id, %(hook)s, e.execution_id FROM e",
            {"n": DRAINED, "hook": hook.id},
        )
        owner.execute("ANALYZE webhook_delivery, webhook_event")  # seen during the backlog
        owner.execute("DELETE FROM webhook_delivery")
        owner.execute("DELETE FROM webhook_event")
        owner.execute("VACUUM ANALYZE webhook_delivery, webhook_event, webhook_subscription")


def _order_probes(nodes: list[dict]) -> list[dict]:
    deliveries = [n for n in nodes if n.get("Relation Name") == "webhook_delivery"]
    return [n for n in deliveries if n.get("Parent Relationship") == "SubPlan"]


def test_claim__planned_on_an_empty_outbox_probes_the_order_index(empty_outbox, runtime_dsn):
    """A connection keeps the plan it made first (a generic plan): made on an empty outbox, the
    earlier-delivery probe took the primary key (every delivery with a smaller id, per
    candidate) or the due index (every due delivery, per candidate)."""
    with psycopg.connect(runtime_dsn, autocommit=True) as worker:
        for statement in PoolingConfig().session_statements(claims=False):
            worker.execute(statement)
        nodes = planned(worker, sql.WEBHOOK_DELIVERIES_CLAIM, {"limit": 50, "hold_seconds": 15.0})
        written = planned(
            worker,
            sql.WEBHOOK_DELIVERIES_RECORD,
            {"items": Jsonb([]), "max_age_seconds": 3600.0},
        )
    for probes in (_order_probes(nodes), _order_probes(written)):
        assert probes and all(n["Index Name"] == "webhook_delivery_exec_idx" for n in probes)
        assert all("Index Cond" in n for n in probes)
