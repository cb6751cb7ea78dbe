"""A plain Procrastinate worker: the baseline of bench/worker.py.

    python bench/procrastinate_worker.py DSN CONCURRENCY

Runs until SIGTERM, listening for notifications like our worker does. Its tasks:
- `noop`: nothing (throughput);
- `pickup`: appends "<job id> <time.time()>" to the file BENCH_PICKUP_FILE names, first thing,
  so the bench can subtract each job's defer commit (pickup latency);
- `post`: the idiomatic async HTTP call, POST to BENCH_PROVIDER_URL with one shared
  `httpx.AsyncClient` (the slow-provider run).
"""

import os
import sys
import time

import httpx
from procrastinate import App, JobContext, PsycopgConnector

app = App(connector=PsycopgConnector(conninfo=sys.argv[1] if len(sys.argv) > 1 else ""))
_client: httpx.AsyncClient | None = None


@app.task(name="noop")
async def noop() -> None:
    return None


@app.task(name="pickup", pass_context=True)
async def pickup(context: JobContext) -> None:
    started = time.time()
    with open(os.environ["BENCH_PICKUP_FILE"], "a") as marks:
        marks.write(f"{context.job.id} {started}\n")


@app.task(name="post")
async def post() -> None:
    global _client
    if _client is None:
        _client = httpx.AsyncClient(
            timeout=10, limits=httpx.Limits(max_connections=None, max_keepalive_connections=None)
        )
    response = await _client.post(os.environ["BENCH_PROVIDER_URL"], json={"amount": 1})
    response.raise_for_status()


def main(argv: list[str]) -> None:
    with app.open():
        app.run_worker(concurrency=int(argv[2]), wait=True, listen_notify=True)


if __name__ == "__main__":
    main(sys.argv)
