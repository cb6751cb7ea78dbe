"""The heartbeat of `runworker`: lease renewal, the worker registry row, and stuck runs
(docs/worker-protocol.md#lease-and-renewal, #poison-cap).

Invariants: a task on the worker's loop that every WORKER_RENEW_SECONDS renews every held lease in
one statement and refreshes this worker's row (sql.WORKER_SEEN) in one more, on a borrowed shared
connection (a remote runtime's heartbeat has its own); a lease that comes back lost cancels
exactly that holder (execution id and token), never a task by position, and renewals failing
for a whole lease cancel them all; a run past its deadline is no longer renewed, its slot given
back and its task cancelled; a connection opened before an outage gets one retry on a new one.
"""

import importlib.metadata
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

import psycopg
from psycopg_pool import PoolTimeout

from orquestador.workerconfig import WorkerConfig

from .. import sql
from ..queue.leases import leases_renew
from ..queue.steps import run_async
from .database import DatabaseState
from .groupcommit import ConnectionSource
from .metrics import WorkerMetrics
from .runtime import WorkerRuntime
from .slots import Holding, Slots
from .writeretry import signal_wait

logger = logging.getLogger("executions.worker")

Result = TypeVar("Result")  # what a step on the heartbeat's connection returns

try:  # reported in the worker registry
    VERSION = importlib.metadata.version("orquestador")
except importlib.metadata.PackageNotFoundError:  # running from a checkout that is not installed
    VERSION = "unknown"


@dataclass(kw_only=True, eq=False)
class Heartbeat:
    """Renews the leases of the executions held in `slots`, keeps the registry row fresh, and
    gives stuck slots back (`give_back` ends the stuck run's task, named by its holding).
    `borrow` lends one of the runtime's shared connections per beat; without one (a remote
    runtime) `connect` opens the heartbeat's own connection."""

    config: WorkerConfig
    owner: str
    slots: Slots
    metrics: WorkerMetrics
    runtime: WorkerRuntime
    database: DatabaseState
    connect: Callable[[], Awaitable[psycopg.AsyncConnection]]
    give_back: Callable[[Holding], None]
    borrow: ConnectionSource | None = None

    async def run(self, stop: threading.Event) -> None:
        """The heartbeat task: until `stop` is set."""
        conn: psycopg.AsyncConnection | None = await self.seen(None)
        try:
            while not await signal_wait(stop, self.config.renew_seconds):
                conn = await self.seen(await self.renew(conn))
        finally:
            if conn is not None:
                await conn.close()

    async def seen(self, conn: psycopg.AsyncConnection | None) -> psycopg.AsyncConnection | None:
        """Refresh this worker's registry row (one statement); a failure is only logged."""
        try:
            conn, _ = await self._on_connection(conn, self._seen_on)
        except psycopg.Error as exc:
            # No shared connection free in time is not an outage here: just after the database
            # returns, the pool may still be reconnecting while the claims already run. The
            # claims and the renewals are what tell an outage; the registry row waits a beat.
            if isinstance(exc, psycopg.OperationalError) and not isinstance(exc, PoolTimeout):
                self.database.failed("registry", exc)  # logged once per outage
            else:
                logger.warning("worker registry not refreshed", extra={"owner": self.owner})
            return None
        return conn

    async def _seen_on(self, conn: psycopg.AsyncConnection) -> None:
        await conn.execute(
            sql.WORKER_SEEN,
            {
                "owner": self.owner,
                "host": socket.gethostname(),
                "pid": os.getpid(),
                "concurrency": self.config.concurrency,
                "running": self.slots.busy,
                "renew_seconds": self.config.renew_seconds,
                "lease_seconds": self.config.lease_seconds,
                "version": VERSION,
            },
        )

    async def _on_connection(
        self,
        conn: psycopg.AsyncConnection | None,
        work: Callable[[psycopg.AsyncConnection], Awaitable[Result]],
    ) -> tuple[psycopg.AsyncConnection | None, Result]:
        """Run `work` on a shared connection (borrowed for it), on `conn`, or on a new
        connection when there is none, and return the connection kept with the result.

        A connection opened before an outage is broken once the server is back: the first
        statement on it fails although the database is reachable. That is not a new outage, so
        a broken connection is replaced once and `work` runs again before the error counts. On
        any error the connection is closed and the error raised.
        """
        if self.borrow is not None:
            for last in (False, True):
                try:
                    async with self.borrow() as shared:
                        return None, await work(shared)
                except PoolTimeout:
                    raise  # none to be had within a renewal period: that is an outage
                except psycopg.OperationalError:
                    if last:  # the pool replaced the broken one; a second failure counts
                        raise
            raise AssertionError("unreachable")
        if conn is not None:
            try:
                return conn, await work(conn)
            except psycopg.OperationalError:
                broken = conn.broken  # read before close(), which clears it
                await conn.close()
                if not broken:
                    raise
            except Exception:
                await conn.close()
                raise
        conn = await self.connect()
        try:
            return conn, await work(conn)
        except Exception:
            await conn.close()
            raise

    async def renew(self, conn: psycopg.AsyncConnection | None) -> psycopg.AsyncConnection | None:
        now = time.monotonic()
        for holding in self.slots.occupants():
            if holding.deadline_at is not None and now > holding.deadline_at:
                await self.stuck(holding)
        holdings = [h for h in self.slots.occupants() if not h.lost]
        if not holdings:
            return conn
        sent_at = time.monotonic()
        try:
            conn, renewed = await self._on_connection(conn, lambda c: self._renew_on(c, holdings))
        except psycopg.Error as exc:
            if isinstance(exc, psycopg.OperationalError):
                self.database.failed("renewal", exc)  # logged once per outage
            else:
                logger.exception("lease renewal failed", extra={"owner": self.owner})
            for holding in holdings:
                if sent_at - holding.renewed_at >= self.config.lease_seconds:
                    await self.lease_lost(holding, reason="renewals failed for a whole lease")
            return None
        await self.database.reached("renewal")
        await self.apply_renewal(holdings, renewed, sent_at=sent_at)
        return conn

    async def _renew_on(
        self, conn: psycopg.AsyncConnection, holdings: list[Holding]
    ) -> set[tuple[uuid.UUID, int]]:
        return await run_async(
            conn,
            leases_renew(
                owner=self.owner,
                held=[h.dispatch.fence for h in holdings],
                lease_seconds=self.config.lease_seconds,
            ),
        )

    async def apply_renewal(
        self, sent: list[Holding], renewed: set[tuple[uuid.UUID, int]], *, sent_at: float
    ) -> None:
        """Act on a renewal's answer, which may come back after the holders it names finished."""
        for holding in sent:
            fence = holding.dispatch.fence
            if (fence.execution_id, fence.token) in renewed:
                holding.renewed_at = sent_at
            else:
                await self.lease_lost(holding, reason="lease lost")

    async def lease_lost(self, holding: Holding, *, reason: str) -> None:
        """Cancel exactly this holder: its execution id and token, never another run."""
        if not self.slots.holds(holding):
            return  # it finished while the renewal was in flight: nothing to stop
        holding.lost = True
        holding.cancelled.set()
        self.metrics.lease_lost()
        dispatch = holding.dispatch
        await self.runtime.cancel(str(dispatch.execution_id), reason, token=dispatch.fence.token)
        logger.warning("lease lost", extra={**dispatch.log_extra, "reason": reason})

    async def stuck(self, holding: Holding) -> None:
        """A run past its deadline: stop renewing its lease (another worker recovers it by the
        recovery rules of docs/worker-protocol.md#recovery once it expires), cancel it in-process,
        count it, and give its slot back at once: its task is cancelled (a synchronous adapter
        still in its thread is left to return on its own, its writes fenced out)."""
        if not self.slots.give_back(holding):
            return
        holding.cancelled.set()
        self.metrics.stuck_run()
        dispatch = holding.dispatch
        execution_id = str(dispatch.execution_id)
        await self.runtime.cancel(execution_id, "past its deadline", token=dispatch.fence.token)
        logger.warning(
            "run past its deadline; lease no longer renewed, slot given back",
            extra=dispatch.log_extra,
        )
        self.give_back(holding)
