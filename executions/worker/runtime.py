"""The worker runtime SPI (docs/worker-protocol.md#runtime-spi): where and how one claimed
execution runs. `dispatch_once` is the exchange: `allocate(holding)` (the slot's `Holding`, with
the claim's `Dispatch`) -> a `Reservation` (not the database lease), `execute(reservation,
package)` -> result, `release`, and a best-effort `cancel` of the exact holder.

Invariants: a refusal by another holder (`is_superseded_refusal`) is superseded, settled, never
retried; every method is a coroutine that never blocks the loop (docs/adr/0014); the local runtime
shares WRITE_CONNECTIONS among its slots and runs the holding itself (`dispatch_held`), a package
and a reservation being made only where one crosses to another process.
"""

import asyncio
import logging
import random
import threading
import uuid
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import psycopg
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from actions.pools import client, close_client
from actions.registry import resolve as registry_resolve
from orquestador.workerconfig import WorkerConfig

from ..queue.claims import Dispatch
from ..queue.leases import ExecutionInterrupted, ExecutionSuperseded
from .calls import Resolver
from .endings import WORKER_ACTOR
from .groupcommit import GroupWrites
from .limiter import Handoff
from .outage import DatabaseProbe, Deadline
from .placebatches import LEASES
from .pooling import PoolingConfig
from .runner import execution_run
from .runs import RunnerDeps
from .slots import Holding
from .wire import Ending, ExecutionPackage, ExecutionResult

logger = logging.getLogger("executions.worker")

POOL_OPEN_TIMEOUT = 30.0  # seconds to open the runtime's connections at start
POOL_GET_TIMEOUT = 30.0  # seconds to wait for a free connection (each is held for one statement)
# Connections a process's slots share for every database step of their runs (reads, checkpoints,
# finalisations; the grouped writes need one per kind at most) and the heartbeat's renewals.
# With the scheduler's claim/listen connection and the prober's one (synchronous, opened only
# while it probes), a runworker process uses at most 4, whatever WORKER_CONCURRENCY: a slot that
# waits on a provider holds none.
WRITE_CONNECTIONS = 2
# Seconds to wait for a pool's own workers when closing. Short: they are daemon threads or tasks,
# and one stuck connecting to a database that is gone holds up the exit (a ConnectionPool fails
# its waiting borrows only after this wait); one left behind is dropped with the process.
POOL_CLOSE_TIMEOUT = 0.5
# Seconds the pool keeps retrying one lost connection (psycopg_pool backs off 1 s, 2 s, 4 s ...
# up to this) before it gives up and connects anew on the next demand: short, so that once the
# database is back a held write waits for no backoff (executions/worker/outage.py).
POOL_RECONNECT_SECONDS = 1.0
# Seconds a run's step waits for one of the shared connections (each is held for one statement,
# so a longer wait means the database is away): a held write then waits for it through the
# outage probe (executions/worker/outage.py) instead of the pool's queue.
RUN_BORROW_SECONDS = 5.0
# Seconds the end of an outage waits for the shared connections to serve (refresh_connections):
# the pool retries a lost connection about POOL_RECONNECT_SECONDS after it failed, so it may be
# that far behind a loop that reached the database on a connection of its own.
RETURN_WAIT_SECONDS = 2 * POOL_RECONNECT_SECONDS
# Executions of a statement before psycopg prepares it on a connection: 0, at once. The worker
# runs a handful of fixed statements for its whole life (sql.WORKER_SESSION keeps their plans).
PREPARE_THRESHOLD = 0


@dataclass(frozen=True, eq=False)
class Reservation:
    """What a runtime set aside for one holding, for a package that crosses to it; the package
    runs on it only under that holder.

    In-process only: the holding's stop signal (which adapters watch) and its deadline report
    reach the run through it, never through the package."""

    holding: Holding


def is_superseded_refusal(err: BaseException, execution_id: str | uuid.UUID) -> bool:
    """Does `err` mean another holder owns *this* execution (settle, never retry)?"""
    return isinstance(err, ExecutionSuperseded) and err.execution_id == str(execution_id)


class WorkerRuntime(Protocol):
    """Every method is a coroutine run on the worker's event loop."""

    runs_as_system: bool

    async def allocate(self, holding: Holding) -> Reservation: ...

    async def execute(
        self, reservation: Reservation, package: ExecutionPackage
    ) -> ExecutionResult: ...

    async def release(self, reservation: Reservation) -> None: ...

    async def cancel(
        self, execution_id: str, reason: str | None = None, *, token: int | None = None
    ) -> bool: ...


def _configurer(
    pooling: PoolingConfig,
) -> Callable[[psycopg.AsyncConnection], Awaitable[None]]:
    statements = pooling.session_statements()

    async def configure(conn: psycopg.AsyncConnection) -> None:
        for statement in statements:
            await conn.execute(statement)

    return configure


def _sync_configurer(pooling: PoolingConfig) -> Callable[[psycopg.Connection], None]:
    statements = pooling.session_statements()

    def configure(conn: psycopg.Connection) -> None:
        for statement in statements:
            conn.execute(statement)

    return configure


Pool = TypeVar("Pool")  # a psycopg_pool pool, asynchronous or not


def _pool(
    kind: Callable[..., Pool],
    conninfo: str,
    pooling: PoolingConfig,
    *,
    name: str,
    sizes: tuple[int, int],
) -> Pool:
    """One of the runtime's pools, an AsyncConnectionPool or a ConnectionPool (`kind`): between
    `sizes` (at least, at most) autocommit connections set up with the pooling mode's session
    statements, waited for at most POOL_GET_TIMEOUT, a lost one retried for at most
    POOL_RECONNECT_SECONDS; opened by the runtime's `open`."""
    asynchronous = kind is AsyncConnectionPool
    return kind(
        conninfo,
        min_size=sizes[0],
        max_size=sizes[1],
        kwargs={"autocommit": True, "prepare_threshold": pooling.prepare_threshold},
        configure=_configurer(pooling) if asynchronous else _sync_configurer(pooling),
        open=False,
        name=name,
        timeout=POOL_GET_TIMEOUT,
        reconnect_timeout=POOL_RECONNECT_SECONDS,
    )


class Reservations:
    """The holdings a runtime runs, by execution id: held while their run lasts (`allocate` and
    `release` for a package, `LocalWorkerRuntime.run_held` for a holding run as it is), so that
    a package is refused, and a cancel finds its holder, by the same rules whatever runs the
    execution."""

    def __init__(self) -> None:
        self._held: dict[str, Holding] = {}  # by id text (slots.py says why)
        self._held_lock = threading.Lock()

    def _hold(self, holding: Holding) -> None:
        with self._held_lock:
            self._held[holding.dispatch.fence.execution_text] = holding

    def _unhold(self, holding: Holding) -> None:
        execution_id = holding.dispatch.fence.execution_text
        with self._held_lock:
            if self._held.get(execution_id) is holding:
                del self._held[execution_id]

    async def allocate(self, holding: Holding) -> Reservation:
        self._hold(holding)
        return Reservation(holding)

    @staticmethod
    def check(reservation: Reservation, package: ExecutionPackage) -> None:
        """Refuse a package that is not this reservation's holder."""
        fence = package.dispatch.fence
        if fence != reservation.holding.dispatch.fence:
            raise ExecutionSuperseded(fence.execution_id, step="execute", token=fence.token)

    async def release(self, reservation: Reservation) -> None:
        self._unhold(reservation.holding)

    async def cancel(
        self, execution_id: str, reason: str | None = None, *, token: int | None = None
    ) -> bool:
        """Set the stop signal of the holder of `execution_id` here (under `token`, when given),
        then tell whoever else runs it (`_cancel_elsewhere`); False when there is no such holder
        (nothing is signalled)."""
        try:
            key = uuid.UUID(str(execution_id))
        except ValueError:
            return False
        with self._held_lock:
            holding = self._held.get(str(key))
        if holding is None:
            return False
        dispatch = holding.dispatch
        if token is not None and dispatch.fence.token != token:
            return False
        holding.cancelled.set()
        logger.info(
            "execution cancel signalled",
            extra={
                **dispatch.log_extra,
                "reason": reason,
                **(await self._cancel_elsewhere(holding, reason)),
            },
        )
        return True

    async def _cancel_elsewhere(self, holding: Holding, reason: str | None) -> dict[str, Any]:
        """After the local stop signal: tell the process that runs it, if another one does;
        returns what to log about it."""
        return {}


class LocalWorkerRuntime(Reservations):
    """Runs executions on the calling event loop; all its slots share WRITE_CONNECTIONS
    asynchronous connections, each borrowed for one statement (or one grouped batch) at a time.
    Opened, used and closed on one loop."""

    runs_as_system = True

    def __init__(
        self,
        *,
        conninfo: str,
        config: WorkerConfig,
        resolve: Resolver | None = None,
        slots: int | None = None,
        rng: random.Random | None = None,
        pooling: PoolingConfig | None = None,
    ) -> None:
        super().__init__()
        pooling = pooling or PoolingConfig()
        size = min(slots if slots is not None else config.concurrency, WRITE_CONNECTIONS)
        self._pool: AsyncConnectionPool[psycopg.AsyncConnection] = _pool(
            AsyncConnectionPool, conninfo, pooling, name="worker-runtime", sizes=(size, size)
        )
        # One probe for every held write that meets an outage (writeretry.Ride).
        self._probe = DatabaseProbe(lambda timeout: self._pool.connection(timeout=timeout))
        # The prober's (executions/worker/loops.py): synchronous Django code in a thread of its
        # own, so one connection of its own, opened only when it first probes.
        self._prober_pool: ConnectionPool[psycopg.Connection] = _pool(
            ConnectionPool, conninfo, pooling, name="worker-prober", sizes=(0, 1)
        )
        # Leased places (placebatches.py): as many as the slots, held for one lease.
        LEASES.configure(
            slots=slots if slots is not None else config.concurrency,
            hold_seconds=config.lease_seconds,
        )
        self._deps = RunnerDeps(
            config=config,
            resolve=resolve or registry_resolve,
            rng=rng or random.SystemRandom(),
            # The write gate serves urgent writes, which only tenant order has.
            writes=GroupWrites(
                actor=WORKER_ACTOR, connections=size if config.fairness == "tenant" else None
            ),
            reachable=self._probe.reachable,
        )

    @property
    def config(self) -> WorkerConfig:
        return self._deps.config

    @property
    def writes(self) -> GroupWrites:
        return self._deps.writes

    async def open(self) -> "LocalWorkerRuntime":
        await self._pool.open(wait=True, timeout=POOL_OPEN_TIMEOUT)
        self._prober_pool.open(wait=False)
        # The adapters' HTTP session of this loop, made now rather than inside the first call:
        # loading its certificate bundle costs some 20 ms of CPU (actions/pools.py).
        client()
        return self

    async def close(self, timeout: float = POOL_CLOSE_TIMEOUT) -> None:
        await self._probe.close()
        await close_client()  # the adapters' HTTP session of this loop (actions/pools.py)
        await self._pool.close(timeout=timeout)
        # Its worker threads join here: off the loop, which the prober may be waiting on.
        await asyncio.to_thread(self._prober_pool.close, timeout)

    def hand_off_to(self, handoff: Handoff) -> None:
        """Where runs pass the places their calls end (the dispatcher's claim, limiter.py)."""
        self._deps.handoff = handoff

    def borrow(
        self, timeout: float | None = None
    ) -> AbstractAsyncContextManager[psycopg.AsyncConnection]:
        """One of the shared connections for one step (the runs' writes, the heartbeat's
        renewals, waiting at most `timeout` seconds for one); it goes back to the pool when the
        block ends."""
        return self._pool.connection(timeout=timeout)

    def _run_borrow(self) -> AbstractAsyncContextManager[psycopg.AsyncConnection]:
        """A shared connection for one step of a run, waiting at most RUN_BORROW_SECONDS."""
        return self._pool.connection(timeout=RUN_BORROW_SECONDS)

    def close_prober_connection(self, timeout: float = POOL_CLOSE_TIMEOUT) -> None:
        """At shutdown, before the loops are joined (from a thread: it joins the pool's own): a
        loop waiting for the prober's connection fails at once (PoolClosed) instead of waiting
        POOL_GET_TIMEOUT for a database that may be gone; a step in flight keeps its
        connection until it ends. `close` does it too, if not done."""
        self._prober_pool.close(timeout)

    def connection(self) -> AbstractContextManager[psycopg.Connection]:
        """The prober's connection for one step, from its thread (reconciliation/probedb.py)."""
        return self._prober_pool.connection()

    async def refresh_connections(self) -> bool:
        """After a database outage: test the idle shared connections and replace broken ones,
        so no run (nor the prober) borrows a connection the outage closed; then wait, at most
        RETURN_WAIT_SECONDS, for the shared ones to serve a statement (the outage probe).
        Whether they do: until then the outage is not over (database.DatabaseState)."""
        await self._pool.check()
        await asyncio.to_thread(self._prober_pool.check)
        return await self._probe.reachable(Deadline(RETURN_WAIT_SECONDS))

    async def __aenter__(self) -> "LocalWorkerRuntime":
        return await self.open()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def run_held(self, holding: Holding) -> ExecutionResult:
        """Run the dispatch `holding` holds, as it is: nothing crosses a boundary, so no package
        and no reservation; held here meanwhile, so a cancel finds it. Its result, or its
        refusal settled, as `dispatch_once` returns them."""
        dispatch = holding.dispatch
        self._hold(holding)
        try:
            return await self._run(dispatch, holding)
        except (ExecutionSuperseded, ExecutionInterrupted) as err:
            return refusal_result(dispatch, err)
        finally:
            self._unhold(holding)

    async def execute(self, reservation: Reservation, package: ExecutionPackage) -> ExecutionResult:
        Reservations.check(reservation, package)
        return await self._run(package.dispatch, reservation.holding)

    async def _run(self, dispatch: Dispatch, holding: Holding) -> ExecutionResult:
        # Each step borrows a connection and gives it back at once; the pool checks a returned
        # connection, so one left broken by a failed statement is replaced.
        outcome = await execution_run(
            dispatch, holding=holding, db=self._run_borrow, deps=self._deps
        )
        return ExecutionResult.of(dispatch, outcome)


def dispatch_held(runtime: WorkerRuntime, holding: Holding) -> Awaitable[ExecutionResult]:
    """Run what a slot holds (the dispatcher's way): a local runtime runs the holding and its
    dispatch directly; any other is sent the package that crosses to it (`dispatch_once`)."""
    if isinstance(runtime, LocalWorkerRuntime):
        return runtime.run_held(holding)
    return dispatch_once(runtime, ExecutionPackage(holding.dispatch), holding)


async def dispatch_once(
    runtime: WorkerRuntime, package: ExecutionPackage, holding: Holding
) -> ExecutionResult:
    """Allocate for `holding`, execute `package` and always release; settle a superseded refusal
    instead of failing.

    The result is completed, suspended or failed with the run's outcome, or superseded or
    interrupted (no run: nothing more was written).
    """
    reservation = await runtime.allocate(holding)
    try:
        return await runtime.execute(reservation, package)
    except (ExecutionSuperseded, ExecutionInterrupted) as err:
        return refusal_result(package.dispatch, err)
    finally:
        await runtime.release(reservation)


def refusal_result(
    dispatch: Dispatch, err: ExecutionSuperseded | ExecutionInterrupted
) -> ExecutionResult:
    """A run of `dispatch` refused, settled: superseded (another holder owns this very
    execution) or interrupted (its holder was told to stop); nothing more was written. A
    superseded refusal naming another execution is raised again."""
    if isinstance(err, ExecutionInterrupted):
        logger.info("execution interrupted", extra={**dispatch.log_extra, "step": err.step})
        return ExecutionResult(dispatch, Ending.INTERRUPTED)
    if not is_superseded_refusal(err, dispatch.execution_id):
        raise err
    logger.info("execution superseded", extra={**dispatch.log_extra, "step": err.step})
    return ExecutionResult(dispatch, Ending.SUPERSEDED)
