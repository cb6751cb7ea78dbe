"""A rate's starts (executions/queue/limits.py, docs/adr/0022 "The window"): each granted for a
moment W/N after the one before, with no tolerance; the others parked until their turns, with
their fresh peers; the call sent at its moment, and one that missed it given another."""

import asyncio
import contextlib
import dataclasses
import datetime
import itertools

import psycopg
import pytest

from actions.base import RouteLimits
from executions import sql
from executions.queue.limits import RATE_HORIZON_SECONDS, route_stats, route_take
from executions.queue.steps import run_sync
from executions.worker.limiter import PAUSES, Moment
from executions.worker.wire import Ending
from tests.support.meteredprovider import route_tables_clear
from tests.support.worker import (
    ScriptedAdapter,
    action,
    binding,
    checkpoint_rows,
    claim,
    enqueue,
    execution_row,
    registry,
    run_next,
    runtime_for,
    wait_until,
)

pytestmark = pytest.mark.django_db(transaction=True)

ROUTE = "p.lim@1"


def limited(adapter, **limits):
    plain = binding("p.lim", adapter)
    return dataclasses.replace(
        plain, route=dataclasses.replace(plain.route, limits=RouteLimits(**limits))
    )


@pytest.fixture(autouse=True)
def _no_pauses_known(migration_dsn):
    route_tables_clear(migration_dsn)
    PAUSES.replace({})
    yield
    PAUSES.replace({})
    route_tables_clear(migration_dsn)  # nor left for the next test's metrics or claims


def parked_row(conn, execution_id):
    return conn.execute(
        "SELECT action_id, route, until FROM route_park WHERE execution_id = %s", [execution_id]
    ).fetchone()


def test_take__rate_limit__starts_w_over_n_apart__the_others_parked_until_their_turns(
    conn, make_flow, runtime_dsn
):
    """A rate grants each start for a moment W/N after the one before, with no tolerance
    (migration 0028): at 2/min, one call now and the others parked until their turns, a
    little before their moments 30 s and 60 s on; the take that parks one parks the due
    fresh executions of its flow with it, each at its own turn."""
    adapter = ScriptedAdapter()
    reg = registry(limited(adapter, rate_count=2, rate_window_seconds=60))
    flow = make_flow([action("a", "p.lim")])
    accepted = [enqueue(conn, flow) for _ in range(3)]
    runtime = runtime_for(runtime_dsn, reg)
    try:
        endings = [run_next(conn, runtime, lease_seconds=30).status for _ in range(2)]

        assert endings == [Ending.COMPLETED, Ending.SUSPENDED]
        assert claim(conn, "worker-b", lease_seconds=30) == []  # the third parked beside
        assert len(adapter.calls) == 1
        (moment,) = conn.execute(
            "SELECT started_at FROM route_call WHERE route = %s", [ROUTE]
        ).fetchone()
        waiting = [
            a for a in accepted if execution_row(conn, a.execution_id)["status"] == "PENDING"
        ]
        turns = sorted(parked_row(conn, a.execution_id)[2] for a in waiting)
        spacing = datetime.timedelta(seconds=30)
        lead = datetime.timedelta(seconds=RATE_HORIZON_SECONDS)  # turns come before moments
        assert moment + spacing - lead <= turns[0] < moment + spacing
        assert turns[1] - turns[0] == spacing
        assert {execution_row(conn, a.execution_id)["next_attempt_at"] for a in waiting} == set(
            turns
        )
        assert all(checkpoint_rows(conn, a.execution_id) == {} for a in waiting)
        (stats,) = [s for s in route_stats(conn.cursor()) if s.route == ROUTE]
        assert (stats.rate_limit, stats.window_calls, stats.parked) == ("2/min", 1, 2)
    finally:
        runtime.close()


def test_take__rate_limit__a_call_starts_at_its_moment_and_one_that_missed_it_gets_another(
    conn, make_flow, runtime_dsn
):
    """The worker sends a rate's call at the moment granted, after its RUNNING checkpoint,
    never before; a call that would start later than three quarters of the spacing after it
    takes the next free moment instead (executions/worker/limiter.py)."""
    adapter = ScriptedAdapter()
    reg = registry(limited(adapter, rate_count=5, rate_window_seconds=1))
    route = reg.resolve("p.lim", 1).route
    flow = make_flow([action("a", "p.lim")])
    for _ in range(2):
        enqueue(conn, flow)
    runtime = runtime_for(runtime_dsn, reg)
    try:
        assert run_next(conn, runtime, lease_seconds=30).status == Ending.COMPLETED
        (first,) = conn.execute(
            "SELECT started_at FROM route_call WHERE route = %s", [ROUTE]
        ).fetchone()
        (holder,) = claim(conn, "worker-b", lease_seconds=30)
        taken = run_sync(
            conn,
            route_take(
                fence=holder.fence, route=route, action_id="a", attempt=1, limits=route.limits
            ),
        )
        assert taken.granted and taken.at >= first + datetime.timedelta(seconds=0.2)
        # Missed: past its moment by more than three quarters of the spacing (0.15 s).
        missed_by = datetime.timedelta(seconds=0.2)
        wait_until(
            lambda: datetime.datetime.now(datetime.UTC) > taken.at + missed_by,
            what="the moment missed",
        )

        async def start() -> datetime.datetime:
            async with await psycopg.AsyncConnection.connect(runtime_dsn, autocommit=True) as db:
                await Moment(db, route, taken)()
                return datetime.datetime.now(datetime.UTC)

        started = asyncio.run(start())
        (moved,) = conn.execute(
            "SELECT started_at FROM route_call WHERE id = %s", [taken.call_id]
        ).fetchone()
    finally:
        runtime.close()

    assert moved > taken.at + missed_by  # a new moment, the call's record moved to it
    assert moved <= started <= moved + datetime.timedelta(seconds=0.1)


def _turns(conn, execution_ids):
    rows = conn.execute(
        "SELECT p.execution_id, nullif(p.until, 'infinity'), e.next_attempt_at"
        "  FROM route_park AS p JOIN execution AS e ON e.id = p.execution_id"
        " WHERE p.execution_id = ANY(%s)",
        [list(execution_ids)],
    ).fetchall()
    return {execution_id: (until, due) for execution_id, until, due in rows}


@contextlib.contextmanager
def _tenant_backlog(conn, make_flow, runtime_dsn, count):
    """A route of 1/min declared `tenant` (migration 0031), `count` executions of tenant a on
    it, the first run (its call granted) and the second (parked with its peers, all undealt:
    the next turn is a minute away, past what is dealt ahead); yields the backlog, its flow and
    the runtime, closed after."""
    conn.execute(
        "INSERT INTO route_limit (route, rate_count, rate_window_seconds, wake_order)"
        " VALUES (%s, 1, 60, 'tenant')",
        [ROUTE],
    )
    reg = registry(limited(ScriptedAdapter(), rate_count=1, rate_window_seconds=60))
    flow = make_flow([action("a", "p.lim")])
    backlog = [enqueue(conn, flow, scope="a").execution_id for _ in range(count)]
    runtime = runtime_for(runtime_dsn, reg)
    try:
        endings = [run_next(conn, runtime, lease_seconds=30).status for _ in range(2)]
        assert endings == [Ending.COMPLETED, Ending.SUSPENDED]  # the second parks its peers
        yield backlog, flow, runtime
    finally:
        runtime.close()


def test_take__tenant_order__turns_dealt_to_the_lowest_rank_within_its_tenant_first(
    conn, make_flow, runtime_dsn
):
    """On a route declared `tenant` (migration 0031) a park for a rate is not handed the turn
    after every turn handed before it: it waits undealt, an hour away like a park for a place,
    and turns are dealt a little ahead in tenant order. Tenant b's one execution, parked after
    tenant a's backlog, gets the second turn dealt (rank 1 in b, after a's oldest, also rank 1),
    not the last; a's keep their age order."""
    with _tenant_backlog(conn, make_flow, runtime_dsn, 6) as (backlog, flow, runtime):
        b = enqueue(conn, flow, scope="b").execution_id
        assert run_next(conn, runtime, lease_seconds=30).status == Ending.SUSPENDED
    parked = [*backlog[1:], b]
    assert {until for until, _ in _turns(conn, parked).values()} == {None}
    hour_away = conn.execute("SELECT clock_timestamp() + interval '50 minutes'").fetchone()[0]
    assert all(due > hour_away for _, due in _turns(conn, parked).values())
    throttled = conn.execute(sql.THROTTLED_OF, {"parked": [b], "held": []}).fetchall()
    assert throttled == [(str(b), "a", ROUTE, None)]

    (dealt,) = conn.execute("SELECT route_sweep(0.05, 0.25, 600)").fetchone()

    assert dealt == len(parked)
    turns = _turns(conn, parked)
    order = sorted(parked, key=lambda execution_id: turns[execution_id][0])
    assert order == [backlog[1], b, *backlog[2:]]
    assert all(until == due for until, due in turns.values())
    spacing = {turns[y][0] - turns[x][0] for x, y in itertools.pairwise(order)}
    assert spacing == {datetime.timedelta(seconds=60)}


_UNDEALT_AGAIN = """
WITH p AS (
    UPDATE route_park SET until = 'infinity' WHERE execution_id <> %(back)s RETURNING execution_id
)
UPDATE execution AS e SET next_attempt_at = clock_timestamp() + interval '1 hour'
  FROM p WHERE e.id = p.execution_id
"""


def test_take__tenant_order__one_back_at_its_turn_and_parked_again_keeps_its_age(
    conn, make_flow, runtime_dsn
):
    """A turn's holder whose moment is still too far when it comes back (moments went to calls
    that missed theirs) parks again undealt, and keeps its age within its tenant: dealt again
    before the younger parks of its tenant, not after them."""
    with _tenant_backlog(conn, make_flow, runtime_dsn, 4) as (backlog, _, runtime):
        conn.execute("SELECT route_sweep(0.05, 0.25, 600)")
        back = backlog[1]  # the oldest parked: the first turn, made due now
        (parked_at,) = conn.execute(
            "SELECT parked_at FROM route_park WHERE execution_id = %s", [back]
        ).fetchone()
        conn.execute(
            "UPDATE route_park SET until = clock_timestamp() WHERE execution_id = %s", [back]
        )
        conn.execute(
            "UPDATE execution SET next_attempt_at = clock_timestamp() WHERE id = %s", [back]
        )
        conn.execute(_UNDEALT_AGAIN, {"back": back})
        conn.execute("UPDATE route_limit SET rate_next_at = NULL WHERE route = %s", [ROUTE])

        assert run_next(conn, runtime, lease_seconds=30).status == Ending.SUSPENDED

    assert conn.execute(
        "SELECT until = 'infinity', parked_at FROM route_park WHERE execution_id = %s", [back]
    ).fetchone() == (True, parked_at)
    conn.execute("SELECT route_sweep(0.05, 0.25, 600)")
    turns = _turns(conn, backlog[1:])
    assert min(backlog[1:], key=lambda execution_id: turns[execution_id][0]) == back


@pytest.mark.parametrize("rate", [(1, 60), (None, None)], ids=["queue", "no rate"])
def test_sweep__undealt_parks_left_by_tenant_order_are_dealt_whatever_the_route_is_now(
    conn, make_flow, runtime_dsn, rate
):
    """Parks left undealt by workers that declared the route `tenant` are not stranded for an
    hour when the fleet now declares it `queue`, or without a rate: the sweep deals them, at the
    route's turns, or all at once when it has no rate any more."""
    with _tenant_backlog(conn, make_flow, runtime_dsn, 3) as (backlog, _, _):
        pass
    assert {until for until, _ in _turns(conn, backlog[1:]).values()} == {None}
    conn.execute(
        "UPDATE route_limit SET wake_order = 'queue', rate_count = %s, rate_window_seconds = %s"
        " WHERE route = %s",
        [*rate, ROUTE],
    )

    (dealt,) = conn.execute("SELECT route_sweep(0.05, 0.25, 600)").fetchone()

    assert dealt == 2
    turns = _turns(conn, backlog[1:])
    assert all(until is not None and until == due for until, due in turns.values())
    now = conn.execute("SELECT clock_timestamp()").fetchone()[0]
    if rate == (None, None):
        assert all(until <= now for until, _ in turns.values())
