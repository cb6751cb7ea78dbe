"""Plans of the hot-path statements: they stay key lookups and index walks whatever the statistics.

A queue fills in bursts, so the planner's statistics lag far behind it. These tests analyse the
tables while they are nearly empty, then fill them, and check the shape of each plan: the claim
walks execution_claim_idx in order without sorting, and the checkpoint writes lock each holder's
execution by its id, one lookup per item, instead of scanning every live execution. After
finished history was vacuumed while nothing was in flight, every fenced statement's generic plan
still finds its execution through execution_pkey, never by walking execution_claim_idx.
"""

import json
import re
from collections.abc import Iterator

import psycopg
import pytest
from psycopg import sql as pgsql
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
            "request_id": str(found.fence.request_id),
            "token": found.fence.token,
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


HISTORY = 20_000  # finished executions, analysed while nothing was in flight

# A finished execution of the history, as many as HISTORY, all under one request.
_HISTORY = """
INSERT INTO execution (id, request_id, flow_id, transition_id, status, accepted_revision,
                       attempts, fencing_token, actor_snapshot, finished_at)
SELECT gen_random_uuid(), %(request_id)s, %(flow_id)s, 'go', 'SUCCEEDED', 2, 1, 1, '{}',
       clock_timestamp()
  FROM generate_series(1, %(n)s)
"""


@pytest.fixture
def backlog_after_history(conn, make_flow, migration_dsn):
    """Finished history vacuumed while nothing was in flight, then a claimed backlog.

    The statistics then say execution_pkey is deep and execution_claim_idx is empty, however
    many rows the backlog has put in it since.
    """
    flow_id = make_flow([action("a", "NO_OP")])
    done = enqueue(conn, flow_id, notify=False)
    with psycopg.connect(migration_dsn, autocommit=True) as owner:
        owner.execute(
            "UPDATE execution SET status = 'SUCCEEDED', finished_at = clock_timestamp() "
            "WHERE id = %s",
            [done.execution_id],
        )
        owner.execute(_HISTORY, {"request_id": done.request_id, "flow_id": flow_id, "n": HISTORY})
        owner.execute("VACUUM ANALYZE execution")
        owner.execute("ANALYZE request")
    for _ in range(BACKLOG):
        enqueue(conn, flow_id, notify=False)
    return claim(conn, "worker-a", limit=RUNNING, lease_seconds=60)


# Parameters the statements below leave uncast, by type; any other is text.
_TYPES = {
    "execution_id": "uuid",
    "request_id": "uuid",
    "token": "bigint",
    "attempt": "integer",
    "output": "jsonb",
}


def _generic_plan(conn: psycopg.Connection, statement: str, params: dict) -> list[dict]:
    """The generic plan's nodes, as a worker connection runs the statement (not run here)."""
    names: list[str] = []

    def number(match: re.Match) -> str:
        if match.group(1) not in names:
            names.append(match.group(1))
        return f"${names.index(match.group(1)) + 1}"

    text = re.sub(r"%\((\w+)\)s", number, statement)
    types = ", ".join(_TYPES.get(name, "text") for name in names)
    conn.execute(f"PREPARE fenced ({types}) AS {text}")
    try:
        values = pgsql.SQL(", ").join(pgsql.Literal(params[name]) for name in names)
        query = pgsql.SQL("EXPLAIN (FORMAT JSON) EXECUTE fenced ({})").format(values)
        (row,) = conn.execute(query).fetchone()
    finally:
        conn.execute("DEALLOCATE fenced")
    document = row if isinstance(row, list) else json.loads(row)
    return list(_nodes(document[0]["Plan"]))


def _fence(found) -> dict:
    return {
        "execution_id": str(found.execution_id),
        "request_id": str(found.fence.request_id),
        "token": found.fence.token,
        "owner": "worker-a",
    }


def _fenced_statements(held) -> list[tuple[str, str, dict]]:
    fence = _fence(held[0])
    items = [_fence(found) for found in held[:3]]
    error = {"error_code": "E", "error_detail": "d"}
    return [
        ("probe", sql.LEASE_PROBE, fence),
        ("load", sql.LOAD_EXECUTION, fence),
        (
            "renew",
            sql.RENEW_LEASES,
            {
                "execution_ids": [i["execution_id"] for i in items],
                "request_ids": [i["request_id"] for i in items],
                "tokens": [i["token"] for i in items],
                "owner": "worker-a",
                "lease_seconds": 60,
            },
        ),
        (
            "start",
            sql.CHECKPOINT_START,
            {
                "items": Jsonb(
                    [
                        {
                            **i,
                            "action_id": "a",
                            "sequence": 0,
                            "capability": "NO_OP",
                            "capability_version": 1,
                            "effect": "READ_ONLY",
                            "input_hash": "h",
                            "external_key": "k",
                            "attempt": 1,
                        }
                        for i in items
                    ]
                ),
                "synchronous_commit": "on",
            },
        ),
        (
            "succeed",
            sql.CHECKPOINT_SUCCEED,
            {
                "items": Jsonb(
                    [{**i, "action_id": "a", "attempt": 1, "output": {}} for i in items]
                ),
                "synchronous_commit": "on",
            },
        ),
        (
            "settle",
            sql.CHECKPOINT_SETTLE,
            {
                **fence,
                **error,
                "action_id": "a",
                "attempt": 1,
                "status": "FAILED",
                "output": None,
            },
        ),
        ("retry", sql.EXECUTION_SCHEDULE_RETRY, {**fence, **error, "delay_seconds": 1}),
        ("fail", sql.EXECUTION_FAIL, {**fence, **error}),
        ("reconcile", sql.EXECUTION_REQUIRE_RECONCILIATION, {**fence, **error}),
        (
            "finalize",
            sql.EXECUTION_FINALIZE,
            {
                "items": Jsonb(
                    [
                        {
                            **i,
                            "from_state": "DRAFT",
                            "accepted_revision": 2,
                            "request_version": 2,
                            "action_ids": ["a"],
                            "data": {},
                            "target_state": "DONE",
                            "result": {},
                            "payload": {},
                        }
                        for i in items
                    ]
                ),
                "actor": "worker-a",
            },
        ),
    ]


def test_fenced_statements__find_their_execution_by_primary_key_after_history(
    conn, backlog_after_history
):
    conn.execute(sql.WORKER_SESSION)
    for name, statement, params in _fenced_statements(backlog_after_history):
        nodes = _generic_plan(conn, statement, params)
        on_execution = [
            n
            for n in nodes
            if n.get("Relation Name") == "execution" and n["Node Type"] != "ModifyTable"
        ]
        assert on_execution, name
        for node in on_execution:
            # execution_claim_idx counted empty would be walked end to end for the id on every
            # call; execution_pkey finds the row whatever the statistics say.
            assert node.get("Index Name") == "execution_pkey", (name, node)
