"""A worker's side of the route limits (executions/queue/limits.py; docs/worker-protocol.md and
docs/adr/0022-route-limits-in-postgresql.md): a call's place, moment, end and hand-off, the
provider's pauses (`ROUTE_PAUSES`), the sweeper (`RouteSweeper`), the turns (`wakeups.TURNS`).

Invariants: an unlimited route costs no statement unless known paused; one far above need takes
from places leased in a batch (placebatches.py); a limited call takes its place after the recovery
table and before its RUNNING checkpoint, one held back parked with no attempt started; a granted
call starts at its moment, never before nor past three quarters of the rate's spacing (`Moment`);
an end is sent as the adapter returns, claiming the woken execution when a slot is free (`Handoff`).
"""

import asyncio
import contextlib
import datetime
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NoReturn

from actions.base import ActionResult, Binding, Route
from actions.pools import start_gate

from ..models import ExecutionStatus
from ..queue.claims import Dispatch, Snapshot
from ..queue.leases import ExecutionSuperseded, Fence
from ..queue.limits import (
    RouteSuperseded,
    Taken,
    late_seconds,
    route_end,
    route_lease_release,
    route_lease_renew,
    route_lease_take,
    route_pause_by_provider,
    route_retime,
    route_sweep,
    route_take,
)
from ..queue.steps import Plan, run_sync
from .calls import Call
from .groupcommit import Database, on
from .loops import ConnectionSource
from .metrics import WorkerMetrics
from .placebatches import LEASES
from .runs import Run
from .stops import RunSuspended
from .wakeups import TURNS
from .wire import RunOutcome

logger = logging.getLogger("executions.worker")

THROTTLED_EVENT = "throttled"  # a parked run's `waiting_for`
SWEEP_SECONDS = 1.0  # seconds between two sweeps of one worker


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


class RoutePauses:
    """The routes this process knows to be paused, and until when (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._until: dict[str, datetime.datetime] = {}

    def paused(self, route: str) -> bool:
        until = self._until.get(route)
        return until is not None and until > _now()

    def note(self, route: str, until: datetime.datetime) -> None:
        with self._lock:
            if until > self._until.get(route, until - datetime.timedelta(seconds=1)):
                self._until[route] = until

    def replace(self, paused: dict[str, datetime.datetime]) -> None:
        with self._lock:
            self._until = dict(paused)


PAUSES = RoutePauses()  # this process's: read by every run, refreshed by the sweep


@dataclass(frozen=True)
class Handoff:
    """The dispatcher's side of a place passed on at a call's end (scheduler.py): `room` keeps
    a free slot for the execution the place may go to (False: none free, or stopping); `claim`
    is the statement that ends the call and claims that execution with the place
    (CLAIM_PASSED); `done` hands what it claimed to the kept slot, or frees it, with the
    seconds the statement took."""

    room: Callable[[], bool]
    claim: Callable[[str, int], Plan[list[Dispatch]]]
    done: Callable[[list[Dispatch], float], None]


def limited(route: Route) -> bool:
    """Whether a call of `route` takes a place first: it has limits, or is paused now."""
    return route.limits is not None or PAUSES.paused(route.key)


async def limited_call(run: Run, call: Call, snapshot: Snapshot) -> tuple[Call, ActionResult]:
    """One call of a run (a `Run`) with its prepared `call`: its RUNNING checkpoint
    (`run.start`) then the adapter (`run.call`), inside a place of its route when the route is
    limited; parks the execution instead (`RunSuspended`) when a limit holds the call back. A
    429 with Retry-After pauses the route."""
    route, db, log_extra = call.binding.route, run.db, run.log_extra
    if not limited(route):
        attempt = await run.start(call)
        result: ActionResult = await run.call(attempt, snapshot)
    # Far above need: a place of this process's lease, no statement (taken here at once, with
    # no coroutine: `leased` is awaited only when there is none to take from now).
    elif (not PAUSES.paused(key := route.key) and LEASES.take(key)) or await leased(
        db, route, owner=run.fence.owner
    ):
        try:
            attempt = await run.start(call)
            result = await run.call(attempt, snapshot)
        finally:
            LEASES.end(key)
    else:
        place = handed(run, call) or await place_take(
            db,
            fence=run.fence,
            binding=call.binding,
            action_id=call.start.action_id,
            attempt=call.start.attempt,
            log_extra=log_extra,
        )
        try:
            attempt = await run.start(call)
            if place.at is None:
                result = await run.call(attempt, snapshot)
            else:  # a rate's: the call starts at its moment
                moment = Moment(db, route, place)
                await moment()
                with start_gate(moment):
                    result = await run.call(attempt, snapshot)
        finally:
            await place_end(
                db, route=route, taken=place, log_extra=log_extra, handoff=run.deps.handoff
            )
    if result.rate_limited:
        await provider_pause(
            db,
            route=route,
            result=result,
            cap_seconds=run.deps.config.retry_after_max_seconds,
            log_extra=log_extra,
        )
    return attempt, result


# The lease asked for now, by route, on this process's loop (only its runs ask): the runs that
# find one asked for wait for its answer instead of each taking per call meanwhile.
_ASKING: dict[str, asyncio.Event] = {}


async def leased(db: Database, route: Route, *, owner: str) -> bool:
    """A place from this process's lease on `route` (placebatches.py), asking the limiter for
    the lease first when the route is far above need and has none; False: take per call."""
    if PAUSES.paused(route.key):
        return False
    if LEASES.take(route.key):
        return True
    terms = LEASES.terms(route)
    if terms is None:
        return False
    asking = _ASKING.get(route.key)
    if asking is not None:
        await asking.wait()  # another run of this process is asking: its answer serves all
        return LEASES.take(route.key)
    if not LEASES.ask(route.key):
        return False
    places, share = terms
    call_id = None
    asking = _ASKING[route.key] = asyncio.Event()
    try:
        call_id = await on(
            db,
            route_lease_take(
                route=route,
                owner=owner,
                places=places,
                share=share,
                hold_seconds=LEASES.hold_seconds,
            ),
        )
    except Exception:
        logger.debug("route lease not taken", extra={"capability": route.key}, exc_info=True)
    finally:
        window = float(route.limits.rate_window_seconds or 1) if route.limits else 1.0
        LEASES.answer(route.key, call_id, places=places, share=share, window=window)
        _ASKING.pop(route.key, None)
        asking.set()
    return LEASES.take(route.key)


# One take at a time from this process on a route with a rate: a burst of takes (a worker's start)
# must not hold every shared write connection while they wait for the route's row lock, or the
# RUNNING checkpoints of the calls they granted wait behind them and reach the provider in a
# bunch, above its rate. Not on a route limited by max_in_flight alone: its held-back calls must
# park at once, since until parked they are due work ahead of every other route's in the claim's
# order (taken one at a time, an unlimited route's pickup p99 beside such a backlog was 6 s).
_TAKING: dict[str, asyncio.Lock] = {}
_NO_WAIT = contextlib.nullcontext()


def handed(run: Run, call: Call) -> Taken | None:
    """The place granted with this run's claim (a call's end passed it: CLAIM_PASSED), once,
    for the action and attempt it was granted to. Any other (never seen: a parked action is the
    run's first call) is left to stop counting when the run moves past it."""
    place, run.handed = run.handed, None
    if place is None or (place.action_id, place.attempt) != (
        call.start.action_id,
        call.start.attempt,
    ):
        return None
    return Taken(call_id=place.call_id, until=None)


async def place_take(
    db: Database,
    *,
    fence: Fence,
    binding: Binding,
    action_id: str,
    attempt: int,
    log_extra: dict[str, Any],
) -> Taken:
    """A place for this call, or the run stops with its execution parked (`RunSuspended`,
    status PENDING); a holder that no longer holds the execution gets ExecutionSuperseded."""
    route = binding.route
    taking: contextlib.AbstractAsyncContextManager[Any] = _NO_WAIT
    if route.limits is not None and route.limits.rate_count is not None:
        taking = _TAKING.get(route.key) or _TAKING.setdefault(route.key, asyncio.Lock())
    try:
        async with taking:
            taken = await on(
                db,
                route_take(
                    fence=fence,
                    route=route,
                    action_id=action_id,
                    attempt=attempt,
                    limits=route.limits,
                ),
            )
    except RouteSuperseded:
        raise ExecutionSuperseded(fence.execution_id, step=f"take {action_id}") from None
    for dealt in taken.dealt_turns():  # dealt to parked executions, in tenant order
        TURNS.note(dealt)
    if taken.granted:
        return taken
    if taken.until is not None:  # the peers parked at the turns after its own
        for turn in range(1, taken.peers + 1):
            TURNS.note(taken.until + datetime.timedelta(seconds=turn * taken.turn_seconds))
    parked(action_id, route, taken.until, log_extra)


class Moment:
    """The moment granted to one call of a rate-limited route, kept (docs/adr/0022): awaited,
    it returns at that moment, never before it, and never more than `late_seconds` after it;
    a call that would start later takes the route's next free moment instead (its checkpoint,
    or its process, was slow), so the provider never sees it bunched with the next moment's.
    Awaited before the adapter is called, and again as its HTTP request is about to be written
    (actions.pools.start_gate): nothing that varies from call to call comes after that."""

    __slots__ = ("at", "call_id", "db", "late", "route")

    def __init__(self, db: Database, route: Route, taken: Taken) -> None:
        self.db, self.route, self.call_id = db, route, taken.call_id
        self.at = taken.at.timestamp() if taken.at is not None else 0.0
        self.late = late_seconds(route)

    async def __call__(self) -> None:
        while True:
            while (ahead := self.at - time.time()) > 0:
                await asyncio.sleep(ahead)
            late = time.time() - self.at
            if late <= self.late or self.call_id is None:
                return
            moment = await on(self.db, route_retime(route=self.route, call_id=self.call_id))
            self.at = moment.timestamp()
            if logger.isEnabledFor(logging.INFO):
                logger.info(
                    "route call retimed",
                    extra={"capability": self.route.key, "late_ms": round(late * 1000, 1)},
                )


def parked(
    action_id: str, route: Route, until: datetime.datetime | None, log_extra: dict[str, Any]
) -> NoReturn:
    """End the run: its execution was parked by the take (already written)."""
    if until is not None:
        TURNS.note(until)
    if logger.isEnabledFor(logging.INFO):
        logger.info(
            "execution throttled",
            extra={
                **log_extra,
                "action_id": action_id,
                "capability": route.key,
                "until": str(until),
            },
        )
    raise RunSuspended(
        RunOutcome(
            status=ExecutionStatus.PENDING,
            next_attempt_at=until,
            waiting_on=action_id,
            waiting_for=THROTTLED_EVENT,
        )
    )


async def place_end(
    db: Database,
    *,
    route: Route,
    taken: Taken,
    log_extra: dict,
    handoff: Handoff | None = None,
) -> None:
    """End a call's place on a route with max_in_flight (nothing to end for a rate alone: its
    start is all it counts), passing it to a parked execution this process then claims when it
    has a slot free (`handoff`). A database error is logged, not raised: the place stops
    counting once the checkpoint moves on, and the sweep wakes what this would have."""
    if taken.call_id is None or route.limits is None or route.limits.max_in_flight is None:
        return
    if handoff is None or route.limits.rate_count is not None or not handoff.room():
        try:
            await on(db, route_end(route=route, call_id=taken.call_id))
        except Exception:
            logger.warning("route place not ended; the sweep will", extra=log_extra, exc_info=True)
        return
    claimed: list[Dispatch] = []
    started = time.perf_counter()
    try:
        claimed = await on(db, handoff.claim(route.key, taken.call_id))
    except Exception:
        logger.warning("route place not ended; the sweep will", extra=log_extra, exc_info=True)
    finally:  # into the slot kept for it, or the slot is free again
        handoff.done(claimed, time.perf_counter() - started)


async def provider_pause(
    db: Database, *, route: Route, result: ActionResult, cap_seconds: float, log_extra: dict
) -> None:
    """A provider's 429 with Retry-After: pause its route for every worker until then."""
    if not result.rate_limited or result.retry_after is None or result.retry_after <= 0:
        return
    seconds = min(float(result.retry_after), cap_seconds)
    try:
        until = await on(db, route_pause_by_provider(route=route, seconds=seconds))
    except Exception:
        logger.warning("route pause not recorded", extra=log_extra, exc_info=True)
        return
    PAUSES.note(route.key, until)
    logger.warning(
        "route paused by its provider",
        extra={**log_extra, "capability": route.key, "until": until.isoformat()},
    )


class RouteSweeper(threading.Thread):
    """A worker loop (executions/worker/loops.py): about every SWEEP_SECONDS, on the prober's
    connection, one sweep (`route_sweep`) that wakes parked executions an ending missed and
    refreshes the pauses this process knows."""

    def __init__(
        self,
        *,
        owner: str,
        may_probe: Callable[[], bool],
        metrics: WorkerMetrics | None,
        source: ConnectionSource | None,
    ) -> None:
        super().__init__(name="route-sweeper", daemon=True)
        self.owner = owner
        self.source = source
        self.stop = threading.Event()

    def run(self) -> None:
        if self.source is None:  # a remote runtime: its endpoint's processes sweep
            return
        while not self.stop.wait(SWEEP_SECONDS):
            try:
                with self.source() as conn:
                    woken, paused = run_sync(conn, route_sweep())
                    self._renew(conn)
            except Exception:
                logger.debug("route sweep failed", extra={"owner": self.owner}, exc_info=True)
                continue
            PAUSES.replace(paused)
            if woken:
                logger.info("parked executions woken", extra={"owner": self.owner, "woken": woken})
        self._give_back()

    def _renew(self, conn: Any) -> None:
        """Renew this process's leases of places (placebatches.py), reporting their use."""
        ids, in_use, starts, at = LEASES.report()
        if not ids:
            return
        renewed = run_sync(
            conn,
            route_lease_renew(
                ids=ids, in_use=in_use, starts=starts, hold_seconds=LEASES.hold_seconds
            ),
        )
        LEASES.renewed(renewed, at)

    def _give_back(self) -> None:
        """Stopping: release this process's leases, so their places count out at once."""
        leases = LEASES.give_back()
        if not leases or self.source is None:
            return
        try:
            with self.source() as conn:
                for route, call_id in leases:
                    run_sync(conn, route_lease_release(route=route, call_id=call_id))
        except Exception:
            logger.debug("route leases not given back", extra={"owner": self.owner}, exc_info=True)
