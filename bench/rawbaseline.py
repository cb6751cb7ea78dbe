"""The `raw` section of bench/worker.py: the raw loop's jobs/s, the floor ours is held against.

K plain psycopg processes (bench/rawloop.py: claim batch 10 with SKIP LOCKED, one fenced
completion per job, BEGIN/COMMIT around each) on N jobs, for each K of --processes, in a database
of their own on the same cluster: jobs/s = N / (last finished_at - start), beside ours at K.
"""

import subprocess
import time
from contextlib import ExitStack
from typing import TYPE_CHECKING

import psycopg
from psycopg import sql as pgsql

from bench.common import PYTHON, ROOT, RUN_TIMEOUT, ratio
from bench.rawloop import SCHEMA as RAW_SCHEMA

if TYPE_CHECKING:
    from bench.worker import Bench


def run(bench: "Bench", counts: list[int], n: int) -> list[dict]:
    with psycopg.connect(bench.admin_url, autocommit=True) as admin:
        admin.execute(pgsql.SQL("CREATE DATABASE {}").format(pgsql.Identifier("rawloop")))
    dsn = bench.admin_url.rsplit("/", 1)[0] + "/rawloop"
    results = []
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(RAW_SCHEMA)
        for processes in counts:
            conn.execute("TRUNCATE raw_jobs")
            conn.execute(
                "INSERT INTO raw_jobs (next_attempt_at) "
                "SELECT now() - interval '1 s' FROM generate_series(1, %s)",
                [n],
            )
            conn.execute("VACUUM ANALYZE raw_jobs")
            with ExitStack() as stack:
                loops = []
                for _ in range(processes):
                    loop = subprocess.Popen(
                        [PYTHON, str(ROOT / "bench" / "rawloop.py"), dsn, "10"],
                        stdin=subprocess.PIPE,
                        stdout=subprocess.PIPE,
                        text=True,
                    )
                    stack.callback(bench._stop, loop)
                    loops.append(loop)
                for loop in loops:
                    if loop.stdout.readline().strip() != "ready":
                        raise RuntimeError("raw loop did not start")
                started = time.time()
                for loop in loops:
                    loop.stdin.write("go\n")
                    loop.stdin.flush()
                for loop in loops:
                    if loop.wait(RUN_TIMEOUT) != 0:
                        raise RuntimeError("raw loop failed")
            done, last = conn.execute(
                "SELECT count(*), max(finished_at) FROM raw_jobs WHERE state = 'SUCCEEDED'"
            ).fetchone()
            elapsed = last.timestamp() - started
            result = {
                "processes": processes,
                "batch": 10,
                "jobs": n,
                "succeeded": done,
                "seconds": round(elapsed, 3),
                "jobs_per_second": round(n / elapsed, 1),
            }
            print(f"  raw loop {processes} processes: {result['jobs_per_second']} jobs/s")
            results.append(result)
    return results


def summary_lines(report: dict) -> list[str]:
    if "raw_loop" not in report:
        return []
    raw = {r["processes"]: r["jobs_per_second"] for r in report["raw_loop"]}
    lines = ["  raw loop jobs/s by processes: " + ", ".join(f"{k}: {v}" for k, v in raw.items())]
    for r in report.get("throughput", []):
        if r["processes"] in raw:
            lines.append(
                f"  ours {r['processes']}x{r['concurrency']} / raw loop at "
                f"{r['processes']}: {ratio(r['executions_per_second'], raw[r['processes']])}"
            )
    return lines
