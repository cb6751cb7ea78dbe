"""Group commit: the checkpoint and finalisation writes of concurrent execution threads, merged.

A worker process runs many executions at once, and each one's hot path is a few short writes
(per action a start and a save, then the final commit). Written one by one, every execution pays
a statement and a commit for each; on a small machine that, not the work, bounds throughput. Here
the threads that want the same kind of write at the same moment share one statement and one
commit.

Invariants:
- leader/follower, no timer: the first thread to arrive writes at once, on a connection it
  borrows from the process's few shared ones for that statement only, everything queued at
  that moment (a batch of one when the process is idle, so latency is
  never traded for throughput); threads arriving meanwhile queue up and the first of them leads
  the next batch;
- every caller waits for its own item: `submit` returns only once the statement that carried it
  has committed (or failed), so a RUNNING checkpoint is durable before the adapter is called;
- each item is fenced on its own inside the grouped statement (executions/sql/): an item whose
  holder was superseded is simply absent from the result (None), and never affects the others;
- a batch whose statement fails is retried item by item, so one execution's fault (a trigger, a
  constraint) fails only that execution;
- a thread never holds a database lock while it waits for its ticket: every grouped write is one
  autocommit statement, and multi-row locks are taken in id order.
"""

import contextlib
import threading
from collections.abc import Callable, Hashable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import psycopg

from ..checkpoints import StartItem, SucceedItem, checkpoints_start, checkpoints_succeed
from ..finalize import FinalizeItem, executions_finalize

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
    written: bool = False
    result: Any = None
    error: BaseException | None = None

    def outcome(self) -> Any:
        if self.error is not None:
            raise self.error
        return self.result


class GroupCommit(Generic[Item, Result]):
    """Merge concurrent writes of one kind into one statement per moment."""

    def __init__(
        self,
        write_many: Callable[[psycopg.Connection, list[Item]], Mapping[Any, Result]],
        key: Callable[[Item], Hashable],
    ) -> None:
        self._write_many = write_many
        self._key = key
        self._lock = threading.Lock()
        self._queue: list[_Ticket[Item]] = []
        self._leading = False
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
            for ticket in batch or ():
                ticket.ready.set()
            if successor is not None:  # not written yet: it wakes up leading
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
    (from the RUNNING row) and finals."""

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
