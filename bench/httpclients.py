"""The database-free ceiling of bench/worker.py: HTTP alone at the worker's concurrency.

    python bench/httpclients.py URL CONCURRENCY CALLS

CONCURRENCY threads, each with its own `requests.Session`, POST a small JSON body to URL until
CALLS calls were made between them. Prints one JSON line: calls, errors, seconds, calls/s, the
process's CPU seconds and its context switches (every thread's).
"""

import json
import os
import resource
import sys
import threading
import time

import requests


def main(argv: list[str]) -> int:
    url, concurrency, calls = argv[1], int(argv[2]), int(argv[3])
    left = [calls]
    lock = threading.Lock()
    start = threading.Barrier(concurrency + 1)
    errors = []

    def client() -> None:
        session = requests.Session()
        start.wait()
        while True:
            with lock:
                if left[0] <= 0:
                    return
                left[0] -= 1
            response = session.post(url, json={"amount": 1}, timeout=10)
            if response.status_code != 200:
                errors.append(response.status_code)

    threads = [threading.Thread(target=client, daemon=True) for _ in range(concurrency)]
    for thread in threads:
        thread.start()
    cpu, switches = os.times(), resource.getrusage(resource.RUSAGE_SELF)
    start.wait()
    began = time.perf_counter()
    for thread in threads:
        thread.join()
    seconds = time.perf_counter() - began
    used, after = os.times(), resource.getrusage(resource.RUSAGE_SELF)
    print(
        json.dumps(
            {
                "calls": calls,
                "errors": len(errors),
                "seconds": round(seconds, 3),
                "calls_per_second": round(calls / seconds, 1),
                "cpu_seconds": round(used.user + used.system - cpu.user - cpu.system, 3),
                "voluntary_ctxt_switches": after.ru_nvcsw - switches.ru_nvcsw,
                "nonvoluntary_ctxt_switches": after.ru_nivcsw - switches.ru_nivcsw,
            }
        ),
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
