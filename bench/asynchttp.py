"""The asynchronous database-free ceiling of bench/worker.py: HTTP alone on one event loop.

    python bench/asynchttp.py URL CONCURRENCY CALLS LOOP

CONCURRENCY tasks on one event loop (uvloop when LOOP is `uvloop`, else asyncio's own) share one
`aiohttp.ClientSession` and POST a small JSON body to URL until CALLS calls were made between
them, as bench/httpclients.py does with a thread and a `requests.Session` each. Prints one JSON
line: calls, errors (a status but 200, or a failed call), seconds, calls/s, the process's CPU
seconds and its context switches.
"""

import asyncio
import json
import os
import resource
import sys
import time

import aiohttp


async def run(url: str, concurrency: int, calls: int) -> dict:
    left = calls
    errors = 0
    session = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0), timeout=aiohttp.ClientTimeout(total=10)
    )

    async def client() -> None:
        nonlocal left, errors
        while left > 0:
            left -= 1  # one loop: no lock needed between taking a call and making it
            try:
                async with session.post(url, json={"amount": 1}) as response:
                    await response.read()
                    if response.status != 200:
                        errors += 1
            except (aiohttp.ClientError, TimeoutError):
                errors += 1

    cpu, switches = os.times(), resource.getrusage(resource.RUSAGE_SELF)
    began = time.perf_counter()
    try:
        await asyncio.gather(*(client() for _ in range(concurrency)))
    finally:
        await session.close()
    seconds = time.perf_counter() - began
    used, after = os.times(), resource.getrusage(resource.RUSAGE_SELF)
    return {
        "calls": calls,
        "errors": errors,
        "seconds": round(seconds, 3),
        "calls_per_second": round(calls / seconds, 1),
        "cpu_seconds": round(used.user + used.system - cpu.user - cpu.system, 3),
        "voluntary_ctxt_switches": after.ru_nvcsw - switches.ru_nvcsw,
        "nonvoluntary_ctxt_switches": after.ru_nivcsw - switches.ru_nivcsw,
    }


def main(argv: list[str]) -> int:
    url, concurrency, calls, loop = argv[1], int(argv[2]), int(argv[3]), argv[4]
    if loop == "uvloop":
        import uvloop

        result = uvloop.run(run(url, concurrency, calls))
    else:
        result = asyncio.run(run(url, concurrency, calls))
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
