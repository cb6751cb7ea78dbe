"""Held work through a database outage (docs/worker-protocol.md#database-outages): one probe per
process that says when PostgreSQL answers again, so every holder whose write met the outage
writes again at once (writeretry.Ride).

Invariants: one probe task at a time, whoever waits (a thousand held writes cost one connection
attempt per PROBE_PAUSE_SECONDS); it borrows from the runtime's own pool, so when it answers the
pool has a working connection and none is opened beside the usual ones; a waiter leaves as soon
as its holder's stop signal is set, the probe going on for the others until it has answered or
the pool is closed.
"""

import asyncio
import contextlib
import time
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager

import psycopg
from psycopg_pool import PoolClosed

from .writeretry import STOP_POLL_SECONDS, Flag

PROBE_BORROW_SECONDS = 0.5  # seconds one probe waits for a connection from the pool
PROBE_PAUSE_SECONDS = 0.2  # seconds between two probes while the database does not answer

Borrow = Callable[[float], AbstractAsyncContextManager[psycopg.AsyncConnection]]


class Deadline:
    """A stop signal that sets itself `seconds` from now: a waiter that gives up by the clock."""

    def __init__(self, seconds: float) -> None:
        self._at = time.monotonic() + seconds

    def is_set(self) -> bool:
        return time.monotonic() >= self._at


class DatabaseProbe:
    """Tells waiters when the database answers again, through `borrow(timeout)`."""

    def __init__(self, borrow: Borrow) -> None:
        self._borrow = borrow
        self._task: asyncio.Task[bool] | None = None
        self.probes = 0  # probes sent, for tests

    async def reachable(self, held: Flag) -> bool:
        """True once the database answered a probe made after this call; False as soon as
        `held` is set first."""
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(
                self._probe(), name="worker-database-probe"
            )
        task = self._task
        while not task.done():
            if held.is_set():
                return False
            await asyncio.wait({task}, timeout=STOP_POLL_SECONDS)
        return not held.is_set() and not task.cancelled() and task.result()

    async def _probe(self) -> bool:
        while True:
            self.probes += 1
            try:
                async with self._borrow(PROBE_BORROW_SECONDS) as conn:
                    await conn.execute("SELECT 1")
                return True
            except PoolClosed:  # the runtime is closing
                return False
            except psycopg.Error:  # unreachable, or no connection within the wait
                pass
            await asyncio.sleep(PROBE_PAUSE_SECONDS)

    async def close(self) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
