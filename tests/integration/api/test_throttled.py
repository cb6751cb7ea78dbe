"""`throttled` in the execution view: present while a route limit holds the execution's next
call back (PENDING), absent otherwise; in the list too, read in one statement per page."""

import dataclasses

import pytest

from actions.base import RouteLimits
from executions.queue.limits import route_take
from executions.queue.steps import run_sync
from tests.support.meteredprovider import route_tables_clear
from tests.support.worker import (
    ScriptedAdapter,
    action,
    binding,
    claim,
    create_flow,
    enqueue,
    flow_definition,
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
