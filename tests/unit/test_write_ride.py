"""A holder's fenced write through a lost connection (executions/worker/writeretry.py): with a
`Ride` it waits for the database and writes again, lease kept; once its stop signal is set, or
without a `Ride`, the lost connection is raised."""

import asyncio

import psycopg
import pytest

from actions.base import StopSignal
from executions.worker.writeretry import Ride, fenced_write


class _Outage:
    """A write that loses its connection `failures` times, then succeeds; a database that
    answers when `back` says so."""

    def __init__(self, failures: int, *, back: bool = True) -> None:
        self.failures = failures
        self.back = back
        self.writes = 0
        self.waits = 0

    async def write(self) -> str:
        self.writes += 1
        if self.writes <= self.failures:
            raise psycopg.OperationalError("server closed the connection unexpectedly")
        return "written"

    async def reachable(self, held: StopSignal) -> bool:
        self.waits += 1
        if not self.back:
            held.set()  # the heartbeat found the lease lost meanwhile
        return self.back and not held.is_set()


def _write(outage: _Outage, ride: Ride | None) -> str:
    return asyncio.run(
        fenced_write("CHECKPOINT_SUCCEED", outage.write, budget_seconds=1, log_extra={}, ride=ride)
    )


def test_ride__writes_again_once_the_database_answers():
    outage = _Outage(failures=2)
    assert _write(outage, Ride(StopSignal(), outage.reachable)) == "written"
    assert (outage.writes, outage.waits) == (3, 2)


def test_ride__gives_the_write_up_when_the_lease_is_lost_meanwhile():
    outage = _Outage(failures=1, back=False)
    with pytest.raises(psycopg.OperationalError):
        _write(outage, Ride(StopSignal(), outage.reachable))
    assert (outage.writes, outage.waits) == (1, 1)


def test_ride__does_not_wait_for_a_holder_already_stopped():
    outage = _Outage(failures=1)
    held = StopSignal()
    held.set()
    with pytest.raises(psycopg.OperationalError):
        _write(outage, Ride(held, outage.reachable))
    assert outage.waits == 0


def test_without_a_ride__a_lost_connection_is_raised_at_once():
    outage = _Outage(failures=1)
    with pytest.raises(psycopg.OperationalError):
        _write(outage, None)
    assert outage.writes == 1
