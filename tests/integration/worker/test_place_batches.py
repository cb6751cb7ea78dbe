"""Places leased on a route far above need (executions/worker/placebatches.py): a burst of a
worker's first calls, every slot at once, asks the limiter for one lease and makes no take per
call, however many ask before it is granted."""

import asyncio

import psycopg
import pytest

from actions.base import Route, RouteLimits
from executions.worker.limiter import leased
from executions.worker.placebatches import LEASES

pytestmark = pytest.mark.django_db(transaction=True)

SLOTS = 50
FAR_ABOVE = Route(
    capability="leased.burst",
    version=1,
    adapter="http.json",
    limits=RouteLimits(max_in_flight=100_000, rate_count=1_000_000, rate_window_seconds=1),
)
KINDS = "SELECT kind, count(*) FROM route_call WHERE route = %s GROUP BY kind ORDER BY kind"


@pytest.fixture
def slots():
    LEASES.configure(slots=SLOTS, hold_seconds=30.0)
    yield
    LEASES.give_back()
    LEASES.configure(slots=0, hold_seconds=0.0)


async def _burst(dsn: str, calls: int) -> list[bool]:
    """`calls` first calls at once, each ending once every one has its place (all in flight)."""
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        got = await asyncio.gather(
            *(leased(conn, FAR_ABOVE, owner="worker-burst") for _ in range(calls))
        )
    for placed in got:
        if placed:
            LEASES.end(FAR_ABOVE.key)
    return list(got)


def test_burst_of_first_calls__one_lease_statement__no_take_per_call(slots, runtime_dsn, conn):
    first = asyncio.run(_burst(runtime_dsn, SLOTS))
    again = asyncio.run(_burst(runtime_dsn, SLOTS))  # the lease serves the next burst too

    assert first == [True] * SLOTS  # every slot placed from the one lease, none per call
    assert again == [True] * SLOTS
    assert conn.execute(KINDS, [FAR_ABOVE.key]).fetchall() == [("lease", 1)]
    (places,) = conn.execute(
        "SELECT places FROM route_call WHERE route = %s AND kind = 'lease'", [FAR_ABOVE.key]
    ).fetchone()
    assert places == SLOTS
