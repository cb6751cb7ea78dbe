"""Asynchronous HTTP clients against the slow provider: which one the adapters' transport uses.

    python bench/asyncclients.py [--delay 0.1] [--rounds 3] [--concurrency 100,200,1000]
    python bench/asyncclients.py --one CLIENT URL CONCURRENCY CALLS

One event loop, no database: CONCURRENCY tasks POST a small JSON body to bench/provider.py (on
127.0.0.1, answering after --delay seconds) until CALLS calls were made between them, after a
warm-up round that opens the connections. CLIENT is `aiohttp`, `httpx`, or `transport` (the
adapters' own `actions.transport.exchange`, on aiohttp, with every rule it keeps). `--one` prints
one JSON line: calls/s and the process's CPU per call; without it the script starts the provider,
runs every client at every concurrency --rounds times, alternating, and prints the medians.
"""

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

BODY = json.dumps({"amount": 1}).encode()
HEADERS = {"Content-Type": "application/json", "Accept": "application/json"}
CLIENTS = ("aiohttp", "httpx", "transport")
TIMEOUT = 10.0  # seconds, per call


async def _aiohttp_calls(url: str) -> tuple[Callable[[], Awaitable[int]], Callable]:
    import aiohttp

    session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
    timeout = aiohttp.ClientTimeout(total=TIMEOUT)

    async def call() -> int:
        async with session.post(url, data=BODY, headers=HEADERS, timeout=timeout) as response:
            await response.read()
            return response.status

    return call, session.close


async def _httpx_calls(url: str) -> tuple[Callable[[], Awaitable[int]], Callable]:
    import httpx

    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    client = httpx.AsyncClient(limits=limits, timeout=TIMEOUT, trust_env=False)

    async def call() -> int:
        response = await client.post(url, content=BODY, headers=HEADERS)
        return response.status_code

    return call, client.aclose


async def _transport_calls(url: str) -> tuple[Callable[[], Awaitable[int]], Callable]:
    from actions import pools, transport

    async def call() -> int:
        reply = await transport.exchange(
            method="POST",
            url=url,
            headers=HEADERS,
            body=BODY,
            deadline=transport.Deadline.after(TIMEOUT),
            connect_timeout=3.0,
            max_bytes=1024 * 1024,
            want_body=lambda status: 200 <= status < 300,
        )
        return reply.status

    return call, pools.close_client


MAKERS = {"aiohttp": _aiohttp_calls, "httpx": _httpx_calls, "transport": _transport_calls}


async def _measure(client: str, url: str, concurrency: int, calls: int) -> dict:
    call, close = await MAKERS[client](url)
    failures = 0

    async def burst(total: int) -> None:
        nonlocal failures
        left = total

        async def worker() -> None:
            nonlocal left, failures
            while left > 0:
                left -= 1
                try:
                    if await call() != 200:
                        failures += 1
                except Exception:
                    failures += 1

        await asyncio.gather(*(worker() for _ in range(concurrency)))

    try:
        await burst(concurrency)  # warm-up: every task opens its connection
        failures = 0
        cpu = os.times()
        began = time.perf_counter()
        await burst(calls)
        seconds = time.perf_counter() - began
        used = os.times()
    finally:
        await close()
    cpu_seconds = used.user + used.system - cpu.user - cpu.system
    return {
        "client": client,
        "concurrency": concurrency,
        "calls": calls,
        "failures": failures,
        "seconds": round(seconds, 3),
        "calls_per_second": round(calls / seconds, 1),
        "cpu_ms_per_call": round(cpu_seconds * 1000 / calls, 4),
    }


def _one(client: str, url: str, concurrency: int, calls: int) -> dict:
    result = subprocess.run(
        [sys.executable, __file__, "--one", client, url, str(concurrency), str(calls)],
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    return json.loads(result.stdout.strip().splitlines()[-1])


def _matrix(args: argparse.Namespace) -> int:
    provider = subprocess.Popen(
        [sys.executable, str(ROOT / "bench" / "provider.py"), str(args.delay)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        port = int(provider.stdout.readline()) if provider.stdout is not None else 0
        url = f"http://127.0.0.1:{port}/charges"
        rows: dict[tuple[str, int], list[dict]] = {}
        for _ in range(args.rounds):
            for concurrency in args.concurrency:
                calls = max(args.calls, 10 * concurrency)
                for client in args.clients:
                    row = _one(client, url, concurrency, calls)
                    print(json.dumps(row), flush=True)
                    rows.setdefault((client, concurrency), []).append(row)
    finally:
        provider.terminate()
        provider.wait(timeout=10)
    print("\n| client | concurrency | calls/s (median) | CPU per call (median) | failures |")
    print("| --- | --- | --- | --- | --- |")
    for (client, concurrency), found in rows.items():
        rate = statistics.median(r["calls_per_second"] for r in found)
        cpu = statistics.median(r["cpu_ms_per_call"] for r in found)
        failed = sum(r["failures"] for r in found)
        print(f"| {client} | {concurrency} | {rate:,.0f} | {cpu:.3f} ms | {failed} |")
    return 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--one", nargs=4, metavar=("CLIENT", "URL", "CONCURRENCY", "CALLS"))
    parser.add_argument("--delay", type=float, default=0.1, help="seconds the provider waits")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--calls", type=int, default=4000, help="at least, per measurement")
    parser.add_argument(
        "--concurrency", type=lambda v: [int(c) for c in v.split(",")], default=[100, 200, 1000]
    )
    parser.add_argument(
        "--clients", type=lambda v: v.split(","), default=list(CLIENTS), help="comma-separated"
    )
    args = parser.parse_args(argv[1:])
    if args.one:
        client, url, concurrency, calls = args.one
        row = asyncio.run(_measure(client, url, int(concurrency), int(calls)))
        print(json.dumps(row), flush=True)
        return 0
    return _matrix(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
