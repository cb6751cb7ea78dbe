"""Plans of the hot-path statements: they stay key lookups and index walks whatever the statistics.

A queue fills in bursts, so the planner's statistics lag far behind it. These tests analyse the
tables while they are nearly empty, then fill them, and check the shape of each plan: the claim
walks execution_claim_idx in order without sorting, and the checkpoint writes lock each holder's
execution by its id, one lookup per item, instead of scanning every live execution.
"""

import json
from collections.abc import Iterator

import psycopg
import pytest
from psycopg.types.json import Jsonb

from executions import sql
from tests.support.worker import action, claim, enqueue

pytestmark = pytest.mark.django_db(transaction=True)

BACKLOG = 150  # executions accepted after the tables were analysed
RUNNING = 100  # of which claimed


def _nodes(plan: dict) -> Iterator[dict]:
    yield plan
    for child in plan.get("Plans", ()):
        yield from _nodes(child)


def _plan(conn: psycopg.Connection, statement: str, params: dict) -> list[dict]:
    """The plan's nodes, without running the statement (EXPLAIN only plans it)."""
    (row,) = conn.execute("EXPLAIN (FORMAT JSON) " + statement, params).fetchone()
    document = row if isinstance(row, list) else json.loads(row)
    return list(_nodes(document[0]["Plan"]))


@pytest.fixture
def stale_backlog(conn, make_flow, migration_dsn):
    """Statistics taken on near-empty tables, then a backlog with many RUNNING executions."""
    flow_id = make_flow([action("a", "NO_OP")])
    with psycopg.connect(migration_dsn, autocommit=True) as owner:
        owner.execute("ANALYZE execution")
        owner.execute("ANALYZE request")
    for _ in range(BACKLOG):
        enqueue(conn, flow_id, notify=False)
    return claim(conn, "worker-a", limit=RUNNING, lease_seconds=60)


def test_claim__walks_the_claim_index_in_order_without_a_sort(conn, runtime_dsn, stale_backlog):
    with psycopg.connect(runtime_dsn, autocommit=True) as claimer:
        claimer.execute(sql.WORKER_SESSION)
        claimer.execute(sql.CLAIM_SESSION)
        nodes = _plan(
            claimer, sql.CLAIM_EXECUTIONS, {"owner": "worker-b", "limit": 10, "lease_seconds": 60}
        )
    types = {node["Node Type"] for node in nodes}
    assert "Sort" not in types
    scans = [n for n in nodes if n.get("Relation Name") == "execution" and "Index Name" in n]
    assert any(n["Index Name"] == "execution_claim_idx" for n in scans)


@pytest.mark.parametrize(
    ("statement", "fields"),
    [
        (
            sql.CHECKPOINT_START,
            {
                "action_id": "a",
                "sequence": 0,
                "capability": "NO_OP",
                "capability_version": 1,
                "effect": "READ_ONLY",
                "input_hash": "h",
                "external_key": "k",
                "attempt": 1,
            },
        ),
        (sql.CHECKPOINT_SUCCEED, {"action_id": "a", "attempt": 1, "output": {}}),
    ],
    ids=["start", "succeed"],
)
def test_checkpoint_write__looks_up_each_holder_by_its_execution_id(
    conn, stale_backlog, statement, fields
):
    items = [
        {
            "execution_id": str(found.execution_id),
            "request_id": str(found.request_id),
            "token": found.token,
            "owner": "worker-a",
            **fields,
        }
        for found in stale_backlog[:3]
    ]
    conn.execute(sql.WORKER_SESSION)
    nodes = _plan(conn, statement, {"items": Jsonb(items), "synchronous_commit": "on"})
    # One lookup per item, keyed by that item's execution id (a primary-key lookup on a table
    # of any size; a tiny one may be read whole), never a join against every live execution.
    on_execution = [n for n in nodes if n.get("Relation Name") == "execution"]
    assert on_execution
    for node in on_execution:
        key = node.get("Index Cond") if "Index Name" in node else node.get("Filter")
        assert "(id = i.execution_id)" in key, node
        assert node.get("Index Name", "execution_pkey") == "execution_pkey", node
