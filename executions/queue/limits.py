"""Route limits across every worker, kept in PostgreSQL (INTEGRATIONS.md#flow-control,
docs/adr/0022-route-limits-in-postgresql.md): the worker's and the prober's plans, declarations
at start, operators' pauses, and the reads of /metrics, the Workers page and `throttled`. The
statements are executions/sql/limits.py's; the worker's side is executions/worker/limiter.py.

Each plan is one statement in autocommit. Invariants: `route_take` (fenced) grants a place or
parks the execution (PENDING, lease cleared, no attempt started); a rate's start is granted a
moment W/N after the one before, kept or retaken (`route_retime`); a place counts only under its
holder's live lease (route_call_live); a lease of places counts whole (`route_lease_take`).
"""

import datetime
import json
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.db import connection

from actions.base import Route, RouteLimits

from .. import sql
from .leases import Fence
from .steps import Plan, Query, Steps

# seconds: how long an execution parked for a call in flight stays parked if nothing wakes it
# (the sweep of every worker wakes it much sooner; this bounds a fleet with no sweep at all).
PARK_FALLBACK_SECONDS = 3600.0
# seconds: a rate's start is granted for a moment at least RATE_LEAD_SECONDS ahead (its holder
# commits its RUNNING checkpoint meanwhile, and sends the call at the moment), and at most
# RATE_HORIZON_SECONDS: a later one parks the execution until its turn rather than hold a slot.
RATE_LEAD_SECONDS = 0.05
RATE_HORIZON_SECONDS = 0.25
# seconds: on a route whose parked executions wake in tenant order, a rate's turns are dealt to
# them at most this far ahead, each by the take or sweep that finds it due within that time: a
# tenant's first execution parked beside another's backlog waits about this long for its turn,
# not for the backlog (docs/adr/0022). The sweep runs about every second: no shorter.
RATE_DEAL_AHEAD_SECONDS = 1.0


@dataclass(frozen=True)
class Taken:
    """A take's answer: the call's place (`call_id`) and, on a route with a rate, the moment it
    may start (`at`, never before); or parked until `until` (None: until a call in flight
    ends), with `peers` more parked beside it at the turns after `until`, `turn_seconds`
    apart (a rate's; a place's or a pause's peers are parked until `until` too)."""

    call_id: int | None
    until: datetime.datetime | None
    at: datetime.datetime | None = None
    peers: int = 0
    turn_seconds: float = 0.0
    dealt_from: datetime.datetime | None = None
    dealt: int = 0

    def dealt_turns(self) -> list[datetime.datetime]:
        """The turns this take dealt to parked executions (a route that wakes them in tenant
        order), `turn_seconds` apart: the claim loop claims at each."""
        if self.dealt_from is None:
            return []
        step = datetime.timedelta(seconds=self.turn_seconds)
        return [self.dealt_from + turn * step for turn in range(self.dealt)]

    @property
    def granted(self) -> bool:
        return self.call_id is not None


class RouteSuperseded(Exception):
    """The holder's fence no longer held when it asked for a place (nothing was written)."""


def route_take(
    *, fence: Fence, route: Route, action_id: str, attempt: int, limits: RouteLimits | None
) -> Plan[Taken]:
    """A place for one call of `route` as the holder `fence`, or the execution parked."""
    return Plan(_take(fence, route, action_id, attempt, limits))


def _take(
    fence: Fence, route: Route, action_id: str, attempt: int, limits: RouteLimits | None
) -> Steps[Taken]:
    limits = limits or RouteLimits()
    row = yield Query(
        sql.ROUTE_CALL_TAKE,
        {
            **fence.params(),
            "route": route.key,
            "action_id": action_id,
            "attempt": attempt,
            "max_in_flight": limits.max_in_flight,
            "rate_count": limits.rate_count,
            "rate_window": limits.rate_window_seconds,
            "park_seconds": PARK_FALLBACK_SECONDS,
            "lead": RATE_LEAD_SECONDS,
            "horizon": RATE_HORIZON_SECONDS,
            "deal_ahead": RATE_DEAL_AHEAD_SECONDS,
        },
        fetch="one",
    )
    call_id, until, fenced, at, peers, turn_seconds, dealt_from, dealt = row
    if not fenced:
        raise RouteSuperseded(str(fence.execution_id))
    return Taken(call_id, until, at, peers, turn_seconds or 0.0, dealt_from, dealt)


def route_retime(*, route: Route, call_id: int) -> Plan[datetime.datetime]:
    """A new moment for a call granted one it would miss by too much: the route's next free
    one (never a park)."""
    return Plan(_retime(route, call_id))


def _retime(route: Route, call_id: int) -> Steps[datetime.datetime]:
    limits = route.limits or RouteLimits()
    row = yield Query(
        sql.ROUTE_CALL_RETIME,
        {
            "route": route.key,
            "call_id": call_id,
            "rate_count": limits.rate_count,
            "rate_window": limits.rate_window_seconds,
            "lead": RATE_LEAD_SECONDS,
        },
        fetch="one",
    )
    at: datetime.datetime = row[0]
    return at


def route_end(*, route: Route, call_id: int) -> Plan[int]:
    """End a call taken on a route with max_in_flight; wake one parked execution. Returns how
    many were woken."""
    return Plan(_end(route, call_id))


def _end(route: Route, call_id: int) -> Steps[int]:
    row = yield Query(sql.ROUTE_CALL_END, {"route": route.key, "call_id": call_id}, fetch="one")
    return int(row[0])


def route_lease_take(
    *, route: Route, owner: str, places: int, share: int, hold_seconds: float
) -> Plan[int | None]:
    """Lease `places` places and a share of `share` starts per window on `route` for `owner`
    (executions/worker/placebatches.py): the lease's id, or None when the route has not room
    for all of it now."""
    return Plan(_lease_take(route, owner, places, share, hold_seconds))


def _lease_take(
    route: Route, owner: str, places: int, share: int, hold_seconds: float
) -> Steps[int | None]:
    limits = route.limits or RouteLimits()
    row = yield Query(
        sql.ROUTE_LEASE_TAKE,
        {
            "route": route.key,
            "owner": owner,
            "places": places,
            "share": share,
            "max_in_flight": limits.max_in_flight,
            "rate_count": limits.rate_count,
            "rate_window": limits.rate_window_seconds,
            "hold_seconds": hold_seconds,
        },
        fetch="one",
    )
    return None if row is None else int(row[0])


def route_lease_renew(
    *, ids: list[int], in_use: list[int], starts: list[int], hold_seconds: float
) -> Plan[set[int]]:
    """Renew these leases, recording what each has in use and started in its window; returns
    the ids renewed (a lapsed lease is not)."""
    return Plan(_lease_renew(ids, in_use, starts, hold_seconds))


def _lease_renew(
    ids: list[int], in_use: list[int], starts: list[int], hold_seconds: float
) -> Steps[set[int]]:
    rows = yield Query(
        sql.ROUTE_LEASE_RENEW,
        {"ids": ids, "in_use": in_use, "starts": starts, "hold_seconds": hold_seconds},
        fetch="all",
    )
    return {int(row[0]) for row in rows}


def route_lease_release(*, route: str, call_id: int) -> Plan[None]:
    """Give a lease back: its places count out at once."""
    return Plan(_lease_release(route, call_id))


def _lease_release(route: str, call_id: int) -> Steps[None]:
    yield Query(sql.ROUTE_LEASE_RELEASE, {"route": route, "call_id": call_id}, fetch="one")


def route_sweep() -> Plan[tuple[int, dict[str, datetime.datetime]]]:
    """The sweep (every worker, about every second): wake what an ending missed; return how
    many were woken and the routes paused now, with their ends."""
    return Plan(_sweep())


def _sweep() -> Steps[tuple[int, dict[str, datetime.datetime]]]:
    woken = yield Query(
        sql.ROUTE_SWEEP,
        {
            "lead": RATE_LEAD_SECONDS,
            "horizon": RATE_HORIZON_SECONDS,
            "deal_ahead": RATE_DEAL_AHEAD_SECONDS,
        },
        fetch="one",
    )
    paused = yield Query(sql.ROUTE_PAUSES, fetch="all")
    return int(woken[0]), {route: until for route, until in paused}


def route_pause_by_provider(*, route: Route, seconds: float) -> Plan[datetime.datetime]:
    """A provider answered 429 with Retry-After `seconds` (already capped): pause the route."""
    return Plan(_pause_by_provider(route, seconds))


def _pause_by_provider(route: Route, seconds: float) -> Steps[datetime.datetime]:
    row = yield Query(
        sql.ROUTE_PAUSE_BY_PROVIDER, {"route": route.key, "seconds": seconds}, fetch="one"
    )
    until: datetime.datetime = row[0]
    return until


def limits_of(routes: Iterable[Route]) -> list[dict[str, Any]]:
    """The limits a worker declares: one entry per limited route."""
    return [
        {
            "route": route.key,
            "max_in_flight": route.limits.max_in_flight,
            "rate_count": route.limits.rate_count,
            "rate_window_seconds": route.limits.rate_window_seconds,
        }
        for route in routes
        if route.limits is not None
    ]


def lookup_place(*, route: Route, hold_seconds: float) -> int | None:
    """A place for one lookup by the prober on `route` (Django's connection, as the prober's
    steps run): its call id, or None when a limit holds it back (the probe asks later). On a
    route with a rate it returns at the moment granted, as a worker's call starts at its own
    (the prober's thread waits; at most RATE_HORIZON_SECONDS)."""
    limits = route.limits or RouteLimits()
    with connection.cursor() as cursor:
        cursor.execute(
            sql.ROUTE_LOOKUP_TAKE,
            {
                "route": route.key,
                "max_in_flight": limits.max_in_flight,
                "rate_count": limits.rate_count,
                "rate_window": limits.rate_window_seconds,
                "hold_seconds": hold_seconds,
                "lead": RATE_LEAD_SECONDS,
                "horizon": RATE_HORIZON_SECONDS,
            },
        )
        call_id, _, at = cursor.fetchone()
    while call_id is not None and at is not None:
        time.sleep(max(at.timestamp() - time.time(), 0.0))
        if time.time() <= at.timestamp() + late_seconds(route):
            break
        with connection.cursor() as cursor:  # missed by too much: a new moment
            cursor.execute(
                sql.ROUTE_CALL_RETIME,
                {
                    "route": route.key,
                    "call_id": call_id,
                    "rate_count": limits.rate_count,
                    "rate_window": limits.rate_window_seconds,
                    "lead": RATE_LEAD_SECONDS,
                },
            )
            at = cursor.fetchone()[0]
    return call_id


# seconds: the least a call may start after its moment (at high rates, where half the spacing
# is less than an event loop's wake-up can keep to)
LATE_FLOOR_SECONDS = 0.005


def late_seconds(route: Route) -> float:
    """How long after its moment a call of `route` may still start: three quarters of the
    spacing of the rate's moments (W/N; no less than LATE_FLOOR_SECONDS). Calls that each
    start within less than W/N of their moments never put N + 2 starts in a window of W; the
    last quarter is left to the way to the provider, whose delay varies too."""
    limits = route.limits
    if limits is None or limits.rate_count is None:
        return float("inf")
    spacing = float(limits.rate_window_seconds or 1) / limits.rate_count
    return max(spacing * 3 / 4, LATE_FLOOR_SECONDS)


def lookup_place_end(*, route: Route, call_id: int) -> None:
    """End a lookup's place on a route with max_in_flight (a rate's start is all it counts)."""
    if route.limits is None or route.limits.max_in_flight is None:
        return
    with connection.cursor() as cursor:
        cursor.execute(sql.ROUTE_CALL_END, {"route": route.key, "call_id": call_id})


class LimitsConflict(Exception):
    """Another live worker enforces other limits on a route; the message names both."""


def limits_declare(*, owner: str, routes: Iterable[Route], fairness: str = "queue") -> None:
    """Record the limits of this worker's routes at start (Django's connection), with the order
    their parked executions wake in (`fairness`, WORKER_FAIRNESS), unless another live worker
    declared other limits for one of them: then raise LimitsConflict."""
    mine = limits_of(routes)
    by_route = {entry["route"]: entry for entry in mine}
    params = {"owner": owner, "limits": json.dumps(mine), "wake_order": fairness}
    with connection.cursor() as cursor:
        cursor.execute(sql.LIMITS_CONFLICTS, params)
        conflicts = cursor.fetchall()
        if conflicts:
            route, other, max_in_flight, count, window = conflicts[0]
            theirs = RouteLimits(max_in_flight, count, window)
            own = by_route.get(route)
            ours = (
                RouteLimits(own["max_in_flight"], own["rate_count"], own["rate_window_seconds"])
                if own
                else RouteLimits()
            )
            raise LimitsConflict(
                f"route {route}: this worker enforces {limits_text(ours)}, live worker "
                f"{other} enforces {limits_text(theirs)}; every process must read the same "
                "INTEGRATIONS_FILE"
            )
        cursor.execute(sql.DECLARE_LIMITS, params)


def limits_withdraw(*, owner: str) -> None:
    """A worker that stopped cleanly (its work drained) withdraws the limits it declared at
    start (Django's connection): no later start counts it live, so a fleet stopped and started
    with other limits starts at once; a killed worker's count until its registry row ages out."""
    with connection.cursor() as cursor:
        cursor.execute(sql.LIMITS_WITHDRAW, {"owner": owner})


def limits_text(limits: RouteLimits) -> str:
    parts = []
    if limits.max_in_flight is not None:
        parts.append(f"max_in_flight = {limits.max_in_flight}")
    if limits.rate_limit is not None:
        parts.append(f'rate_limit = "{limits.rate_limit}"')
    return ", ".join(parts) or "no limit"


# -- operators --------------------------------------------------------------------------------

MAX_PAUSE_SECONDS = 7 * 24 * 3600  # seconds: an operator's pause lasts at most a week


def route_operator_pause(
    *, route: str, until: datetime.datetime | None, actor: str, reason: str
) -> int:
    """Pause `route` until `until` for every worker, or resume it (`until` None), recorded in
    route_event with `actor` and `reason`. Returns how many parked executions a resume made
    due."""
    with connection.cursor() as cursor:
        cursor.execute(
            sql.ROUTE_OPERATOR_PAUSE,
            {"route": route, "until": until, "actor": actor[:255], "reason": reason[:2000]},
        )
        due = cursor.fetchone()[0]
    return int(due)


# -- reads ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RouteStats:
    """One limited or paused route as /metrics and the Workers page show it."""

    route: str
    max_in_flight: int | None
    rate_limit: str | None
    paused_until: datetime.datetime | None
    paused_by: str | None
    pause_reason: str | None  # why it is paused, while it is
    in_flight: int
    window_calls: int
    parked: int


def route_stats(cursor: Any) -> list[RouteStats]:
    """Every limited or paused route, read with `cursor` (one statement)."""
    cursor.execute(sql.ROUTE_STATS)
    found = []
    for (
        route,
        max_in_flight,
        count,
        window,
        paused_until,
        paused_by,
        pause_reason,
        live,
        calls,
        parked,
    ) in cursor.fetchall():
        found.append(
            RouteStats(
                route=route,
                max_in_flight=max_in_flight,
                rate_limit=RouteLimits(None, count, window).rate_limit,
                paused_until=paused_until,
                paused_by=paused_by,
                pause_reason=pause_reason,
                in_flight=int(live),
                window_calls=int(calls),
                parked=int(parked),
            )
        )
    return found


def throttled_each(executions: Iterable[Any]) -> dict[str, dict[str, Any]]:
    """`throttled` ({actionId, capability, until}) of each execution a limit holds back, by id
    as text (a page's rows have no other), in one statement: PENDING and parked, or RUNNING
    and held by its worker until its rate's moment. None at all when no execution can be held
    back: only one claimed before (attempts > 0) can, so an acceptance's answer costs no
    statement."""
    parked, held = [], []
    for e in executions:
        if e.status == "PENDING" and e.attempts > 0:
            parked.append(e.id)
        elif e.status == "RUNNING":
            held.append(e.id)
    if not parked and not held:
        return {}
    with connection.cursor() as cursor:
        cursor.execute(sql.THROTTLED_OF, {"parked": parked, "held": held})
        rows = cursor.fetchall()
    return {
        execution_id: {"actionId": action_id, "capability": route, "until": until}
        for execution_id, action_id, route, until in rows
    }


__all__ = [
    "PARK_FALLBACK_SECONDS",
    "RATE_DEAL_AHEAD_SECONDS",
    "RATE_HORIZON_SECONDS",
    "RATE_LEAD_SECONDS",
    "LimitsConflict",
    "RouteStats",
    "RouteSuperseded",
    "Taken",
    "late_seconds",
    "limits_declare",
    "limits_withdraw",
    "lookup_place",
    "lookup_place_end",
    "route_end",
    "route_lease_release",
    "route_lease_renew",
    "route_lease_take",
    "route_operator_pause",
    "route_pause_by_provider",
    "route_retime",
    "route_stats",
    "route_sweep",
    "route_take",
    "throttled_each",
]
