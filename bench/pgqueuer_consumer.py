"""A plain pgqueuer consumer: the fastest Python queue we know, a peer of bench/worker.py.

    python bench/pgqueuer_consumer.py DSN MAX_CONCURRENT_TASKS LOOP

One asyncpg connection under one `QueueManager`, run as `pgq run` runs it: batch 10, no cap on
its tasks when MAX_CONCURRENT_TASKS is 0 (its default), on uvloop when LOOP is `uvloop` (what
`pgq run` picks when it is installed, and pgqueuer installs it) or on asyncio's own loop. Prints
"ready" once a notification it sent came back through its listener, so the bench enqueues only
into consumers that would hear it; then runs until SIGTERM. Its entrypoints:
- `noop`: nothing (throughput);
- `post`: POST a small JSON body to BENCH_PROVIDER_URL with one shared `aiohttp.ClientSession`
  (the slow-provider run), failing on any status but 200.
"""

import asyncio
import os
import signal
import sys
from datetime import timedelta

import aiohttp
import asyncpg
from pgqueuer import AsyncpgDriver, Job, Queries, QueueManager
from pgqueuer.errors import FailingListenerError

BATCH = 10  # `pgq run`'s default
PROBE_SECONDS = 1.0  # one listener probe; the first may go out before LISTEN does


async def announce_ready(manager: QueueManager) -> None:
    while True:
        try:
            await manager.listener_healthy(timedelta(seconds=PROBE_SECONDS))
        except FailingListenerError:
            continue
        print("ready", flush=True)
        return


async def consume(dsn: str, max_tasks: int) -> None:
    connection = await asyncpg.connect(
        dsn, server_settings={"application_name": "pgqueuer-consumer"}
    )
    manager = QueueManager(Queries(AsyncpgDriver(connection)))
    session = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0),  # as many connections as tasks
        timeout=aiohttp.ClientTimeout(total=10),
    )
    url = os.environ.get("BENCH_PROVIDER_URL", "")

    @manager.entrypoint("noop")
    async def noop(job: Job) -> None:
        return None

    @manager.entrypoint("post")
    async def post(job: Job) -> None:
        async with session.post(url, json={"amount": 1}) as response:
            await response.read()
            if response.status != 200:
                raise RuntimeError(f"provider answered {response.status}")

    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, manager.shutdown.set)
    ready = asyncio.create_task(announce_ready(manager))
    try:
        await manager.run(batch_size=BATCH, max_concurrent_tasks=max_tasks or None)
    finally:
        ready.cancel()
        await session.close()
        await connection.close()


def main(argv: list[str]) -> int:
    dsn, max_tasks, loop = argv[1], int(argv[2]), argv[3]
    if loop == "uvloop":
        import uvloop

        uvloop.run(consume(dsn, max_tasks))
    else:
        asyncio.run(consume(dsn, max_tasks))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
