"""What an adapter may do on the event loop, and past what size it hands the work to a thread.

    python bench/offloop.py

Measures, on one core of this machine: the round trip of `asyncio.to_thread` (what handing work
over costs the loop), SHA-256 over chunks of several sizes (documents.verify), and the strict JSON
parse of answers of several sizes (http.json). Prints one JSON line per figure. A step belongs
in a thread when it holds the loop much longer than the hand-over costs.
"""

import asyncio
import hashlib
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from orquestador import strictjson

REPEATS = 200


def _best_of(repeats: int, step) -> float:
    """Median seconds of one `step()`."""
    times = []
    for _ in range(repeats):
        began = time.perf_counter()
        step()
        times.append(time.perf_counter() - began)
    return statistics.median(times)


async def _hand_over() -> float:
    await asyncio.to_thread(lambda: None)  # the executor's thread exists from here on
    times = []
    for _ in range(REPEATS * 5):
        began = time.perf_counter()
        await asyncio.to_thread(lambda: None)
        times.append(time.perf_counter() - began)
    return statistics.median(times)


def main() -> int:
    hand_over = asyncio.run(_hand_over())
    print(json.dumps({"what": "asyncio.to_thread round trip", "us": round(hand_over * 1e6, 1)}))
    for size in (16 * 1024, 64 * 1024, 256 * 1024, 1024 * 1024, 4 * 1024 * 1024):
        data = b"x" * size
        repeats = REPEATS // 4 if size > 1024 * 1024 else REPEATS
        seconds = _best_of(repeats, lambda data=data: hashlib.sha256(data).digest())
        print(
            json.dumps(
                {
                    "what": "sha256",
                    "bytes": size,
                    "us": round(seconds * 1e6, 1),
                    "mb_per_s": round(size / seconds / 1e6),
                    "x_hand_over": round(seconds / hand_over, 1),
                }
            )
        )
    for size in (16 * 1024, 64 * 1024, 256 * 1024, 1024 * 1024):
        record = {"id": "op-1", "status": "done", "amount": 12.5, "tags": ["a", "b"]}
        items = max(1, size // len(json.dumps(record)))
        body = json.dumps({"items": [dict(record, n=n) for n in range(items)]}).encode()
        seconds = _best_of(20, lambda body=body: strictjson.loads(body))
        print(
            json.dumps(
                {
                    "what": "strictjson.loads",
                    "bytes": len(body),
                    "us": round(seconds * 1e6, 1),
                    "mb_per_s": round(len(body) / seconds / 1e6, 1),
                    "x_hand_over": round(seconds / hand_over, 1),
                }
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
