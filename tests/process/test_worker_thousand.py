"""A thousand slots in one runworker process: all of them waiting on a slow provider at once,
on at most 4 PostgreSQL connections, and no collapse in throughput as slots grow.

The provider is a loopback asynchronous HTTP server that answers every POST after DELAY seconds
and counts the calls it holds at once, so "a thousand slots" is measured where it matters: a
thousand calls in flight together.
"""

import asyncio
import signal
import threading
import time

import pytest
from aiohttp import web

from executions.worker.loopthread import LoopThread
from tests.process.test_worker_connections import MAX_CONNECTIONS, Counter, Sampler, backends_of
from tests.support.worker import (
    WorkerProcess,
    action,
    create_flow,
    enqueue,
    flow_definition,
    statuses,
    wait_until,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.process]

CONCURRENCY = 1_000
EXECUTIONS = 2_000  # two rounds of a full process
DELAY = 4.0  # seconds the provider holds every call: long enough for every slot to fill
# The two rounds take 2 * DELAY when the slots are really concurrent; a thread per slot, or a
# collapse as slots grow, would take many times that. Generous for a shared, loaded machine.
DEADLINE_SECONDS = 120


class SlowProvider:
    """Answers every POST with {"ok": true} after DELAY seconds, on a loop of its own."""

    def __init__(self) -> None:
        self.in_flight = 0
        self.most_in_flight = 0
        self.calls = 0
        self._lock = threading.Lock()
        self._loop = LoopThread(name="slow-provider")
        self._runner: web.AppRunner | None = None
        self.port = self._loop.call(self._start())

    async def _answer(self, request: web.Request) -> web.Response:
        await request.read()
        with self._lock:
            self.calls += 1
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            await asyncio.sleep(DELAY)
        finally:
            with self._lock:
                self.in_flight -= 1
        return web.json_response({"ok": True})

    async def _start(self) -> int:
        app = web.Application()
        app.router.add_post("/slow", self._answer)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0, backlog=4096)
        await site.start()
        return site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    def close(self) -> None:
        if self._runner is not None:
            self._loop.call(self._runner.cleanup())
        self._loop.stop()


@pytest.fixture
def provider():
    double = SlowProvider()
    try:
        yield double
    finally:
        double.close()


def test_runworker__a_thousand_slots_wait_at_once_on_four_connections(
    process_env, runtime_conn, runtime_dsn, provider, tmp_path
):
    integrations = tmp_path / "integrations.toml"
    integrations.write_text(
        '[contracts."slow.read@1"]\n'
        'effect = "READ_ONLY"\n'
        "max_attempts = 1\n"
        "timeout_seconds = 10\n"
        "\n"
        '[routes."slow.read@1"]\n'
        'adapter = "http.json"\n'
        f'url = "http://127.0.0.1:{provider.port}/slow"\n'
        'method = "POST"\n'
    )
    flow = create_flow(runtime_conn, flow_definition([action("read", "slow.read", input={})]))
    accepted = [enqueue(runtime_conn, flow, notify=False).execution_id for _ in range(EXECUTIONS)]

    env = {**process_env, "INTEGRATIONS_FILE": str(integrations)}
    with WorkerProcess(
        env,
        tmp_path / "worker.log",
        WORKER_CONCURRENCY=str(CONCURRENCY),
        WORKER_BATCH="100",
        WORKER_LEASE_SECONDS="30",
        WORKER_RENEW_SECONDS="5",
        LOG_LEVEL="WARNING",
    ) as worker:
        with Sampler(runtime_dsn, Counter(worker.pid, None)) as sampler:
            started = time.monotonic()
            wait_until(
                lambda: statuses(runtime_conn, accepted) == ["SUCCEEDED"] * EXECUTIONS,
                timeout=DEADLINE_SECONDS,
                what=f"{EXECUTIONS} executions to succeed",
            )
            took = time.monotonic() - started
            after = backends_of(runtime_conn, worker.pid)
        worker.signal(signal.SIGTERM)
        assert worker.wait() == 0, worker.output()

    assert provider.calls == EXECUTIONS
    # Nearly every slot was inside its call at the same moment: slots are concurrent for real.
    assert provider.most_in_flight >= 0.9 * CONCURRENCY, provider.most_in_flight
    # No collapse: a round of a thousand calls costs about one provider delay, not many.
    assert took < 10 * DELAY * EXECUTIONS / CONCURRENCY + 30, took
    assert 1 <= sum(sampler.most) <= MAX_CONNECTIONS, sampler.most
    assert 1 <= after <= MAX_CONNECTIONS, after
