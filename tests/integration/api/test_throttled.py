"""`throttled` in the execution view: present while a route limit holds the execution's next
call back, parked (PENDING) or held by its worker until its rate's moment (RUNNING), absent
otherwise; in the list too, read in one statement per page."""

import dataclasses
import datetime
import json
import threading
import uuid

import psycopg
import pytest

from actions.base import ActionResult, Outcome, RouteLimits
from executions import sql
from executions.queue import limits as route_limits
from executions.queue.limits import route_take
from executions.queue.steps import run_sync
from executions.worker.wire import Ending
from tests.support.meteredprovider import route_tables_clear
from tests.support.plans import plan_nodes
from tests.support.worker import (
    ScriptedAdapter,
    action,
    binding,
    claim,
    create_flow,
    enqueue,
    flow_definition,
    registry,
    run_claim,
    runtime_for,
    wait_until,
)

from .conftest import api_enabled, caller

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _api(migration_dsn):
    route_tables_clear(migration_dsn)
    with api_enabled():
        yield
    route_tables_clear(migration_dsn)  # nor left for the next test's metrics or claims


def park(conn, flow_id, limits):
    """Accept an execution, claim it and have its call held back by `limits` (one full)."""
    accepted = enqueue(conn, flow_id)
    (holder,) = claim(conn, "worker-a", lease_seconds=30)
    route = dataclasses.replace(binding("p.lim", ScriptedAdapter()).route, limits=limits)
    taken = run_sync(
        conn, route_take(fence=holder.fence, route=route, action_id="a", attempt=1, limits=limits)
    )
    return accepted, taken


def test_view__throttled_while_parked_only(runtime_conn):
    flow_id = create_flow(runtime_conn, flow_definition([action("a", "p.lim")]))
    limits = RouteLimits(rate_count=1, rate_window_seconds=3600)
    first, granted = park(runtime_conn, flow_id, limits)
    second, held = park(runtime_conn, flow_id, limits)
    owner = caller(sub="alice", tenant="acme")

    view = owner.get(f"/api/v1/executions/{second.execution_id}").json()
    listed = {e["id"]: e for e in owner.get("/api/v1/executions?status=PENDING").json()["results"]}

    assert granted.granted and not held.granted
    assert view["status"] == "PENDING"
    assert view["throttled"]["actionId"] == "a"
    assert view["throttled"]["capability"] == "p.lim@1"
    assert view["throttled"]["until"].replace("Z", "+00:00") == held.until.isoformat()
    assert listed[str(second.execution_id)]["throttled"] == view["throttled"]
    # Its call granted, and its moment (RATE_LEAD_SECONDS on) come: held back no more.
    wait_until(lambda: datetime.datetime.now(datetime.UTC) > granted.at, what="its moment")
    first_view = owner.get(f"/api/v1/executions/{first.execution_id}").json()
    assert first_view["status"] == "RUNNING"
    assert "throttled" not in first_view


def test_view__other_tenant__not_found(runtime_conn):
    flow_id = create_flow(runtime_conn, flow_definition([action("a", "p.lim")]))
    limits = RouteLimits(max_in_flight=1)
    park(runtime_conn, flow_id, limits)
    second, held = park(runtime_conn, flow_id, limits)
    stranger = caller(sub="mallory", tenant="other")

    answer = stranger.get(f"/api/v1/executions/{second.execution_id}")

    assert held.until is None
    assert answer.status_code == 404


# seconds a rate's call waits for its moment in its worker, below: the reads made meanwhile
# outlast no such wait on a loaded machine.
HELD_SECONDS = 3.0


def test_view__throttled_while_its_worker_holds_it_for_its_rates_moment(
    runtime_conn, runtime_dsn, monkeypatch
):
    """A rate's call granted a moment below the parking horizon is held by its worker, which
    sends it at that moment (docs/adr/0022, "The window"): meanwhile the execution is RUNNING
    and its view, alone and in the list, carries `throttled` until that moment, as a parked
    one does until its turn; once the call went, it does not."""
    # Granted HELD_SECONDS ahead, not parked (the horizon past it): as a moment of a busy rate.
    monkeypatch.setattr(route_limits, "RATE_LEAD_SECONDS", HELD_SECONDS)
    monkeypatch.setattr(route_limits, "RATE_HORIZON_SECONDS", HELD_SECONDS + 1)
    called_at = []

    def answer(ctx):
        called_at.append(datetime.datetime.now(datetime.UTC))
        return ActionResult(outcome=Outcome.SUCCEEDED, output={})

    plain = binding("p.lim", ScriptedAdapter(script=[answer]))
    limits = RouteLimits(rate_count=1, rate_window_seconds=1)
    reg = registry(
        dataclasses.replace(plain, route=dataclasses.replace(plain.route, limits=limits))
    )
    flow_id = create_flow(runtime_conn, flow_definition([action("a", "p.lim")]))
    accepted = enqueue(runtime_conn, flow_id)
    owner = caller(sub="alice", tenant="acme")
    url = f"/api/v1/executions/{accepted.execution_id}"
    results = []
    runtime = runtime_for(runtime_dsn, reg)
    try:
        (holder,) = claim(runtime_conn, "worker-a", lease_seconds=30)
        running = threading.Thread(target=lambda: results.append(run_claim(runtime, holder)))
        running.start()
        (moment,) = wait_until(
            lambda: runtime_conn.execute(
                "SELECT started_at FROM route_call WHERE execution_id = %s",
                [accepted.execution_id],
            ).fetchone(),
            what="its call granted a moment",
        )
        view = owner.get(url).json()
        listed = owner.get("/api/v1/executions?status=RUNNING").json()["results"]
        read_while_held = datetime.datetime.now(datetime.UTC) < moment and not called_at
        running.join(30)
    finally:
        runtime.close()

    assert read_while_held
    assert view["status"] == "RUNNING"
    throttled = view["throttled"]  # the shape a parked execution shows
    assert sorted(throttled) == ["actionId", "capability", "until"]
    assert (throttled["actionId"], throttled["capability"]) == ("a", "p.lim@1")
    assert throttled["until"].replace("Z", "+00:00") == moment.isoformat()
    assert [e["throttled"] for e in listed if e["id"] == str(accepted.execution_id)] == [
        view["throttled"]
    ]
    assert results[0].status == Ending.COMPLETED
    assert called_at[0] >= moment  # it was held until then
    after = owner.get(url).json()
    assert after["status"] == "SUCCEEDED" and "throttled" not in after


# A rate-limited route's history of calls, long ended, and a dozen moments still ahead (a
# minute apart: still ahead when read, however loaded the machine).
_CALLS = """
INSERT INTO route_call (route, execution_id, action_id, attempt, fencing_token, started_at,
                        ended_at)
SELECT 'p.lim@1', gen_random_uuid(), 'a', 1, 1, at, at
  FROM (SELECT clock_timestamp() + make_interval(mins => n) AS at
          FROM generate_series(-%(n)s, 12) AS n) AS moments
"""
HISTORY = 20_000


def test_throttled_of__reads_only_the_moments_still_ahead_whatever_the_history(
    runtime_conn, migration_dsn
):
    """The read of `throttled` (sql.THROTTLED_OF) finds the calls held for their moment through
    route_call_started_idx, per limited route, reading only those still ahead: not the calls'
    history, which grows until purgehistory, with statistics of empty tables and fresh ones."""
    flow_id = create_flow(runtime_conn, flow_definition([action("a", "p.lim")]))
    for _ in range(3):
        enqueue(runtime_conn, flow_id)
    holders = claim(runtime_conn, "worker-a", limit=3, lease_seconds=30)
    held = [h.execution_id for h in holders]
    with psycopg.connect(migration_dsn, autocommit=True) as owner:
        owner.execute("ANALYZE route_limit, route_call, route_park, execution")
        owner.execute(
            "INSERT INTO route_limit (route, rate_count, rate_window_seconds)"
            " VALUES ('p.lim@1', 50, 1)"
        )
        owner.execute(_CALLS, {"n": HISTORY})
        for h in holders:  # each held for its moment, a minute ahead
            owner.execute(
                "INSERT INTO route_call (route, execution_id, action_id, attempt, fencing_token,"
                "                        started_at)"
                " VALUES ('p.lim@1', %s, 'a', 1, %s, clock_timestamp() + interval '1 minute')",
                [h.execution_id, h.fence.token],
            )
        for statistics in ("of empty tables", "fresh"):
            if statistics == "fresh":
                owner.execute("ANALYZE route_limit, route_call, route_park, execution")
            (row,) = runtime_conn.execute(
                "EXPLAIN (ANALYZE, FORMAT JSON) " + sql.THROTTLED_OF,
                {"parked": [uuid.uuid4()], "held": held},
            ).fetchone()
            document = row if isinstance(row, list) else json.loads(row)
            nodes = list(plan_nodes(document[0]["Plan"]))
            calls = [n for n in nodes if n.get("Relation Name") == "route_call"]
            assert [n["Node Type"] for n in calls if n["Node Type"] == "Seq Scan"] == []
            by_index = [n for n in nodes if n.get("Index Name") == "route_call_started_idx"]
            assert by_index, (statistics, [n["Node Type"] for n in calls])
            read = sum(
                (n["Actual Rows"] + n.get("Rows Removed by Filter", 0)) * n["Actual Loops"]
                for n in by_index
            )
            assert read == 12 + len(held), (statistics, read)
            assert document[0]["Plan"]["Actual Rows"] == len(held)
