"""WORKER_FAIRNESS: the claim's order, on real PostgreSQL, and the writes inside a worker.

`queue` takes due work oldest first. `tenant` takes it by rank within its tenant (the tenant's
executions held right now, plus its due ones ahead), then by age: every tenant's first turn
before any tenant's second, across claims, and a claimer passes over rows another claimer has
locked for that tenant's next ones. Inside a worker, a newcomer's writes go alone, ahead of a
big tenant's grouped batches (docs/adr/0019, "Inside the worker").
"""

import dataclasses

import psycopg
import pytest

from executions.sql.fairness import HELD_COUNTED
from tests.support.worker import (
    FAST,
    GateAdapter,
    action,
    binding,
    claim,
    enqueue,
    execution_row,
    registry,
    running_scheduler,
    wait_until,
)

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def flow_id(make_flow):
    return make_flow([action("a", "NO_OP")])


def _accept(conn, flow_id, scope: str, n: int) -> list:
    return [enqueue(conn, flow_id, scope=scope, notify=False).execution_id for _ in range(n)]


def _ids(dispatches) -> set:
    return {d.execution_id for d in dispatches}


def test_queue_order__is_oldest_first_whatever_the_tenant(conn, flow_id):
    a = _accept(conn, flow_id, "tenant-a", 5)
    b = _accept(conn, flow_id, "tenant-b", 2)
    assert _ids(claim(conn, "w", limit=3)) == set(a[:3])
    assert _ids(claim(conn, "w", limit=3, fairness="queue")) == {a[3], a[4], b[0]}


def test_tenant_order__takes_every_tenants_turn_before_any_tenants_next(conn, flow_id):
    a = _accept(conn, flow_id, "tenant-a", 6)
    b = _accept(conn, flow_id, "tenant-b", 2)
    c = _accept(conn, flow_id, "tenant-c", 1)
    # Ranks 1: a0, b0, c0 (by age); ranks 2: a1, b1.
    assert _ids(claim(conn, "w", limit=4, fairness="tenant")) == {a[0], b[0], c[0], a[1]}
    # Held now: a 2, b 1, c 1; so b1 ranks 2 and a2 ranks 3.
    assert _ids(claim(conn, "w", limit=1, fairness="tenant")) == {b[1]}
    assert _ids(claim(conn, "w", limit=2, fairness="tenant")) == {a[2], a[3]}


def test_tenant_order__a_backlog_held_in_flight_never_delays_a_new_tenant(conn, flow_id):
    backlog = _accept(conn, flow_id, "tenant-a", 40)
    assert len(claim(conn, "w", limit=10)) == 10  # tenant-a holds 10 now
    late = _accept(conn, flow_id, "tenant-b", 1)
    # In queue order the backlog's oldest goes first; by tenant, the newcomer's first turn.
    with conn.transaction(force_rollback=True):
        assert _ids(claim(conn, "w", limit=1)) == {backlog[10]}
    assert _ids(claim(conn, "w", limit=1, fairness="tenant")) == set(late)
    assert _ids(claim(conn, "w", limit=1, fairness="tenant")) == {backlog[10]}


def test_tenant_order__counts_held_executions_up_to_a_cap(conn, flow_id):
    cap = HELD_COUNTED
    a = _accept(conn, flow_id, "tenant-a", cap + 20)
    assert len(claim(conn, "w", limit=cap + 10)) == cap + 10  # tenant-a holds cap + 10
    b = _accept(conn, flow_id, "tenant-b", cap + 1)
    # tenant-a counts as holding cap: tenant-b's first cap turns come before its next one.
    assert _ids(claim(conn, "w", limit=cap, fairness="tenant")) == set(b[:cap])
    # Both hold cap or more now: equal ranks, so age decides (a full count would pick b[cap]).
    assert _ids(claim(conn, "w", limit=1, fairness="tenant")) == {a[cap + 10]}


def test_tenant_order__counts_due_retries_and_expired_leases_among_due_work(conn, flow_id):
    a = _accept(conn, flow_id, "tenant-a", 3)
    b = _accept(conn, flow_id, "tenant-b", 1)
    taken = claim(conn, "w", limit=1, lease_seconds=60)  # a0, held
    assert _ids(taken) == {a[0]}
    # a0's lease expires: it is due again, and tenant-a holds nothing live.
    conn.execute(
        "UPDATE execution SET lease_expires_at = now() - interval '1 second', "
        "next_attempt_at = now() - interval '1 second' WHERE id = %s",
        [a[0]],
    )
    assert _ids(claim(conn, "w2", limit=2, fairness="tenant")) == {a[0], b[0]}


def test_tenant_order__another_claimers_locked_rows_are_passed_over(conn, flow_id, runtime_dsn):
    a = _accept(conn, flow_id, "tenant-a", 6)
    b = _accept(conn, flow_id, "tenant-b", 6)
    with psycopg.connect(runtime_dsn) as first, first.transaction():
        # Not committed yet: its rows stay locked (and still look due) to the second claimer.
        mine = _ids(claim(first, "w1", limit=4, fairness="tenant"))
        assert mine == {a[0], a[1], b[0], b[1]}
        theirs = _ids(claim(conn, "w2", limit=4, fairness="tenant"))
    assert theirs == {a[2], a[3], b[2], b[3]}


def test_tenant_order__many_tenants_each_get_one_before_any_gets_two(conn, flow_id):
    firsts = [_accept(conn, flow_id, f"tenant-{n:02}", 3)[0] for n in range(12)]
    assert _ids(claim(conn, "w", limit=12, fairness="tenant")) == set(firsts)


def test_tenant_order__a_newcomers_writes_go_alone_beside_a_tenant_that_fills_the_worker(
    conn, flow_id, make_flow, runtime_dsn
):
    # Fifteen of tenant-a's runs hold fifteen of sixteen slots, inside their call; tenant-b's
    # request takes the last slot. One of sixteen is at most an eighth of an even share (8), so
    # its three writes are urgent: each alone, none in a's batches; a's are never urgent.
    gate = GateAdapter()
    held = _accept(conn, make_flow([action("a", "G")]), "tenant-a", 15)
    config = dataclasses.replace(FAST, concurrency=16, batch=16, fairness="tenant")
    with running_scheduler(runtime_dsn, registry(binding("G", gate)), config=config) as worker:
        writes = worker.runtime.writes
        wait_until(lambda: len(gate.calls) == 15, what="tenant-a's runs inside their calls")
        (late,) = _accept(conn, flow_id, "tenant-b", 1)
        wait_until(
            lambda: execution_row(conn, late)["status"] == "SUCCEEDED",
            what="tenant-b's run to finish beside them",
        )
        urgent = writes.urgent
        assert (urgent.starts.items, urgent.successes.items, urgent.finals.items) == (1, 1, 1)
        assert writes.starts.items == 15 and writes.finals.items == 0
        gate.gate.set()
        wait_until(
            lambda: all(execution_row(conn, e)["status"] == "SUCCEEDED" for e in held),
            what="tenant-a's runs to finish",
        )
    assert (urgent.starts.items, urgent.successes.items, urgent.finals.items) == (1, 1, 1)
    assert (writes.successes.items, writes.finals.items) == (15, 15)
