"""The API load of bench/api.py: concurrent clients with a real token, one kind of call.

    python bench/apiclients.py BASE_URL TOKEN transitions|get|bearers LINES_FILE CONCURRENCY

LINES_FILE has one line per call: a request id for `transitions` (each gets exactly one
`POST /api/v1/requests/{id}/transitions` of transition `go` at revision 1), a path for `get`
(`GET BASE_URL + path`), a token for `bearers` (`GET /api/bench/ceiling` with that token).
CONCURRENCY threads, each with its own `requests.Session` (keep-alive whenever the server allows
it), share the lines; each line is called once. Prints one JSON line: requests/s, p50 and p99 in
ms, and the count of each status.
"""

import json
import sys
import threading
import time
from collections import Counter

import requests


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(p / 100 * (len(ordered) - 1))))]


def main(argv: list[str]) -> int:
    base, token, kind, lines_file, concurrency = argv[1:6]
    lines = [line.strip() for line in open(lines_file) if line.strip()]
    concurrency = int(concurrency)
    headers = {"Authorization": f"Bearer {token}"}
    lock = threading.Lock()
    cursor = [0]
    latencies: list[float] = []
    statuses: Counter[int] = Counter()
    start = threading.Barrier(concurrency + 1)

    def client() -> None:
        session = requests.Session()
        session.headers.update(headers)
        start.wait()
        mine, codes = [], Counter()
        while True:
            with lock:
                if cursor[0] >= len(lines):
                    break
                item = lines[cursor[0]]
                cursor[0] += 1
            began = time.perf_counter()
            if kind == "transitions":
                response = session.post(
                    f"{base}/api/v1/requests/{item}/transitions",
                    json={"transitionId": "go", "expectedRevision": 1},
                    timeout=30,
                )
            elif kind == "bearers":
                response = session.get(
                    f"{base}/api/bench/ceiling",
                    headers={"Authorization": f"Bearer {item}"},
                    timeout=30,
                )
            else:
                response = session.get(base + item, timeout=30)
            mine.append(time.perf_counter() - began)
            codes[response.status_code] += 1
        with lock:
            latencies.extend(mine)
            statuses.update(codes)

    threads = [threading.Thread(target=client, daemon=True) for _ in range(concurrency)]
    for thread in threads:
        thread.start()
    start.wait()
    began = time.perf_counter()
    for thread in threads:
        thread.join()
    seconds = time.perf_counter() - began
    print(
        json.dumps(
            {
                "calls": len(latencies),
                "clients": concurrency,
                "requests_per_second": round(len(latencies) / seconds, 1),
                "p50_ms": round(percentile(latencies, 50) * 1000, 2),
                "p99_ms": round(percentile(latencies, 99) * 1000, 2),
                "statuses": dict(statuses),
            }
        ),
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
