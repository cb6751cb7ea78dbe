"""The heartbeat of `runworker`: lease renewal, the worker registry row, and stuck runs.

Invariants:
- every WORKER_RENEW_SECONDS it renews every held lease in one statement, and refreshes this
  worker's registry row (sql.WORKER_SEEN) in one more, on one connection of its own (one of the
  process's four: executions/worker/scheduler.py);
- a lease that comes back lost cancels exactly that holder (execution id and token): its
  per-execution `threading.Event`, never a thread, so a renewal that returns late cannot disturb
  a different execution now running on the same thread. If renewals cannot reach the database
  for a whole lease, the holders are cancelled too: their leases have expired;
- stuck runs: each run reports its deadline (its remaining actions' timeouts plus a margin,
  runner.deadline_seconds); past it the heartbeat stops renewing that lease, cancels the run
  in-process, counts and logs it, and gives its slot back to a new slot thread. Another worker
  recovers the execution once the lease expires; the stuck thread's late writes are fenced out;
- a connection opened before an outage fails its first statement once the server is back: that
  is retried once on a fresh connection before it counts as an outage (logged once per outage).
"""

import importlib.metadata
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import psycopg

from orquestador.workerconfig import WorkerConfig

from .. import sql
from ..leases import leases_renew
from .database import DatabaseState
from .holdings import Holding, Slots
from .metrics import WorkerMetrics
from .runtime import WorkerRuntime

logger = logging.getLogger("executions.worker")

Result = TypeVar("Result")  # what a step on the heartbeat's connection returns

try:  # reported in the worker registry
    VERSION = importlib.metadata.version("orquestador")
except importlib.metadata.PackageNotFoundError:  # running from a checkout that is not installed
    VERSION = "unknown"


@dataclass(kw_only=True, eq=False)
class Heartbeat:
    """Renews the leases of the executions held in `slots`, keeps the registry row fresh, and
    gives stuck slots back (`replace_slot` starts a new slot thread, named after the execution
    it replaces; `connect` opens the heartbeat's own connection)."""

    config: WorkerConfig
    owner: str
    slots: Slots
    metrics: WorkerMetrics
    runtime: WorkerRuntime
    database: DatabaseState
    connect: Callable[[], psycopg.Connection]
    replace_slot: Callable[[str], None]

    def run(self, stop: threading.Event) -> None:
        """The heartbeat thread: until `stop` is set."""
        conn: psycopg.Connection | None = self.seen(None)
        try:
            while not stop.wait(self.config.renew_seconds):
                conn = self.seen(self.renew(conn))
        finally:
            if conn is not None:
                conn.close()

    def seen(self, conn: psycopg.Connection | None) -> psycopg.Connection | None:
        """Refresh this worker's registry row (one statement); a failure is only logged."""
        try:
            conn, _ = self._on_connection(conn, self._seen_on)
        except psycopg.Error as exc:
            if isinstance(exc, psycopg.OperationalError):
                self.database.failed("registry", exc)  # logged once per outage
            else:
                logger.warning("worker registry not refreshed", extra={"owner": self.owner})
            return None
        return conn

    def _seen_on(self, conn: psycopg.Connection) -> None:
        conn.execute(
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

    def _on_connection(
        self, conn: psycopg.Connection | None, work: Callable[[psycopg.Connection], Result]
    ) -> tuple[psycopg.Connection, Result]:
        """Run `work` on `conn`, or on a new connection when there is none, and return both.

        A connection opened before an outage is broken once the server is back: the first
        statement on it fails although the database is reachable. That is not a new outage, so
        a broken connection is replaced once and `work` runs again before the error counts. On
        any error the connection is closed and the error raised.
        """
        if conn is not None:
            try:
                return conn, work(conn)
            except psycopg.OperationalError:
                broken = conn.broken  # read before close(), which clears it
                conn.close()
                if not broken:
                    raise
            except Exception:
                conn.close()
                raise
        conn = self.connect()
        try:
            return conn, work(conn)
        except Exception:
            conn.close()
            raise

    def renew(self, conn: psycopg.Connection | None) -> psycopg.Connection | None:
        now = time.monotonic()
        for holding in self.slots.occupants():
            if holding.deadline_at is not None and now > holding.deadline_at:
                self.stuck(holding)
        holdings = [h for h in self.slots.occupants() if not h.lost]
        if not holdings:
            return conn
        sent_at = time.monotonic()
        try:
            conn, renewed = self._on_connection(conn, lambda c: self._renew_on(c, holdings))
        except psycopg.Error as exc:
            if isinstance(exc, psycopg.OperationalError):
                self.database.failed("renewal", exc)  # logged once per outage
            else:
                logger.exception("lease renewal failed", extra={"owner": self.owner})
            for holding in holdings:
                if sent_at - holding.renewed_at >= self.config.lease_seconds:
                    self.lease_lost(holding, reason="renewals failed for a whole lease")
            return None
        self.database.reached("renewal")
        self.apply_renewal(holdings, renewed, sent_at=sent_at)
        return conn

    def _renew_on(
        self, conn: psycopg.Connection, holdings: list[Holding]
    ) -> set[tuple[uuid.UUID, int]]:
        return leases_renew(
            conn=conn,
            owner=self.owner,
            held=[h.dispatch.fence for h in holdings],
            lease_seconds=self.config.lease_seconds,
        )

    def apply_renewal(
        self, sent: list[Holding], renewed: set[tuple[uuid.UUID, int]], *, sent_at: float
    ) -> None:
        """Act on a renewal's answer, which may come back after the holders it names finished."""
        for holding in sent:
            fence = holding.dispatch.fence
            if (fence.execution_id, fence.token) in renewed:
                holding.renewed_at = sent_at
            else:
                self.lease_lost(holding, reason="lease lost")

    def lease_lost(self, holding: Holding, *, reason: str) -> None:
        """Cancel exactly this holder: its execution id and token, never a thread."""
        if not self.slots.holds(holding):
            return  # it finished while the renewal was in flight: nothing to stop
        holding.lost = True
        holding.cancelled.set()
        self.metrics.lease_lost()
        dispatch = holding.dispatch
        self.runtime.cancel(str(dispatch.execution_id), reason, token=dispatch.fence.token)
        logger.warning("lease lost", extra={**dispatch.log_extra, "reason": reason})

    def stuck(self, holding: Holding) -> None:
        """A run past its deadline: stop renewing its lease (another worker recovers it by the
        recovery rules of docs/worker-protocol.md#recovery once it expires), cancel it in-process,
        count it, and give its slot back with a new slot thread, so a thread that never returns does
        not cost capacity."""
        if not self.slots.give_back(holding):
            return
        holding.cancelled.set()
        self.metrics.stuck_run()
        dispatch = holding.dispatch
        execution_id = str(dispatch.execution_id)
        self.runtime.cancel(execution_id, "past its deadline", token=dispatch.fence.token)
        logger.warning(
            "run past its deadline; lease no longer renewed, slot given back",
            extra=dispatch.log_extra,
        )
        self.replace_slot(execution_id)
