"""The worker runtime SPI of SPEC §8: where and how one claimed execution runs.

The dispatcher (executions/worker/scheduler.py) hands each claimed execution to a `WorkerRuntime`:
`allocate(request) -> lease` (carrying the fencing token), `execute(lease, package) -> result`,
`release(lease)`, and a best-effort `cancel(execution_id, ...)`. `dispatch_once` is that whole
exchange. The `ExecutionPackage` (executions/worker/wire.py) carries the holder (`Fence`) and resume
coordinates only, never code: the runtime resolves the pinned flow by id and rebuilds the run from
the database. The holder is the same `Fence` from the claim to the last write.

Invariants:
- a refusal because another holder owns the execution is *superseded*, not failed:
  `is_superseded_refusal(err, execution_id)` is true only for an `ExecutionSuperseded` naming
  this very execution; the dispatcher settles it and never retries it;
- `cancel` is best effort: the durable cancellation is a fenced write in the database
  (executions/cancel.py) that never depends on reaching a worker. In the local runtime it sets
  the per-execution `threading.Event` the adapters watch (`ActionContext.cancelled`), and only
  for the exact holder (execution id and token) it names;
- `LocalWorkerRuntime` keeps WRITE_CONNECTIONS persistent database connections that all its slots
  share, each borrowed for one statement (autocommit; each write is its own short transaction),
  so a slot waiting on a provider holds none; it groups the hot-path writes of its slots
  (executions/worker/groupcommit.py), and runs principal-less packages as the worker's system
  identity (`runs_as_system`).
"""

import logging
import random
import threading
import uuid
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Protocol

import psycopg
from psycopg_pool import ConnectionPool

from actions.base import StopSignal
from actions.registry import resolve as registry_resolve
from orquestador.workerconfig import WorkerConfig

from ..claims import FlowCache, Snapshot
from ..leases import ExecutionInterrupted, ExecutionSuperseded, Fence
from .endings import WORKER_ACTOR
from .groupcommit import GroupWrites
from .pooling import PoolingConfig
from .runner import Resolver, RunnerDeps, execution_run
from .wire import Ending, ExecutionPackage, ExecutionResult, principal_text

logger = logging.getLogger("executions.worker")

POOL_OPEN_TIMEOUT = 30.0  # seconds to open the runtime's connections at start
POOL_GET_TIMEOUT = 30.0  # seconds to wait for a free connection (each is held for one statement)
# Connections a process's slots share for every database step of their runs (reads, checkpoints,
# finalisations; the grouped writes need one per kind at most). With the scheduler's claim/listen
# and heartbeat connections, a runworker process uses at most 4, whatever WORKER_CONCURRENCY: a
# slot that waits on a provider holds none.
WRITE_CONNECTIONS = 2
POOL_CLOSE_TIMEOUT = 2.0  # seconds to wait for the pool's own threads when closing
# Executions of a statement before psycopg prepares it on a connection: 0, at once. The worker
# runs a handful of fixed statements for its whole life (sql.WORKER_SESSION keeps their plans).
PREPARE_THRESHOLD = 0


@dataclass(frozen=True)
class WorkerRequest:
    """A slot's ask for a lease on one execution, as the holder `fence`."""

    fence: Fence
    # In-process only (never serialised): the per-execution stop signal adapters watch, and the
    # snapshot the claim already read under this token (absent: the runtime loads it, fenced).
    cancelled: threading.Event = field(default_factory=StopSignal)
    snapshot: Snapshot | None = None
    # Told the run's deadline in seconds (stuck runs: the scheduler stops renewing past it).
    report_deadline: Callable[[float], None] | None = None

    @property
    def execution_id(self) -> uuid.UUID:
        return self.fence.execution_id


@dataclass(frozen=True, eq=False)
class WorkerLease:
    """What a runtime allocated for one holder; a package runs on it only under that holder."""

    fence: Fence
    cancelled: threading.Event
    snapshot: Snapshot | None = None
    report_deadline: Callable[[float], None] | None = None


def is_superseded_refusal(err: BaseException, execution_id: str | uuid.UUID) -> bool:
    """Does `err` mean another holder owns *this* execution (settle, never retry)?"""
    return isinstance(err, ExecutionSuperseded) and err.execution_id == str(execution_id)


class WorkerRuntime(Protocol):
    runs_as_system: bool

    def allocate(self, request: WorkerRequest) -> WorkerLease: ...

    def execute(self, lease: WorkerLease, package: ExecutionPackage) -> ExecutionResult: ...

    def release(self, lease: WorkerLease) -> None: ...

    def cancel(
        self, execution_id: str, reason: str | None = None, *, token: int | None = None
    ) -> bool: ...


def _configurer(pooling: PoolingConfig) -> Callable[[psycopg.Connection], None]:
    statements = pooling.session_statements()

    def configure(conn: psycopg.Connection) -> None:
        for statement in statements:
            conn.execute(statement)

    return configure


class LeaseBook:
    """The leases a runtime has handed out, by execution id: allocate, check, release, find.

    Shared by every runtime so that a package is refused, and a cancel finds its holder, by the
    same rules whatever runs the execution.
    """

    def __init__(self) -> None:
        self._leases: dict[uuid.UUID, WorkerLease] = {}
        self._lock = threading.Lock()

    def allocate(self, request: WorkerRequest) -> WorkerLease:
        lease = WorkerLease(
            fence=request.fence,
            cancelled=request.cancelled,
            snapshot=request.snapshot,
            report_deadline=request.report_deadline,
        )
        with self._lock:
            self._leases[request.fence.execution_id] = lease
        return lease

    @staticmethod
    def check(lease: WorkerLease, package: ExecutionPackage) -> None:
        """Refuse a package that is not this lease's holder."""
        if package.fence != lease.fence:
            raise ExecutionSuperseded(
                package.fence.execution_id, step="execute", token=package.fence.token
            )

    def release(self, lease: WorkerLease) -> None:
        with self._lock:
            if self._leases.get(lease.fence.execution_id) is lease:
                del self._leases[lease.fence.execution_id]

    def signal(self, execution_id: str | uuid.UUID, token: int | None) -> WorkerLease | None:
        """Set the stop signal of the lease held for `execution_id` (under `token`, when given)
        and return it; None when there is no such holder (nothing is signalled)."""
        try:
            key = uuid.UUID(str(execution_id))
        except ValueError:
            return None
        with self._lock:
            lease = self._leases.get(key)
        if lease is None or (token is not None and lease.fence.token != token):
            return None
        lease.cancelled.set()
        return lease


class LocalWorkerRuntime:
    """Runs executions in the calling thread; all its slots share WRITE_CONNECTIONS connections,
    each borrowed for one statement (or one grouped batch) at a time."""

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
        pooling = pooling or PoolingConfig()
        size = min(slots if slots is not None else config.concurrency, WRITE_CONNECTIONS)
        self._pool = ConnectionPool(
            conninfo,
            min_size=size,
            max_size=size,
            kwargs={"autocommit": True, "prepare_threshold": pooling.prepare_threshold},
            configure=_configurer(pooling),
            open=False,
            name="worker-runtime",
            timeout=POOL_GET_TIMEOUT,
        )
        self._deps = RunnerDeps(
            config=config,
            resolve=resolve or registry_resolve,
            flows=FlowCache(),
            rng=rng or random.SystemRandom(),
            writes=GroupWrites(actor=WORKER_ACTOR),
        )
        self._leases = LeaseBook()

    @property
    def config(self) -> WorkerConfig:
        return self._deps.config

    def open(self) -> "LocalWorkerRuntime":
        self._pool.open(wait=True, timeout=POOL_OPEN_TIMEOUT)
        return self

    def close(self, timeout: float = POOL_CLOSE_TIMEOUT) -> None:
        self._pool.close(timeout=timeout)

    def connection(self) -> AbstractContextManager[psycopg.Connection]:
        """Borrow one of the shared connections for one step (the prober's: reconciliation/
        probedb.py); it goes back to the pool, checked, when the block ends."""
        return self._pool.connection()

    def refresh_connections(self) -> None:
        """After a database outage: test the idle shared connections and replace broken ones,
        so no run borrows a connection the outage closed."""
        self._pool.check()

    def __enter__(self) -> "LocalWorkerRuntime":
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def allocate(self, request: WorkerRequest) -> WorkerLease:
        return self._leases.allocate(request)

    def execute(self, lease: WorkerLease, package: ExecutionPackage) -> ExecutionResult:
        LeaseBook.check(lease, package)
        # Each step borrows a connection and gives it back at once; the pool checks a returned
        # connection, so one left broken by a failed statement is replaced.
        outcome = execution_run(
            db=self._pool.connection,
            fence=package.fence,
            flow_id=package.flow_id,
            transition_id=package.transition_id,
            attempts=package.attempts,
            deps=self._deps,
            cancelled=lease.cancelled,
            snapshot=lease.snapshot,
            report_deadline=lease.report_deadline,
            principal=principal_text(package.principal),
        )
        return ExecutionResult.of(package.execution_id, outcome)

    def release(self, lease: WorkerLease) -> None:
        self._leases.release(lease)

    def cancel(
        self, execution_id: str, reason: str | None = None, *, token: int | None = None
    ) -> bool:
        lease = self._leases.signal(execution_id, token)
        if lease is None:
            return False
        logger.info(
            "execution cancel signalled",
            extra={**lease.fence.log_extra(), "reason": reason},
        )
        return True


def dispatch_once(
    runtime: WorkerRuntime, package: ExecutionPackage, request: WorkerRequest
) -> ExecutionResult:
    """Allocate, execute and always release; settle a superseded refusal instead of failing.

    The result is completed, suspended or failed with the run's outcome, or superseded or
    interrupted (no run: nothing more was written).
    """
    lease = runtime.allocate(request)
    try:
        return runtime.execute(lease, package)
    except ExecutionSuperseded as err:
        if not is_superseded_refusal(err, package.execution_id):
            raise
        logger.info(
            "execution superseded",
            extra={**package.fence.log_extra(attempt=package.attempts), "step": err.step},
        )
        return ExecutionResult(package.execution_id, Ending.SUPERSEDED)
    except ExecutionInterrupted as err:
        logger.info(
            "execution interrupted",
            extra={**package.fence.log_extra(attempt=package.attempts), "step": err.step},
        )
        return ExecutionResult(package.execution_id, Ending.INTERRUPTED)
    finally:
        runtime.release(lease)
