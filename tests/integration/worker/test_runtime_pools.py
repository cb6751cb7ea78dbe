"""The local runtime's two pools: the shared asynchronous one (the runs' writes, the renewals) and
the prober's synchronous one, both autocommit and set up for their pooling mode: the worker's
session settings directly, none behind a transaction pooler (PgBouncer itself is
tests/process/test_pgbouncer.py's)."""

import psycopg
import pytest

from executions.worker.pooling import PoolingConfig
from executions.worker.runtime import LocalWorkerRuntime
from tests.support.loop import on_loop
from tests.support.worker import FAST

pytestmark = pytest.mark.django_db(transaction=True)

SETTINGS = """
SELECT current_setting('plan_cache_mode'), current_setting('enable_seqscan'),
       current_setting('jit')
"""
# sql.WORKER_SESSION, WORKER_SCANS and WORKER_JIT: with sequential scans disabled and JIT on, a
# statement that still scans (the sweep's read of route_limit's pauses) compiled at every run.
DIRECT = ("force_generic_plan", "off", "off")
DEFAULTS = ("auto", "on", "on")  # PostgreSQL's own: nothing was SET


async def _shared(runtime: LocalWorkerRuntime) -> tuple[tuple, bool]:
    async with runtime.borrow() as conn:
        return await (await conn.execute(SETTINGS)).fetchone(), conn.autocommit


def _prober(runtime: LocalWorkerRuntime) -> tuple[tuple, bool]:
    with runtime.connection() as conn:
        assert isinstance(conn, psycopg.Connection)
        return conn.execute(SETTINGS).fetchone(), conn.autocommit


@pytest.mark.parametrize(
    ("pooling", "expected"),
    [(PoolingConfig(), DIRECT), (PoolingConfig(pooler="transaction"), DEFAULTS)],
    ids=["direct", "transaction pooler"],
)
def test_both_pools__autocommit_with_their_pooling_modes_session(runtime_dsn, pooling, expected):
    runtime = on_loop(
        LocalWorkerRuntime(conninfo=runtime_dsn, config=FAST, pooling=pooling),
        name="test-pools-loop",
    )
    try:
        shared = runtime.run(_shared(runtime.target))
        prober = _prober(runtime.target)
    finally:
        runtime.close()

    assert shared == (expected, True)
    assert prober == (expected, True)
