"""The dispatcher of `runworker`: claim loop, LISTEN/NOTIFY wake-ups, heartbeat and shutdown, all
tasks on one event loop (docs/adr/0014-one-event-loop-per-worker.md; the protocol in
docs/worker-protocol.md: claim, lease, cancellation, shutdown, poison cap, connections).

Invariants: a claim asks for at most min(WORKER_BATCH, free slots) and each claimed `Dispatch`
starts at once (no local backlog), the local runtime running the holding itself; a slot is free once
its run's last call has answered, the execution held until its final commit; one connection claims
and LISTENs for work, webhooks and cancellations, polling every WORKER_POLL_MS; a superseded refusal
is settled, never retried; past WORKER_MAX_RECLAIMS a claim is settled, not run; 4 connections.
"""

import asyncio
import contextlib
import logging
import threading
import time
import uuid
from collections.abc import Callable

import psycopg

from orquestador import jsonlog
from orquestador.workerconfig import WorkerConfig

from .. import sql
from ..queue.claims import Dispatch, executions_claim
from ..queue.leases import lease_owner_name
from ..queue.steps import run_async
from .database import DatabaseState, WorkerConnections
from .endings import poison_settle
from .handoffs import Handoffs
from .heartbeat import Heartbeat
from .loopthread import DaemonThreads
from .metrics import WorkerMetrics
from .pooling import PoolingConfig
from .runtime import WorkerRuntime, dispatch_held
from .slots import Holding, Slots
from .wakeups import TURNS
from .writeretry import signal_wait

logger = logging.getLogger("executions.worker")

WAKE_CHECK_SECONDS = 0.25  # seconds: longest an idle wait goes without checking for shutdown
REFILL_WAIT_SECONDS = 0.002  # seconds: with a backlog (the last claim was full), wait this long
#                               for more slots to free up, so one claim fills several; never
#                               when work arrives by notification or poll
STOP_GRACE_SECONDS = 1.0  # seconds after the drain for signalled work to notice and stop
RECONNECT_FIRST_SECONDS = 0.1  # seconds before the first attempt to reach a database that went away
RECONNECT_MAX_SECONDS = 5.0  # seconds between attempts at most (the backoff doubles up to this)


class Scheduler:
    """Claims executions and runs them through a `WorkerRuntime` until told to stop; `run` is a
    coroutine, everything it starts runs on the same event loop."""

    def __init__(
        self,
        *,
        config: WorkerConfig,
        conninfo: str,
        runtime: WorkerRuntime,
        owner: str | None = None,
        metrics: WorkerMetrics | None = None,
        pooling: PoolingConfig | None = None,
    ) -> None:
        self.config = config
        self.connections = WorkerConnections(conninfo, pooling or PoolingConfig())
        self.runtime = runtime
        self.owner = owner or lease_owner_name()
        # Counters only: recording is one lock and an addition, never I/O (metrics.py).
        self.metrics = metrics or WorkerMetrics()
        self.metrics.track_slots(slots=config.concurrency, busy=lambda: self.busy)
        # Threading events: `request_stop` may come from a signal handler or another thread.
        self._stop_claiming = threading.Event()
        self._end_drain = threading.Event()
        self._stop_heartbeat = threading.Event()
        self.slots = Slots(by_tenant=config.fairness == "tenant")
        self._runs: dict[Holding, asyncio.Task[None]] = {}
        self.claimed = 0  # executions claimed by this scheduler, for tests and logs
        # When the database comes back, the runtime replaces the connections the outage broke
        # before any run borrows one.
        self.database = DatabaseState(
            self.owner, on_return=getattr(runtime, "refresh_connections", None)
        )
        borrow = getattr(runtime, "borrow", None)  # the local runtime's shared connections
        self.heartbeat = Heartbeat(
            config=config,
            owner=self.owner,
            slots=self.slots,
            metrics=self.metrics,
            runtime=runtime,
            database=self.database,
            connect=self.connections.plain,
            give_back=self._abandon,
            borrow=(lambda: borrow(timeout=config.renew_seconds)) if borrow else None,
        )
        self.outage_exit = False  # set when it stopped because of WORKER_DB_OUTAGE_EXIT_SECONDS
        self.drained = False  # set when it stopped with nothing abandoned: a clean stop
        self.running = threading.Event()  # set once it listens and claims
        self.idle = threading.Event()  # set while it waits for a notification or the poll
        self.finished = threading.Event()  # set when run() has returned
        # Called on the loop after each run ends (the webhook delivery loop's `poke`), and when
        # another writer announces webhook deliveries (its `notified`).
        self.after_run: Callable[[], None] | None = None
        self.webhooks_notified: Callable[[], None] | None = None
        # Slots kept for executions a route's place is being passed to (handoffs.py): the claim
        # loop leaves them free.
        self.handoffs = Handoffs(
            config=config,
            owner=self.owner,
            slots=self.slots,
            metrics=self.metrics,
            stopping=self._stop_claiming,
            outage=self._outage_within_lease,
            hand_to_slot=self._hand_to_slot,
        )
        hand_off_to = getattr(runtime, "hand_off_to", None)
        if hand_off_to is not None:
            hand_off_to(self.handoffs.handoff())

    # -- control ---------------------------------------------------------------------------

    def request_stop(self) -> None:
        """Stop claiming now and drain (signal-safe, thread-safe: only sets events). Twice: end
        the drain."""
        # Every wait in this module is bounded by WAKE_CHECK_SECONDS, so the events are seen
        # promptly.
        if self._stop_claiming.is_set():
            self._end_drain.set()
        self._stop_claiming.set()

    @property
    def busy(self) -> int:
        return self.slots.busy

    def occupants(self) -> list[Holding]:
        return self.slots.occupants()

    async def run(self) -> None:
        """Claim and run until `request_stop`, then drain and return."""
        loop = asyncio.get_running_loop()
        # What runs off the loop gets daemon threads, as many as calls at once, not the default
        # handful (a synchronous adapter's call would wait for one of those).
        loop.set_default_executor(DaemonThreads())
        heartbeat = loop.create_task(
            self.heartbeat.run(self._stop_heartbeat), name="worker-heartbeat"
        )
        logger.info(
            "worker started",
            extra={
                "owner": self.owner,
                "concurrency": self.config.concurrency,
                "batch": self.config.batch,
                "lease_seconds": self.config.lease_seconds,
            },
        )
        try:
            await self._claim_loop()
        finally:
            await self._shutdown(heartbeat)
            self.finished.set()

    # -- claiming --------------------------------------------------------------------------

    async def _claim_loop(self) -> None:
        conn: psycopg.AsyncConnection | None = None
        backlog = False  # the last claim took all it asked for: more work is probably due
        reconnect_wait = RECONNECT_FIRST_SECONDS
        try:
            while not self._stop_claiming.is_set():
                try:
                    if conn is None:
                        conn = await self.connections.claiming()
                        self.running.set()
                    limit = await self._free_slots(backlog=backlog)
                    if limit == 0:
                        await self._take_cancels(conn)  # every slot busy: a cancel may be for one
                        continue
                    claim_started = time.perf_counter()
                    dispatches = await run_async(
                        conn,
                        executions_claim(
                            owner=self.owner,
                            limit=limit,
                            lease_seconds=self.config.lease_seconds,
                            outage=self._outage_within_lease(),
                            fairness=self.config.fairness,
                        ),
                    )
                    self.metrics.claim_done(
                        claimed=len(dispatches), seconds=time.perf_counter() - claim_started
                    )
                    if taken := sum(1 for dispatch in dispatches if dispatch.taken_over):
                        self.metrics.taken_over(taken)
                    await self.database.reached("claim")
                    reconnect_wait = RECONNECT_FIRST_SECONDS
                    for dispatch in self.slots.newcomers_first(dispatches):
                        if dispatch.poisoned(self.config.max_reclaims):
                            if await poison_settle(conn, dispatch) is not None:
                                self.metrics.reclaims_exhausted()
                                if self.after_run is not None:  # it ended here: its event too
                                    self.after_run()
                        else:
                            self._hand_to_slot(dispatch)
                    backlog = len(dispatches) == limit
                    if not backlog:
                        await self._wait_for_work(conn)
                except psycopg.OperationalError as exc:
                    # Unreachable (or restarting): claim nothing, keep what runs, retry with a
                    # capped backoff, and say so once, not at every attempt.
                    self.metrics.claim_failed()
                    self.database.failed("claim", exc)
                    logger.debug("claim retry", extra={"owner": self.owner, "detail": str(exc)})
                    if conn is not None:
                        await conn.close()
                    conn = None
                    backlog = False
                    if self._outage_too_long():
                        break
                    await signal_wait(self._stop_claiming, reconnect_wait)
                    reconnect_wait = min(reconnect_wait * 2, RECONNECT_MAX_SECONDS)
        finally:
            if conn is not None:
                await conn.close()

    def _outage_too_long(self) -> bool:
        """WORKER_DB_OUTAGE_EXIT_SECONDS has passed in this outage: stop so an orchestrator
        restarts the process (running work drains, then what is left is abandoned as usual)."""
        limit = self.config.db_outage_exit_seconds
        if limit is None or self.database.down_for() < limit:
            return False
        self.outage_exit = True
        logger.error(
            "database unreachable for too long; stopping",
            extra={"owner": self.owner, "outage_seconds": round(self.database.down_for(), 3)},
        )
        self._stop_claiming.set()
        return True

    def _outage_within_lease(self) -> bool:
        """Whether this process lost the database less than a lease ago: leases it takes over
        now may have lapsed for that reason, and do not count toward the poison cap."""
        database = self.database
        return database.down_since is not None or (
            database.back_since is not None
            and time.monotonic() - database.back_since < self.config.lease_seconds
        )

    async def _free_slots(self, *, backlog: bool) -> int:
        """Wait for a free slot; return how many to claim (0 when stopping or still full)."""
        config = self.config
        target = min(config.batch, config.concurrency)
        slots = self.slots
        await slots.wait_free(at_most=config.concurrency - 1, timeout=WAKE_CHECK_SECONDS)
        if backlog and slots.in_use and config.concurrency - slots.in_use < target:
            await slots.wait_free(at_most=config.concurrency - target, timeout=REFILL_WAIT_SECONDS)
        if self._stop_claiming.is_set():
            return 0
        return max(0, min(config.batch, config.concurrency - slots.in_use - self.handoffs.kept))

    async def _wait_for_work(self, conn: psycopg.AsyncConnection) -> None:
        """Idle: return on a notification, after WORKER_POLL_MS or when a turn this process
        parked comes (wakeups.TURNS), or when told to stop."""
        deadline = time.monotonic() + self.config.poll_seconds
        notifier = self.connections.notifier(conn)
        self.idle.set()
        try:
            while not self._stop_claiming.is_set():
                remaining = TURNS.wait(deadline - time.monotonic())
                if remaining <= 0:
                    return
                wait = min(remaining, WAKE_CHECK_SECONDS)
                if notifier is None:  # no session to LISTEN on: poll
                    await signal_wait(self._stop_claiming, wait)
                    continue
                # Closed at once, not when collected: it holds the connection's lock.
                async with contextlib.aclosing(notifier.notifies(timeout=wait)) as notifies:
                    async for notify in notifies:
                        if notify.channel == sql.CANCEL_CHANNEL:
                            await self._cancel_notified(notify.payload)
                        elif notify.channel == sql.WEBHOOK_CHANNEL:
                            self._webhooks_notified()
                        else:
                            return
        finally:
            self.idle.clear()

    async def _take_cancels(self, conn: psycopg.AsyncConnection) -> None:
        """Act on the cancellations (and webhook announcements) so far, without waiting (work
        announcements read here are dropped: the next claim finds that work anyway)."""
        notifier = self.connections.notifier(conn)
        if notifier is None:
            return
        async with contextlib.aclosing(notifier.notifies(timeout=0)) as notifies:
            async for notify in notifies:
                if notify.channel == sql.CANCEL_CHANNEL:
                    await self._cancel_notified(notify.payload)
                elif notify.channel == sql.WEBHOOK_CHANNEL:
                    self._webhooks_notified()

    def _webhooks_notified(self) -> None:
        """Another writer made webhook deliveries due (sql.NOTIFY_WEBHOOKS): wake the delivery
        loop; the claim waits on, for that announced nothing to claim."""
        if self.webhooks_notified is not None:
            self.webhooks_notified()

    async def _cancel_notified(self, payload: str) -> None:
        """A cancellation fenced out an execution (sql.NOTIFY_CANCEL): stop its holder here, if
        this process holds it under an older token, exactly as a lost lease is stopped. Nothing
        is written: the holder's later writes are fenced out, and what it had in flight was
        settled by the cancellation's rule (an uncertain write went to reconciliation)."""
        execution_id, _, token = payload.partition(":")
        try:
            key, new_token = uuid.UUID(execution_id), int(token)
        except ValueError:
            return
        holding = self.slots.find(key)
        if holding is not None and holding.dispatch.fence.token < new_token:
            await self.heartbeat.lease_lost(holding, reason="cancelled")

    def _hand_to_slot(self, dispatch: Dispatch) -> None:
        """Take a slot for a claimed execution (its lease is renewed from now on) and start its
        run as a task."""
        holding = self.slots.take(dispatch, lease_seconds=self.config.lease_seconds)
        self.claimed += 1
        if logger.isEnabledFor(logging.INFO):  # no log fields built per claim for a level off
            event = "execution taken over" if dispatch.taken_over else "execution claimed"
            jsonlog.info(logger, event, dispatch.log_extra)
        task = asyncio.get_running_loop().create_task(self._run(holding))
        self._runs[holding] = task

    # -- running ---------------------------------------------------------------------------

    async def _run(self, holding: Holding) -> None:
        cancelled = False
        try:
            result = await dispatch_held(self.runtime, holding)
            self.metrics.run_ended(result)
            if self.after_run is not None:
                self.after_run()
        except asyncio.CancelledError:
            if not holding.abandoned and not self._stop_heartbeat.is_set():
                raise
            # Given back past its deadline, or abandoned at shutdown: its lease and checkpoints
            # stay for recovery; whatever a call still in a thread brings back is dropped.
            cancelled = True
        except Exception:
            # Left RUNNING with its checkpoints: another claim recovers it once the lease
            # expires, and the recovery rules decide what may be repeated.
            self.metrics.run_raised()
            logger.exception(
                "execution run failed; left for recovery by lease",
                extra=holding.dispatch.log_extra,
            )
        finally:
            self.slots.free(holding)
            self._runs.pop(holding, None)
        if holding.abandoned:
            logger.warning(
                "stuck run cancelled after its slot was given back"
                if cancelled
                else "stuck run returned after its slot was given back",
                extra=holding.dispatch.log_extra,
            )

    def _abandon(self, holding: Holding) -> None:
        """A stuck run, its slot given back (heartbeat.py): end its task."""
        task = self._runs.get(holding)
        if task is not None:
            task.cancel()

    # -- shutdown --------------------------------------------------------------------------

    async def _shutdown(self, heartbeat: asyncio.Task[None]) -> None:
        deadline = time.monotonic() + self.config.drain_seconds
        logger.info("worker draining", extra={"owner": self.owner, "running": self.slots.held})
        slots = self.slots
        # Held, not in use: a run whose final commit is in flight has released its slot, and
        # is drained all the same.
        while slots.held and not self._end_drain.is_set():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            await slots.wait_unheld(timeout=min(remaining, WAKE_CHECK_SECONDS))
        abandoned = self.occupants()
        for holding in abandoned:
            holding.cancelled.set()
            fence = holding.dispatch.fence
            await self.runtime.cancel(str(fence.execution_id), "shutdown", token=fence.token)
            logger.warning("execution abandoned at shutdown", extra=holding.dispatch.log_extra)
        self._stop_heartbeat.set()
        grace = time.monotonic() + STOP_GRACE_SECONDS
        while slots.held and time.monotonic() < grace:
            await slots.wait_unheld(timeout=max(0.0, grace - time.monotonic()))
        runs = list(self._runs.values())
        for task in runs:  # signalled and still running: abandoned, lease and checkpoints kept
            task.cancel()
        await asyncio.gather(heartbeat, *runs, return_exceptions=True)
        self.drained = not abandoned
        logger.info(
            "worker stopped",
            extra={"owner": self.owner, "claimed": self.claimed, "abandoned": len(abandoned)},
        )
