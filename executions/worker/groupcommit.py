"""Group commit: the checkpoint and finalisation writes of concurrent execution threads, merged.

A worker process runs many executions at once, and each one's hot path is a few short writes
(per action a start and a save, then the final commit; a quick read's start is never sent and the
last read's save rides in the final commit). Written one by one, every execution pays a statement
and a commit for each; on a small machine that, not the work, bounds throughput. Here the threads
that want the same kind of write at the same moment share one statement and one commit.

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
  (`Pending.result`), exactly as `submit` would have returned it;
- `submit_withheld` holds an item back for `delay` seconds and then submits it beside, unless
  the caller withdraws it first (`Pending.withdraw`): a withdrawn item was never sent. A ticker
  thread (one per kind of write, started on first use, waking every TICK_SECONDS while anything
  is withheld and every IDLE_TICK_SECONDS otherwise) moves the items due. The runner withholds a
  READ_ONLY action's RUNNING checkpoint for as long as a quick call lasts
  (executions/worker/runner.py).
"""

import contextlib
import logging
import queue
import threading
import time
from collections.abc import Callable, Hashable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import psycopg

from ..checkpoints import (
    CallRecord,
    StartItem,
    SucceedItem,
    checkpoints_record,
    checkpoints_start,
    checkpoints_succeed,
)
from ..finalize import FinalizeItem, executions_finalize

logger = logging.getLogger("executions.worker")

Item = TypeVar("Item")
Result = TypeVar("Result")

# Where a write gets its connection: one the caller holds, or a source it borrows one from for
# the length of one statement (the runtime's small pool: executions/worker/runtime.py).
ConnectionSource = Callable[[], AbstractContextManager[psycopg.Connection]]
Database = psycopg.Connection | ConnectionSource

# How often the ticker looks for withheld items that are due: while any is withheld, and while
# none is (a submission never wakes it: that would cost every quick read a thread switch). An
# item is sent between its delay and its delay plus IDLE_TICK_SECONDS.
TICK_SECONDS = 0.05
IDLE_TICK_SECONDS = 0.25


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
    due: float = 0.0  # withheld (`submit_withheld`): when the ticker submits it
    written: bool = False
    result: Any = None
    error: BaseException | None = None

    def outcome(self) -> Any:
        if self.error is not None:
            raise self.error
        return self.result


class Pending(Generic[Result]):
    """An item submitted beside the caller's work: its result, once its statement has run."""

    def __init__(
        self, ticket: _Ticket[Any], withdraw: Callable[[_Ticket[Any]], bool] | None = None
    ) -> None:
        self._ticket = ticket
        self._withdraw = withdraw

    def result(self) -> Result | None:
        """Wait for the statement; its result (None: matched nothing) or its error, raised."""
        self._ticket.ready.wait()
        return self._ticket.outcome()

    def wait(self, timeout: float) -> bool:
        """Wait up to `timeout` seconds for the statement to have run, whatever its outcome;
        whether it has."""
        return self._ticket.ready.wait(timeout)

    def withdraw(self) -> bool:
        """Take a withheld item back before it is sent: True if it never will be; False if it
        was submitted already (wait for `result` as for any other)."""
        return self._withdraw is not None and self._withdraw(self._ticket)


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
        self._withheld: dict[int, _Ticket[Item]] = {}  # by id(ticket)
        self._ticker: threading.Event | None = None  # set: that ticker thread stops
        self._ticking = threading.Condition(self._lock)
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
            self._queue_beside(ticket)
        return Pending(ticket)

    def _queue_beside(self, ticket: _Ticket[Item]) -> None:
        """Queue a ticket no thread waits to lead; the writer thread leads its batch when no
        batch is being led (called under `_lock`)."""
        self._queue.append(ticket)
        if not self._leading:
            self._leading = True
            self._writer_leads(ticket.db)

    def submit_withheld(self, db: Database, item: Item, delay: float) -> Pending[Result]:
        """Hold `item` back for `delay` seconds, then submit it beside (`submit_beside`), unless
        `Pending.withdraw()` takes it back first."""
        ticket = _Ticket(item, beside=True, db=db, due=time.monotonic() + delay)
        with self._lock:
            self._withheld[id(ticket)] = ticket
            if self._ticker is None:
                self._ticker = threading.Event()
                threading.Thread(
                    target=self._tick, args=(self._ticker,), name="worker-group-ticker", daemon=True
                ).start()
        return Pending(ticket, self._take_back)

    def _take_back(self, ticket: _Ticket[Item]) -> bool:
        with self._lock:
            return self._withheld.pop(id(ticket), None) is not None

    def _tick(self, stop: threading.Event) -> None:
        with self._lock:
            while not stop.is_set():
                now = time.monotonic()
                for key, ticket in list(self._withheld.items()):
                    if ticket.due > now:
                        continue
                    del self._withheld[key]
                    self._queue_beside(ticket)
                self._ticking.wait(TICK_SECONDS if self._withheld else IDLE_TICK_SECONDS)

    def close(self) -> None:
        """Stop the writer and ticker threads, if started (the runtime closes them with its
        pool)."""
        with self._lock:
            if self._writer is not None:
                self._leads.put(None)
                self._writer = None
            if self._ticker is not None:
                self._ticker.set()
                self._ticker = None
                self._ticking.notify_all()

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
    """The grouped writes of the worker's hot path, shared by a process's threads: starts, saves
    (a write's, from its RUNNING row), records (a read's, started or not) and finals."""

    def __init__(self, *, actor: str) -> None:
        self.starts: GroupCommit[StartItem, int] = GroupCommit(
            lambda conn, items: checkpoints_start(conn=conn, items=items),
            key=lambda item: item.fence.execution_id,
        )
        self.successes: GroupCommit[SucceedItem, bool] = GroupCommit(
            lambda conn, items: dict.fromkeys(checkpoints_succeed(conn=conn, items=items), True),
            key=lambda item: item.fence.execution_id,
        )
        self.records: GroupCommit[CallRecord, bool] = GroupCommit(
            lambda conn, items: dict.fromkeys(checkpoints_record(conn=conn, items=items), True),
            key=lambda item: item.start.fence.execution_id,
        )
        self.finals: GroupCommit[FinalizeItem, int] = GroupCommit(
            lambda conn, items: executions_finalize(conn=conn, items=items, actor=actor),
            key=lambda item: item.fence.execution_id,
        )

    def close(self) -> None:
        """Stop the writer threads (when the connections they borrow from close)."""
        for group in (self.starts, self.successes, self.records, self.finals):
            group.close()
