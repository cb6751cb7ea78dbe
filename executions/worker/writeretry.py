"""A fenced write that fails with a database error: logged by statement name, retried with
jittered backoff for at most `budget_seconds` (the runner gives half the lease), then raised so
the run is left for recovery by lease (why: docs/worker-protocol.md#poison-cap).

`ExecutionSuperseded` is a value, never retried. A lost connection is retried only with a `Ride`
(docs/worker-protocol.md#database-outages): the holder keeps its lease, waits until the database
answers again (`Ride.reachable`, one probe per process) and writes again while its stop signal
stays clear; fencing decides what the retried write finds. Without a `Ride` it is raised.
"""

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import psycopg

from actions.base import StopSignal

from .retry import backoff_seconds

logger = logging.getLogger("executions.worker")

BACKOFF_BASE_SECONDS = 0.05  # seconds: the first pause after a failed fenced write
BACKOFF_MAX_SECONDS = 2.0  # seconds: the longest pause between two tries

Result = TypeVar("Result")


def _connection_lost(exc: psycopg.Error) -> bool:
    if isinstance(exc, psycopg.InterfaceError):
        return True
    state = getattr(exc, "sqlstate", None)
    return isinstance(exc, psycopg.OperationalError) and (
        state is None or state.startswith("08") or state in ("57P01", "57P02", "57P03")
    )


class Flag(Protocol):
    """A stop signal as the loop reads it: a StopSignal or a threading.Event."""

    def is_set(self) -> bool: ...


@dataclass(frozen=True)
class Ride:
    """How a holder's write rides through a database outage: `reachable(held)` returns True once
    the database answers again, False as soon as `held` (the holder's stop signal: its lease
    lost, or the run told to stop) is set."""

    held: Flag
    reachable: Callable[[Flag], Awaitable[bool]]


async def fenced_write(
    statement: str,
    write: Callable[[], Awaitable[Result]],
    *,
    budget_seconds: float,
    log_extra: dict[str, Any],
    rng: random.Random | None = None,
    stop: StopSignal | None = None,
    ride: Ride | None = None,
) -> Result:
    """Run `write`; on a database error, log it with `statement` and retry within the budget; on
    a lost connection, with `ride`, wait for the database and write again (module docstring)."""
    rng = rng or random.Random()  # noqa: S311  (jitter, not a secret)
    deadline = time.monotonic() + budget_seconds
    attempt = 0
    while True:
        try:
            return await write()
        except psycopg.Error as exc:
            if _connection_lost(exc):
                if ride is None or not await _ride_through(ride, statement, exc, log_extra):
                    raise
                deadline = time.monotonic() + budget_seconds
                continue
            attempt += 1
            pause = backoff_seconds(
                attempt=attempt, base=BACKOFF_BASE_SECONDS, cap=BACKOFF_MAX_SECONDS, rng=rng
            )
            left = deadline - time.monotonic()
            giving_up = pause >= left or (stop is not None and stop.is_set())
            logger.warning(
                "fenced write failed; giving the lease up"
                if giving_up
                else "fenced write failed; retrying inside the lease",
                extra={
                    **log_extra,
                    "statement": statement,
                    "error": type(exc).__name__,
                    "sqlstate": getattr(exc, "sqlstate", None),
                    "try": attempt,
                },
            )
            if giving_up:
                raise
            await signal_wait(stop, pause)


async def _ride_through(
    ride: Ride, statement: str, exc: psycopg.Error, log_extra: dict[str, Any]
) -> bool:
    """Wait, lease kept, until the database answers again; False when the holder must give up."""
    if ride.held.is_set():
        return False
    logger.info(
        "fenced write waits for the database; lease kept",
        extra={**log_extra, "statement": statement, "error": type(exc).__name__},
    )
    back = await ride.reachable(ride.held)
    logger.info(
        "fenced write retried after the outage" if back else "fenced write given up: lease lost",
        extra={**log_extra, "statement": statement},
    )
    return back


STOP_POLL_SECONDS = 0.05  # seconds between looks at a stop signal while a pause lasts


async def signal_wait(stop: Flag | None, seconds: float) -> bool:
    """Sleep `seconds` on the loop, or less if `stop` is set meanwhile; return whether it is."""
    deadline = time.monotonic() + seconds
    while stop is None or not stop.is_set():
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        await asyncio.sleep(left if stop is None else min(left, STOP_POLL_SECONDS))
    return True
