"""Route limits in PostgreSQL (executions/queue/limits.py): a call a limit holds back parks its
execution with no attempt started, and wakes when a call in flight ends or at its turn; a dead
holder's place comes back with its lease; a 429 and an operator pause the route; a worker
stopped cleanly withdraws the limits it declared. A rate's moments: test_route_rates.py."""

import dataclasses
import datetime
import threading

import psycopg
import pytest

from actions.base import ActionResult, Outcome, RouteLimits
from executions.models import Execution
from executions.queue.claims import execution_claim_passed
from executions.queue.limits import (
    RATE_HORIZON_SECONDS,
    LimitsConflict,
    limits_declare,
    limits_withdraw,
    route_end,
    route_lease_release,
    route_lease_renew,
    route_lease_take,
    route_operator_pause,
    route_stats,
    route_sweep,
    route_take,
    throttled_each,
)
from executions.queue.steps import run_sync
from executions.worker.limiter import PAUSES
from executions.worker.wire import Ending
from tests.support.meteredprovider import route_tables_clear
from tests.support.worker import (
    FAST,
    GateAdapter,
    ScriptedAdapter,
    action,
    binding,
    checkpoint_rows,
    claim,
    enqueue,
    execution_row,
    expire_lease,
    registry,
    run_claim,
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


def test_take__max_in_flight_full__parks_without_an_attempt_and_wakes_when_it_ends(
    conn, make_flow, runtime_dsn
):
    gate = GateAdapter()
    reg = registry(limited(gate, max_in_flight=1))
    flow = make_flow([action("a", "p.lim")])
    first, second = enqueue(conn, flow), enqueue(conn, flow)
    runtime = runtime_for(runtime_dsn, reg, slots=2)
    try:
        (holder,) = claim(conn, "worker-a", lease_seconds=30)
        results = []
        running = threading.Thread(target=lambda: results.append(run_claim(runtime, holder)))
        running.start()
        assert gate.entered.wait(10)

        held_back = run_next(conn, runtime, owner="worker-b", lease_seconds=30)

        waiting = (holder.execution_id == first.execution_id and second) or first
        assert held_back.status == Ending.SUSPENDED
        row = execution_row(conn, waiting.execution_id)
        assert (row["status"], row["lease_owner"]) == ("PENDING", None)
        assert row["next_attempt_at"] > datetime.datetime.now(datetime.UTC) + datetime.timedelta(
            minutes=5
        )
        assert checkpoint_rows(conn, waiting.execution_id) == {}  # no attempt started
        assert parked_row(conn, waiting.execution_id) == ("a", ROUTE, None)
        execution = Execution.objects.get(id=waiting.execution_id)
        assert throttled_each([execution]) == {
            str(waiting.execution_id): {"actionId": "a", "capability": ROUTE, "until": None}
        }

        gate.gate.set()
        running.join(10)
        assert results[0].status == Ending.COMPLETED
        # The ending woke it: due now, and it runs to the end with its first attempt.
        wait_until(
            lambda: (
                execution_row(conn, waiting.execution_id)["next_attempt_at"]
                <= datetime.datetime.now(datetime.UTC)
            ),
            what="the parked execution to be woken",
        )
        assert run_next(conn, runtime, owner="worker-b").status == Ending.COMPLETED
        assert checkpoint_rows(conn, waiting.execution_id)["a"]["attempt"] == 1
        assert len(gate.calls) == 2
    finally:
        gate.gate.set()
        runtime.close()


def test_take__dead_holder__its_place_comes_back_once_its_lease_expires(
    conn, make_flow, runtime_dsn
):
    adapter = ScriptedAdapter()
    reg = registry(limited(adapter, max_in_flight=1))
    flow = make_flow([action("a", "p.lim")])
    dead, alive = enqueue(conn, flow), enqueue(conn, flow)
    (holder,) = claim(conn, "worker-dead", lease_seconds=1.0)
    # The holder took its place, then died (never ended it, never renewed its lease).
    taken = run_sync(
        conn,
        route_take(
            fence=holder.fence,
            route=reg.resolve("p.lim", 1).route,
            action_id="a",
            attempt=1,
            limits=RouteLimits(max_in_flight=1),
        ),
    )
    assert taken.granted
    other = alive if holder.execution_id == dead.execution_id else dead
    runtime = runtime_for(runtime_dsn, reg)
    try:
        assert run_next(conn, runtime, lease_seconds=30).status == Ending.SUSPENDED
        assert execution_row(conn, other.execution_id)["status"] == "PENDING"

        expire_lease(conn, holder.execution_id)
        woken, _ = run_sync(conn, route_sweep())

        assert woken == 1
        assert run_next(conn, runtime, lease_seconds=30).status == Ending.COMPLETED
        assert len(adapter.calls) == 1
    finally:
        runtime.close()


def _take(conn, dispatch, route):
    return run_sync(
        conn,
        route_take(
            fence=dispatch.fence,
            route=route,
            action_id="a",
            attempt=1,
            limits=RouteLimits(max_in_flight=1),
        ),
    )


def _in_flight(conn):
    (stats,) = [s for s in route_stats(conn.cursor()) if s.route == ROUTE]
    return stats.in_flight


def test_handoff__the_end_claims_the_oldest_parked_with_its_place__no_take_no_second_place(
    conn, make_flow, runtime_dsn
):
    reg = registry(limited(ScriptedAdapter(), max_in_flight=1))
    route = reg.resolve("p.lim", 1).route
    flow = make_flow([action("a", "p.lim")])
    for _ in range(4):
        enqueue(conn, flow)
    holder, oldest, younger, late = (claim(conn, f"w{n}", lease_seconds=30)[0] for n in range(4))
    first = _take(conn, holder, route)
    assert first.granted
    assert not _take(conn, oldest, route).granted
    assert not _take(conn, younger, route).granted

    (passed,) = run_sync(
        conn,
        execution_claim_passed(owner="w0", route=ROUTE, call_id=first.call_id, lease_seconds=30),
    )

    assert passed.execution_id == oldest.execution_id
    assert passed.fence.token == oldest.fence.token + 1
    assert (passed.place.action_id, passed.place.attempt) == ("a", 1)
    row = execution_row(conn, passed.execution_id)
    assert (row["status"], row["lease_owner"]) == ("RUNNING", "w0")
    assert conn.execute(
        "SELECT ended_at IS NOT NULL FROM route_call WHERE id = %s", [first.call_id]
    ).fetchone() == (True,)
    assert conn.execute(
        "SELECT kind, execution_id, fencing_token, attempt FROM route_call WHERE id = %s",
        [passed.place.call_id],
    ).fetchone() == ("passed", passed.execution_id, passed.fence.token, 1)
    assert _in_flight(conn) == 1  # the place went on: never two at once
    assert not _take(conn, late, route).granted  # nor free for anyone else
    assert parked_row(conn, younger.execution_id) == ("a", ROUTE, None)
    assert parked_row(conn, passed.execution_id) is None


def test_tenant_order__the_handoff_and_the_wake_take_the_lowest_rank_within_its_tenant_first(
    conn, make_flow, runtime_dsn
):
    """A route declared `tenant` (WORKER_FAIRNESS=tenant, migration 0021): tenant a holds a
    place and parked first twice, tenant b parked once after them; b's first turn comes before
    a's second, then a's in age order, as the claim orders them."""
    reg = registry(limited(ScriptedAdapter(), max_in_flight=1))
    route = reg.resolve("p.lim", 1).route
    flow = make_flow([action("a", "p.lim")])
    for scope in ("a", "a", "a", "b"):
        enqueue(conn, flow, scope=scope)
    holder, a1, a2, b1 = (claim(conn, f"w{n}", lease_seconds=30)[0] for n in range(4))
    first = _take(conn, holder, route)
    assert first.granted
    for parked in (a1, a2, b1):
        assert not _take(conn, parked, route).granted
    assert conn.execute(
        "SELECT scope FROM route_park WHERE execution_id = %s", [b1.execution_id]
    ).fetchone() == ("b",)
    conn.execute("UPDATE route_limit SET wake_order = 'tenant' WHERE route = %s", [ROUTE])

    (passed,) = run_sync(
        conn,
        execution_claim_passed(owner="w0", route=ROUTE, call_id=first.call_id, lease_seconds=30),
    )
    assert passed.execution_id == b1.execution_id  # rank 1 in b; a's oldest is rank 2 in a

    assert run_sync(conn, route_end(route=route, call_id=passed.place.call_id)) == 1
    assert parked_row(conn, a1.execution_id)[2] is not None  # woken: due now
    assert parked_row(conn, a2.execution_id) == ("a", ROUTE, None)  # still waits


_PARK_STATE = """
SELECT e.status, e.next_attempt_at > clock_timestamp() + interval '5 minutes', e.attempts,
       e.fencing_token, p.action_id, p.route, p.until, p.fencing_token = e.fencing_token
  FROM execution AS e LEFT JOIN route_park AS p ON p.execution_id = e.id
 WHERE e.id = %s
"""


def test_take__full__parks_the_due_fresh_executions_of_its_flow_beside_it_in_one_statement(
    conn, make_flow, runtime_dsn
):
    """Until parked, a held-back backlog is due work older than any other route's: the take
    that parks one parks the others of its flow and transition too (migration 0022), with no
    attempt and no token spent, so the next claim takes the other route's work at once."""
    reg = registry(limited(ScriptedAdapter(), max_in_flight=1))
    route = reg.resolve("p.lim", 1).route
    flow, other_flow = make_flow([action("a", "p.lim")]), make_flow([action("b", "NO_OP")])
    holder_accepted = enqueue(conn, flow)
    backlog = [enqueue(conn, flow).execution_id for _ in range(5)]
    other = enqueue(conn, other_flow).execution_id
    (holder,) = claim(conn, "w0", lease_seconds=30)
    assert holder.execution_id == holder_accepted.execution_id
    first = _take(conn, holder, route)
    assert first.granted
    (held_back,) = claim(conn, "w1", lease_seconds=30)
    assert held_back.execution_id == backlog[0]

    assert not _take(conn, held_back, route).granted

    for execution_id in backlog:
        status, not_due, attempts, token, *park, matches = conn.execute(
            _PARK_STATE, [execution_id]
        ).fetchone()
        assert (status, not_due, park, matches) == ("PENDING", True, ["a", ROUTE, None], True)
        if execution_id != held_back.execution_id:  # never claimed: nothing spent
            assert (attempts, token) == (0, 0)
    (claimed,) = claim(conn, "w2", lease_seconds=30)  # the other route's, at once
    assert claimed.execution_id == other
    assert claim(conn, "w2", lease_seconds=30) == []
    # The place goes to them in claim order, the one the take parked first.
    passed = run_sync(
        conn,
        execution_claim_passed(owner="w0", route=ROUTE, call_id=first.call_id, lease_seconds=30),
    )
    assert [d.execution_id for d in passed] == [backlog[0]]
    passed = run_sync(
        conn,
        execution_claim_passed(
            owner="w0", route=ROUTE, call_id=passed[0].place.call_id, lease_seconds=30
        ),
    )
    assert [d.execution_id for d in passed] == [backlog[1]]
    assert _in_flight(conn) == 1


def test_take__paused__parks_the_due_fresh_executions_of_its_flow_until_the_pause_ends(
    conn, make_flow, runtime_dsn
):
    reg = registry(limited(ScriptedAdapter(), max_in_flight=5))
    route = reg.resolve("p.lim", 1).route
    flow, other_flow = make_flow([action("a", "p.lim")]), make_flow([action("x", "NO_OP")])
    backlog = [enqueue(conn, flow).execution_id for _ in range(3)]
    elsewhere = enqueue(conn, other_flow).execution_id
    until = datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=1)
    route_operator_pause(route=ROUTE, until=until, actor="admin:ops", reason="incident")
    (held_back,) = claim(conn, "w1", lease_seconds=30)

    assert not _take(conn, held_back, route).granted

    for execution_id in backlog:
        assert parked_row(conn, execution_id) == ("a", ROUTE, until)
        assert execution_row(conn, execution_id)["next_attempt_at"] == until
    assert parked_row(conn, elsewhere) is None
    assert route_operator_pause(route=ROUTE, until=None, actor="admin:ops", reason="over") == 3


def test_handoff__nothing_parked__the_call_ends_and_nothing_is_claimed(
    conn, make_flow, runtime_dsn
):
    reg = registry(limited(ScriptedAdapter(), max_in_flight=1))
    route = reg.resolve("p.lim", 1).route
    flow = make_flow([action("a", "p.lim")])
    enqueue(conn, flow)
    (holder,) = claim(conn, "w0", lease_seconds=30)
    first = _take(conn, holder, route)

    claimed = run_sync(
        conn,
        execution_claim_passed(owner="w0", route=ROUTE, call_id=first.call_id, lease_seconds=30),
    )

    assert claimed == []
    assert _in_flight(conn) == 0
    assert conn.execute(
        "SELECT in_flight FROM route_limit WHERE route = %s", [ROUTE]
    ).fetchone() == (0,)


def test_handoff__the_worker_that_claimed_it_dies__the_place_comes_back_within_a_lease(
    conn, make_flow, runtime_dsn
):
    adapter = ScriptedAdapter()
    reg = registry(limited(adapter, max_in_flight=1))
    route = reg.resolve("p.lim", 1).route
    flow = make_flow([action("a", "p.lim")])
    for _ in range(3):
        enqueue(conn, flow)
    holder, oldest, younger = (claim(conn, f"w{n}", lease_seconds=30)[0] for n in range(3))
    first = _take(conn, holder, route)
    assert not _take(conn, oldest, route).granted
    assert not _take(conn, younger, route).granted
    (passed,) = run_sync(
        conn,
        execution_claim_passed(owner="w0", route=ROUTE, call_id=first.call_id, lease_seconds=1),
    )

    # w0 died before it called: its lease expires, the sweep gives the place to the next one.
    expire_lease(conn, passed.execution_id)
    woken, _ = run_sync(conn, route_sweep())

    assert woken == 1
    assert execution_row(conn, younger.execution_id)["next_attempt_at"] <= datetime.datetime.now(
        datetime.UTC
    )


def test_handoff__one_parked_while_the_claim_waited_for_the_route__claimed_not_stranded(
    conn, make_flow, runtime_dsn
):
    """The handoff's claim waits for the route's row lock while another take parks its
    execution; the function then picks that execution, parked after the claim's statement
    began. The claim must take it: its park is gone and it is due an hour away, so a claim that
    took nothing would strand it for that hour (the chaos test's limited route caught one)."""
    reg = registry(limited(ScriptedAdapter(), max_in_flight=1))
    route = reg.resolve("p.lim", 1).route
    flow = make_flow([action("a", "p.lim")])
    for _ in range(2):
        enqueue(conn, flow)
    holder, late = (claim(conn, f"w{n}", lease_seconds=30)[0] for n in range(2))
    first = _take(conn, holder, route)
    assert first.granted
    claimed: list = []
    with (
        psycopg.connect(runtime_dsn, autocommit=True) as taker,
        psycopg.connect(runtime_dsn, autocommit=True) as ender,
    ):
        ending = threading.Thread(
            target=lambda: claimed.extend(
                run_sync(
                    ender,
                    execution_claim_passed(
                        owner="w0", route=ROUTE, call_id=first.call_id, lease_seconds=30
                    ),
                )
            )
        )
        with taker.transaction():  # the take parks `late`, holding the route's row lock
            assert not _take(taker, late, route).granted
            ending.start()
            wait_until(
                lambda: conn.execute(
                    "SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = %s",
                    [ender.info.backend_pid],
                ).fetchone()[0],
                what="the handoff's claim to wait for the route's row lock",
            )
        ending.join(10)  # the take committed: the claim goes on
        assert not ending.is_alive()

    assert [d.execution_id for d in claimed] == [late.execution_id]
    row = execution_row(conn, late.execution_id)
    assert (row["status"], row["lease_owner"]) == ("RUNNING", "w0")
    assert parked_row(conn, late.execution_id) is None


def test_provider_429__pauses_the_route_for_the_next_call(conn, make_flow, runtime_dsn):
    adapter = ScriptedAdapter(
        script=[
            ActionResult(
                outcome=Outcome.TRANSIENT,
                error_code="TRANSIENT_FAILURE",
                retry_after=30.0,
                rate_limited=True,
            )
        ]
    )
    # No limits: an unlimited route is paused too (FAST caps a Retry-After at 0.2 s, so
    # WORKER_RETRY_AFTER_MAX_SECONDS is raised here).
    reg = registry(binding("p.lim", adapter))
    flow = make_flow([action("a", "p.lim")])
    first, second = enqueue(conn, flow), enqueue(conn, flow)
    config = dataclasses.replace(FAST, retry_after_max_seconds=20.0)
    runtime = runtime_for(runtime_dsn, reg, config=config)
    try:
        assert run_next(conn, runtime, lease_seconds=30).status == Ending.FAILED  # RETRY_WAIT
        (paused_until, paused_by) = conn.execute(
            "SELECT paused_until, paused_by FROM route_limit WHERE route = %s", [ROUTE]
        ).fetchone()
        now = datetime.datetime.now(datetime.UTC)
        assert (
            now + datetime.timedelta(seconds=15)
            < paused_until
            < now + datetime.timedelta(seconds=21)
        )
        assert paused_by == "provider"

        assert run_next(conn, runtime, lease_seconds=30).status == Ending.SUSPENDED
        assert len(adapter.calls) == 1
        waiting = {first.execution_id, second.execution_id}
        parked = [e for e in waiting if execution_row(conn, e)["status"] == "PENDING"]
        assert len(parked) == 1
        assert parked_row(conn, parked[0])[2] == paused_until
    finally:
        runtime.close()


def test_operator_pause_and_resume__audited_and_parked_work_due_on_resume(
    conn, make_flow, runtime_dsn
):
    adapter = ScriptedAdapter()
    reg = registry(limited(adapter, max_in_flight=5))
    flow = make_flow([action("a", "p.lim")])
    accepted = enqueue(conn, flow)
    until = datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=1)
    route_operator_pause(route=ROUTE, until=until, actor="admin:ops", reason="provider incident")
    runtime = runtime_for(runtime_dsn, reg)
    try:
        assert run_next(conn, runtime, lease_seconds=30).status == Ending.SUSPENDED
        assert execution_row(conn, accepted.execution_id)["next_attempt_at"] == until
        assert adapter.calls == []

        due = route_operator_pause(route=ROUTE, until=None, actor="admin:ops", reason="over")

        assert due == 1
        assert run_next(conn, runtime, lease_seconds=30).status == Ending.COMPLETED
        events = conn.execute(
            "SELECT type, actor, reason, until FROM route_event WHERE route = %s ORDER BY id",
            [ROUTE],
        ).fetchall()
        assert events == [
            ("PAUSED", "admin:ops", "provider incident", until),
            ("RESUMED", "admin:ops", "over", None),
        ]
    finally:
        runtime.close()


def test_purge__removes_the_records_of_ended_calls(conn, make_flow, runtime_dsn):
    from executions.queue.history import history_purge

    adapter = ScriptedAdapter()
    reg = registry(limited(adapter, max_in_flight=2))
    flow = make_flow([action("a", "p.lim")])
    enqueue(conn, flow)
    runtime = runtime_for(runtime_dsn, reg)
    try:
        assert run_next(conn, runtime, lease_seconds=30).status == Ending.COMPLETED
    finally:
        runtime.close()
    conn.execute("UPDATE route_call SET ended_at = ended_at - interval '3 days'")

    result = history_purge(older_than_days=1, pause_seconds=0)

    assert result.route_calls == 1
    assert conn.execute("SELECT count(*) FROM route_call").fetchone()[0] == 0


def test_lookup__counts_against_max_in_flight_and_is_never_parked(conn, make_flow, runtime_dsn):
    from executions.queue.limits import lookup_place, lookup_place_end

    route = limited(ScriptedAdapter(), max_in_flight=1).route

    first = lookup_place(route=route, hold_seconds=5)
    second = lookup_place(route=route, hold_seconds=5)
    lookup_place_end(route=route, call_id=first)
    third = lookup_place(route=route, hold_seconds=5)

    assert first is not None and second is None and third is not None
    assert conn.execute(
        "SELECT kind, execution_id, held_until > started_at FROM route_call WHERE id = %s",
        [third],
    ).fetchone() == ("lookup", None, True)
    assert conn.execute("SELECT count(*) FROM route_park").fetchone()[0] == 0


def _registered(conn, owner):
    """A worker's registry row as its heartbeat writes it: seen now, live for two leases."""
    conn.execute(
        "INSERT INTO worker_process (owner, host, pid, started_at, last_seen_at, concurrency,"
        "                            running, renew_seconds, lease_seconds, version)"
        " VALUES (%s, 'h', 1, clock_timestamp(), clock_timestamp(), 1, 0, 0.5, 30, 't')",
        [owner],
    )


def test_withdraw__a_stopped_workers_limits_hold_no_start_back__a_live_ones_still_do(conn):
    """A worker stopped cleanly withdraws what it declared (limits_withdraw): the routes it
    declared last pass to another live worker, so a start with other limits is still refused,
    naming that one; once every worker stopped, it starts. A killed worker withdraws nothing:
    its limits hold a start back until its registry row ages out, as before."""
    four = [limited(ScriptedAdapter(), max_in_flight=4).route]
    five = [limited(ScriptedAdapter(), max_in_flight=5).route]
    for owner in ("a", "b"):
        _registered(conn, owner)
        limits_declare(owner=owner, routes=four)

    limits_withdraw(owner="b")  # the last to declare
    with pytest.raises(LimitsConflict, match="live worker a enforces max_in_flight = 4"):
        limits_declare(owner="c", routes=five)
    limits_withdraw(owner="a")
    _registered(conn, "c")
    limits_declare(owner="c", routes=five)  # killed next: it withdraws nothing
    with pytest.raises(LimitsConflict, match="live worker c enforces max_in_flight = 5"):
        limits_declare(owner="d", routes=four)

    stopped = conn.execute(
        "SELECT owner FROM worker_process WHERE stopped_at IS NOT NULL ORDER BY owner"
    ).fetchall()
    assert stopped == [("a",), ("b",)]
    assert conn.execute(
        "SELECT max_in_flight, declared_by FROM route_limit WHERE route = %s", [ROUTE]
    ).fetchone() == (5, "c")


def _lease(conn, route, owner, places, share=0, hold=30.0):
    return run_sync(
        conn,
        route_lease_take(route=route, owner=owner, places=places, share=share, hold_seconds=hold),
    )


def test_lease__counted_whole__no_place_beyond_the_limit__refused_without_room(
    conn, make_flow, runtime_dsn
):
    reg = registry(limited(ScriptedAdapter(), max_in_flight=10))
    route = reg.resolve("p.lim", 1).route
    flow = make_flow([action("a", "p.lim")])
    for _ in range(3):
        enqueue(conn, flow)
    holders = claim(conn, "w", limit=3, lease_seconds=30)

    lease = _lease(conn, route, "worker-a", 8)

    assert lease is not None
    assert _lease(conn, route, "worker-b", 8) is None  # 8 + 8 > 10: refused, nothing counted
    taken = [
        run_sync(
            conn,
            route_take(
                fence=h.fence,
                route=route,
                action_id="a",
                attempt=1,
                limits=RouteLimits(max_in_flight=10),
            ),
        ).granted
        for h in holders
    ]
    assert taken == [True, True, False]  # 8 leased + 2: the third call is parked
    # What /metrics shows: calls in flight, the lease's as it last reported them.
    assert run_sync(
        conn, route_lease_renew(ids=[lease], in_use=[5], starts=[5], hold_seconds=30)
    ) == {lease}
    assert _in_flight(conn) == 2 + 5


def test_lease__not_renewed__its_places_come_back_once_its_hold_ends(conn, make_flow, runtime_dsn):
    reg = registry(limited(ScriptedAdapter(), max_in_flight=10))
    route = reg.resolve("p.lim", 1).route
    lease = _lease(conn, route, "worker-dead", 10, hold=0.5)
    assert lease is not None
    assert _lease(conn, route, "worker-b", 10) is None

    # worker-dead was killed: it never renews; its lease lapses and the next ask recounts.
    wait_until(lambda: _lease(conn, route, "worker-b", 10) is not None, what="the places back")
    assert (
        run_sync(conn, route_lease_renew(ids=[lease], in_use=[0], starts=[0], hold_seconds=30))
        == set()
    )  # a lapsed lease stays lapsed


def test_lease__a_share_of_the_rate_counts_in_every_window(conn, make_flow, runtime_dsn):
    reg = registry(limited(ScriptedAdapter(), rate_count=10, rate_window_seconds=60))
    route = reg.resolve("p.lim", 1).route
    flow = make_flow([action("a", "p.lim")])
    for _ in range(3):
        enqueue(conn, flow)
    holders = claim(conn, "w", limit=3, lease_seconds=30)
    lease = _lease(conn, route, "worker-a", 0, share=8)
    assert lease is not None

    limits = RouteLimits(rate_count=10, rate_window_seconds=60)
    granted = [
        run_sync(
            conn,
            route_take(fence=h.fence, route=route, action_id="a", attempt=1, limits=limits),
        )
        for h in holders
    ]

    # The share takes 8 starts of the window; calls taken one by one share the 2 left, each at
    # its moment W/2 after the one before: the first now, the others parked until their turns.
    assert [g.granted for g in granted] == [True, False, False]
    turns = sorted(g.until for g in granted[1:])
    assert turns[1] - turns[0] == datetime.timedelta(seconds=30)
    assert granted[0].at + datetime.timedelta(seconds=30 - RATE_HORIZON_SECONDS) <= turns[0]
    release = run_sync(conn, route_lease_release(route=ROUTE, call_id=lease))
    assert release is None
    # Given back, its share still counts for a window: its starts are inside it (8 + 1 + 2).
    assert _lease(conn, route, "worker-b", 0, share=2) is None
