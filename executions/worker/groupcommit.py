"""Group commit: the checkpoint and finalisation writes of concurrent runs share one statement and
one commit (docs/adr/0004-group-commit-of-hot-path-writes.md; futures and cancellation in ADR 14,
urgent runs in docs/adr/0019-tenant-fairness-in-the-claim.md, "Inside the worker").

Invariants: leader/follower, no timer (an idle process writes a batch of one at once); `submit`
returns only once the statement carrying its item has committed or failed; a batch once led is
written whatever happens to its leader, and the lead always passes on; each item is fenced on
its own (a superseded one is absent, None); a failed batch is retried item by item; no run holds
a lock while it waits; an urgent run (slots.Slots.urgent) writes alone, first (`WriteGate`).
"""

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncIterator, Callable, Hashable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import psycopg

from ..queue.checkpoints import StartItem, SucceedItem, checkpoints_start, checkpoints_succeed
from ..queue.finalize import FinalizeItem, executions_finalize
from ..queue.steps import Plan, run_async

Item = TypeVar("Item")
Result = TypeVar("Result")

# Where a write gets its connection: one the caller holds, or a source it borrows one from for
# the length of one statement (the runtime's small pool: executions/worker/runtime.py).
ConnectionSource = Callable[[], AbstractAsyncContextManager[psycopg.AsyncConnection]]
Database = psycopg.AsyncConnection | ConnectionSource


def borrowed(db: Database) -> AbstractAsyncContextManager[psycopg.AsyncConnection]:
    """A connection for one step: `db` itself, or one borrowed from it and given back after."""
    if isinstance(db, psycopg.AsyncConnection):
        return contextlib.nullcontext(db)
    return db()


async def on(db: Database, plan: Plan[Result]) -> Result:
    """Run one plan (executions/queue/steps.py) on a connection of `db`, borrowed for it only."""
    async with borrowed(db) as conn:
        return await run_async(conn, plan)


class WriteGate:
    """The order in which the grouped writes take the shared connections: at most `places`
    writes borrow at once (as many as the runtime's connections), and a place that frees goes
    to a waiting urgent write before any batch's leader. The hot-path writes only: a run's other
    steps borrow from the pool directly."""

    def __init__(self, places: int) -> None:
        self.places = places
        self._waiting: tuple[deque[asyncio.Future[None]], ...] = (deque(), deque())

    @contextlib.asynccontextmanager
    async def enter(self, *, urgent: bool) -> AsyncIterator[None]:
        if self.places > 0 and not any(self._waiting):
            self.places -= 1
        else:
            queue = self._waiting[0 if urgent else 1]
            ready = asyncio.get_running_loop().create_future()
            queue.append(ready)
            try:
                await ready
            except asyncio.CancelledError:
                if ready.cancelled():
                    queue.remove(ready)
                else:  # the place was handed to it as it was cancelled: pass it on
                    self._pass()
                raise
        try:
            yield
        finally:
            self._pass()

    def _pass(self) -> None:
        for queue in self._waiting:
            while queue:
                ready = queue.popleft()
                if not ready.done():
                    ready.set_result(None)
                    return
        self.places += 1


@dataclass(eq=False)
class _Ticket(Generic[Item]):
    item: Item
    ready: asyncio.Future[None]  # done when written, or when the lead is handed to it;
    # cancelled when its waiting run is
    written: bool = False
    gone: bool = False  # its run was cancelled while it waited
    result: Any = None
    error: BaseException | None = None

    def outcome(self) -> Any:
        if self.error is not None:
            raise self.error
        return self.result


@dataclass(eq=False)
class GroupCommit(Generic[Item, Result]):
    """Merge concurrent writes of one kind into one statement per moment."""

    write_many: Callable[[Sequence[Item]], Plan[Any]]  # a plan answering results by key
    key: Callable[[Item], Hashable]
    gate: WriteGate | None = None  # the process's, shared with the urgent writes; None: any order
    batches: int = 0  # statements sent, for tests and benchmarks
    items: int = 0  # items written
    _queue: list[_Ticket[Item]] = field(default_factory=list)
    _leading: bool = False
    _leads: set[asyncio.Task[None]] = field(default_factory=set)  # leads whose run is gone

    async def submit(self, db: Database, item: Item) -> Result | None:
        """Write `item` (alone or with others); return its result, None if it matched nothing.

        Only the leader of a batch uses `db`: followers wait holding no connection."""
        ticket = _Ticket(item, asyncio.get_running_loop().create_future())
        self._queue.append(ticket)
        if self._leading:
            try:
                # Awaited bare: a cancellation cancels the ticket's own future and nothing else
                # (the item stays queued and is written with the next batch).
                await ticket.ready
            except asyncio.CancelledError:
                ticket.gone = True
                if not ticket.ready.cancelled() and not ticket.written:
                    self._lead_without_run(db)  # the lead was handed to it: lead it anyway
                raise
        else:
            self._leading = True
        if not ticket.written:  # leading, from the start or handed over
            await asyncio.shield(self._lead(db))
        return ticket.outcome()

    def _lead_without_run(self, db: Database) -> None:
        task = asyncio.get_running_loop().create_task(self._lead(db))
        self._leads.add(task)
        task.add_done_callback(self._leads.discard)

    async def _lead(self, db: Database) -> None:
        batch: list[_Ticket[Item]] | None = None
        gate = self.gate
        turn = contextlib.nullcontext() if gate is None else gate.enter(urgent=False)
        try:
            async with turn, borrowed(db) as conn:
                # Taken once a connection is ours: the batch grew meanwhile.
                batch, self._queue = self._queue, []
                await self._write(conn, batch)
        except BaseException as exc:
            if batch is None:
                # No connection could be had: everything waiting fails with that error (the
                # leader's own item included), exactly as a failed statement would fail it.
                batch, self._queue = self._queue, []
                for ticket in batch:
                    ticket.error = exc
            elif not isinstance(exc, Exception):
                raise
        finally:
            for ticket in batch or ():
                ticket.written = True
                if not ticket.ready.done():
                    ticket.ready.set_result(None)
            self._pass_lead(db)

    def _pass_lead(self, db: Database) -> None:
        if not self._queue:
            self._leading = False
            return
        successor = self._queue[0]
        # Gone, or being cancelled (its future is, its `gone` not yet set): it cannot lead.
        if successor.gone or successor.ready.cancelled():
            self._lead_without_run(db)
        elif not successor.ready.done():
            successor.ready.set_result(None)  # not written yet: it wakes up leading

    async def _write(self, conn: psycopg.AsyncConnection, batch: list[_Ticket[Item]]) -> None:
        try:
            results = await run_async(conn, self.write_many([t.item for t in batch]))
        except psycopg.Error as exc:
            if len(batch) == 1:
                batch[0].error = exc
                return
            for ticket in batch:  # isolate the fault: each item alone
                await self._write(conn, [ticket])
            return
        except BaseException as exc:
            for ticket in batch:
                ticket.error = exc
            raise
        self.batches += 1
        self.items += len(batch)
        for ticket in batch:
            ticket.result = results.get(self.key(ticket.item))


@dataclass(eq=False)
class Alone(Generic[Item, Result]):
    """An urgent run's write of one kind: its item alone, in its caller's task (no lead to
    hand over, no task to wake), on the next of the shared connections."""

    write_many: Callable[[Sequence[Item]], Plan[Any]]
    key: Callable[[Item], Hashable]
    gate: WriteGate | None = None
    batches: int = 0  # statements sent, as GroupCommit counts them
    items: int = 0

    async def submit(self, db: Database, item: Item) -> Result | None:
        gate = self.gate
        turn = contextlib.nullcontext() if gate is None else gate.enter(urgent=True)
        async with turn, borrowed(db) as conn:
            results = await run_async(conn, self.write_many([item]))
        self.batches += 1
        self.items += 1
        return results.get(self.key(item))


class GroupWrites:
    """The writes of the worker's hot path, shared by a process's runs: starts, saves (from the
    RUNNING row) and finals, each grouped, and each alone for urgent runs (`lane`).
    `connections`: how many the writes share (their `WriteGate`); None, borrowed in any order."""

    def __init__(self, *, actor: str, connections: int | None = None) -> None:
        gate = WriteGate(connections) if connections else None

        def start(items: Sequence[StartItem]) -> Plan[Any]:
            return checkpoints_start(items=items)

        def save(items: Sequence[SucceedItem]) -> Plan[Any]:
            return _saved(checkpoints_succeed(items=items))

        def final(items: Sequence[FinalizeItem]) -> Plan[Any]:
            return executions_finalize(items=items, actor=actor)

        def key(item: StartItem | SucceedItem | FinalizeItem) -> Hashable:
            return item.fence.execution_id

        self.starts: GroupCommit[StartItem, int] = GroupCommit(start, key, gate)
        self.successes: GroupCommit[SucceedItem, bool] = GroupCommit(save, key, gate)
        self.finals: GroupCommit[FinalizeItem, int] = GroupCommit(final, key, gate)
        self.urgent = _Urgent(
            starts=Alone(start, key, gate),
            successes=Alone(save, key, gate),
            finals=Alone(final, key, gate),
        )

    def lane(self, urgent: bool) -> "GroupWrites | _Urgent":
        """Where a run writes: alone when urgent, else grouped."""
        return self.urgent if urgent else self


@dataclass(frozen=True)
class _Urgent:
    starts: Alone[StartItem, int]
    successes: Alone[SucceedItem, bool]
    finals: Alone[FinalizeItem, int]


def _saved(plan: Plan[set[Any]]) -> Plan[Mapping[Any, bool]]:
    """The succeed plan's ids as a mapping to True (what GroupCommit reads results from)."""

    def steps() -> Any:
        saved = yield from plan.steps
        return dict.fromkeys(saved, True)

    return Plan(steps(), atomic=plan.atomic, before_commit=plan.before_commit)
