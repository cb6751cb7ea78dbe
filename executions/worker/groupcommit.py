"""Group commit: the checkpoint and finalisation writes of concurrent execution threads, merged.

A worker process runs many executions at once, and each one's hot path is three short writes
(start checkpoint, save checkpoint, finalise). Written one by one, every execution pays three
statements and three commits; on a small machine that, not the work, bounds throughput. Here the
threads that want the same kind of write at the same moment share one statement and one commit.

Invariants:
- leader/follower, no timer: the first thread to arrive writes at once, on a connection it
  borrows from the process's few shared ones for that statement only, everything queued at
  that moment (a batch of one when the process is idle, so latency is
  never traded for throughput); threads arriving meanwhile queue up and the first of them leads
  the next batch;
- each item is fenced on its own inside the grouped statement (executions/sql.py): an item whose
  holder was superseded is simply absent from the result (None), and never affects the others;
- a batch whose statement fails is retried item by item, so one execution's fault (a trigger, a
  constraint) fails only that execution;
- a thread never holds a database lock while it waits for its ticket: every grouped write is one
  autocommit statement, and multi-row locks are taken in id order;
- `submit_beside` queues an item without waiting for it: a batch with such an item and no thread
  of its own waiting to lead it is led by the commit's writer thread (one per kind of write,
  started on first use), so the caller goes on at once and takes the result later
  (`Pending.result`), exactly as `submit` would have returned it. The runner uses it to call a
  READ_ONLY adapter while its RUNNING checkpoint is being written (executions/worker/runner.py).
"""

import contextlib
import logging
import queue
import threading
from collections.abc import Callable, Hashable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import psycopg

from ..checkpoints import StartItem, SucceedItem, checkpoints_start, checkpoints_succeed
from ..finalize import FinalizeItem, executions_finalize

logger = logging.getLogger("executions.worker")

Item = TypeVar("Item")
Result = TypeVar("Result")

# Where a write gets its connection: one the caller holds, or a source it borrows one from for
# the length of one statement (the runtime's small pool: executions/worker/runtime.py).
ConnectionSource = Callable[[], AbstractContextManager[psycopg.Connection]]
Database = psycopg.Connection | ConnectionSource


def borrowed(db: Database) -> AbstractContextManager[psycopg.Connection]:
    """A connection for one step: `db` itself, or one borrowed from it and given back after."""
    if isinstance(db, psycopg.Connection):
        return contextlib.nullcontext(db)
    return db()


@dataclass
class _Ticket(Generic[Item]):
    item: Item
    ready: threading.Event = field(default_factory=threading.Event)
    # Submitted beside (`submit_beside`): no thread of its own leads it; `db` is where the
    # writer thread borrows a connection when it leads the batch this ticket opens.
    beside: bool = False
    db: Database | None = None
    written: bool = False
    result: Any = None
    error: BaseException | None = None

    def outcome(self) -> Any:
        if self.error is not None:
            raise self.error
        return self.result


class Pending(Generic[Result]):
    """An item submitted beside the caller's work: its result, once its statement has run."""

    def __init__(self, ticket: _Ticket[Any]) -> None:
        self._ticket = ticket

    def result(self) -> Result | None:
        """Wait for the statement; its result (None: matched nothing) or its error, raised."""
        self._ticket.ready.wait()
        return self._ticket.outcome()

    def wait(self, timeout: float) -> bool:
        """Wait up to `timeout` seconds for the statement to have run, whatever its outcome;
        whether it has."""
        return self._ticket.ready.wait(timeout)


class GroupCommit(Generic[Item, Result]):
    """Merge concurrent writes of one kind into one statement per moment."""

    def __init__(
        self,
        write_many: Callable[[psycopg.Connection, list[Item]], dict[Hashable, Result]],
        key: Callable[[Item], Hashable],
    ) -> None:
        self._write_many = write_many
        self._key = key
        self._lock = threading.Lock()
        self._queue: list[_Ticket[Item]] = []
        self._leading = False
        self._writer: threading.Thread | None = None  # leads batches no caller waits to lead
        self._leads: queue.SimpleQueue[Database | None] = queue.SimpleQueue()
        self.batches = 0  # statements sent, for tests and benchmarks
        self.items = 0  # items written

    def submit(self, db: Database, item: Item) -> Result | None:
        """Write `item` (alone or with others); return its result, None if it matched nothing.

        Only the leader of a batch uses `db`: followers wait holding no connection."""
        ticket = _Ticket(item)
        with self._lock:
            self._queue.append(ticket)
            lead = not self._leading
            self._leading = True
        if not lead:
            ticket.ready.wait()
        if not ticket.written:  # leading, from the start or handed over
            self._lead(db)
        return ticket.outcome()

    def submit_beside(self, db: Database, item: Item) -> Pending[Result]:
        """Queue `item` and return at once; `Pending.result()` later gives what `submit` would
        have. The batch leader of the moment writes it, or the writer thread when none leads."""
        ticket = _Ticket(item, beside=True, db=db)
        with self._lock:
            self._queue.append(ticket)
            lead = not self._leading
            self._leading = True
            if lead:
                self._writer_leads(db)
        return Pending(ticket)

    def close(self) -> None:
        """Stop the writer thread, if one was started (the runtime closes it with its pool)."""
        with self._lock:
            if self._writer is not None:
                self._leads.put(None)
                self._writer = None

    def _writer_leads(self, db: Database) -> None:
        """Have the writer thread lead the next batch (called under `_lock`)."""
        if self._writer is None:
            self._writer = threading.Thread(
                target=self._write_beside, name="worker-group-writer", daemon=True
            )
            self._writer.start()
        self._leads.put(db)

    def _write_beside(self) -> None:
        while (db := self._leads.get()) is not None:
            try:
                self._lead(db)
            except Exception:  # already the error of every ticket in the batch
                logger.exception("grouped write failed in the writer thread")

    def _lead(self, db: Database) -> None:
        batch: list[_Ticket[Item]] | None = None
        try:
            with borrowed(db) as conn:
                with self._lock:  # taken once a connection is ours: the batch grew meanwhile
                    batch, self._queue = self._queue, []
                self._write(conn, batch)
        except BaseException as exc:
            if batch is not None:
                raise
            # No connection could be had: everything waiting fails with that error (the leader's
            # own item included), exactly as a failed statement would fail it.
            with self._lock:
                batch, self._queue = self._queue, []
            for ticket in batch:
                ticket.error = exc
        finally:
            for ticket in batch or ():
                ticket.written = True
            with self._lock:
                successor = self._queue[0] if self._queue else None
                if successor is None:
                    self._leading = False
                elif successor.beside:  # nobody waits to lead it: the writer thread does
                    self._writer_leads(successor.db)
            for ticket in batch or ():
                ticket.ready.set()
            if successor is not None and not successor.beside:
                successor.ready.set()

    def _write(self, conn: psycopg.Connection, batch: list[_Ticket[Item]]) -> None:
        try:
            results = self._write_many(conn, [t.item for t in batch])
        except psycopg.Error as exc:
            if len(batch) == 1:
                batch[0].error = exc
                return
            for ticket in batch:  # isolate the fault: each item alone
                self._write(conn, [ticket])
            return
        except BaseException as exc:
            for ticket in batch:
                ticket.error = exc
            raise
        self.batches += 1
        self.items += len(batch)
        for ticket in batch:
            ticket.result = results.get(self._key(ticket.item))


class GroupWrites:
    """The three grouped writes of the worker's hot path, shared by a process's threads."""

    def __init__(self, *, actor: str) -> None:
        self.starts: GroupCommit[StartItem, int] = GroupCommit(
            lambda conn, items: checkpoints_start(conn=conn, items=items),
            key=lambda item: item.fence.execution_id,
        )
        self.successes: GroupCommit[SucceedItem, bool] = GroupCommit(
            lambda conn, items: dict.fromkeys(checkpoints_succeed(conn=conn, items=items), True),
            key=lambda item: item.fence.execution_id,
        )
        self.finals: GroupCommit[FinalizeItem, int] = GroupCommit(
            lambda conn, items: executions_finalize(conn=conn, items=items, actor=actor),
            key=lambda item: item.fence.execution_id,
        )

    def close(self) -> None:
        """Stop the writer threads (when the connections they borrow from close)."""
        for group in (self.starts, self.successes, self.finals):
            group.close()
