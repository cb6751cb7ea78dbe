"""The fastest peers of bench/worker.py: pgqueuer, and HTTP alone on one event loop.

Two sections, on the cluster and the slow provider the other sections use:
- `pgqueuer`: pgqueuer 1.6 (asyncio, asyncpg; bench/pgqueuer_consumer.py, run as `pgq run`
  runs it, on uvloop) in a database of its own. No-op throughput by our method: K consumer
  processes started and idle, N jobs enqueued in one statement (its trigger sends the
  notification), jobs/s = N / (last job logged done - enqueue commit), with the consumers' and
  PostgreSQL's CPU, the commits and the consumers' context switches per job, at each
  --processes. Then the 100 ms provider: one consumer whose `post` task calls it with aiohttp,
  at each --slow-concurrency (its `max_concurrent_tasks`).
- `http-async`: the asynchronous database-free ceiling, bench/asynchttp.py (one event loop,
  aiohttp, as many tasks as the concurrency) at each --slow-concurrency, on asyncio's own loop
  and on uvloop, beside the threaded ceiling the `slow` section measures.

`summary_lines` gives the summary's lines of both, ours against theirs where the report holds
ours too.
"""

from __future__ import annotations

import asyncio
import json
import os
import selectors
import subprocess
import sys
import time
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING

import psycopg
from psycopg import sql as pgsql

from bench.procstat import context_switches, switches_per, switches_text

if TYPE_CHECKING:
    from bench.worker import Bench

ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable  # bench/run runs the bench with the virtual environment's interpreter
READY_TIMEOUT = 60  # seconds for consumers to hear their own notification
RUN_TIMEOUT = 300  # seconds for one run
POLL_SECONDS = 0.05  # seconds between completion checks, as bench/worker.py's
PGQUEUER_LOOP = "uvloop"  # what `pgq run` runs on when uvloop is installed (pgqueuer installs it)
ASYNC_LOOPS = ("asyncio", "uvloop")
DATABASE = "pgq"
# Whether any job is still to finish: a finished job leaves the queue table for the log.
LIVE_ANY = "SELECT EXISTS (SELECT FROM pgqueuer)"
RUN_WINDOW = """
SELECT count(*) FILTER (WHERE status = 'successful'),
       count(*) FILTER (WHERE status NOT IN ('queued', 'picked', 'successful')),
       max(created) FILTER (WHERE status NOT IN ('queued', 'picked'))
  FROM pgqueuer_log
 WHERE id > %s
"""
CONNECTIONS = (  # the consumers' (bench/pgqueuer_consumer.py names them)
    "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'pgqueuer-consumer'"
)
COMMITS = "SELECT xact_commit FROM pg_stat_database WHERE datname = %s"


async def _install(dsn: str) -> None:
    import asyncpg
    from pgqueuer import AsyncpgDriver, Queries

    connection = await asyncpg.connect(dsn)
    try:
        await Queries(AsyncpgDriver(connection)).install()
    finally:
        await connection.close()


async def _enqueue(dsn: str, entrypoint: str, n: int) -> float:
    """Enqueue n jobs in one statement (autocommit); the time it committed."""
    import asyncpg
    from pgqueuer import AsyncpgDriver, Queries

    connection = await asyncpg.connect(dsn)
    try:
        await Queries(AsyncpgDriver(connection)).enqueue([entrypoint] * n, [None] * n, [0] * n)
        return time.time()
    finally:
        await connection.close()


def _wait_ready(processes: list[subprocess.Popen], deadline: float) -> None:
    """Until each process printed "ready" on its standard output."""
    with selectors.DefaultSelector() as selector:
        for process in processes:
            selector.register(process.stdout, selectors.EVENT_READ, process)
        waiting = len(processes)
        while waiting:
            events = selector.select(max(0.0, deadline - time.monotonic()))
            if not events:
                raise RuntimeError("pgqueuer consumers did not get ready in time")
            for key, _ in events:
                line = key.fileobj.readline()
                if line.strip() != "ready":
                    raise RuntimeError(f"a pgqueuer consumer ended or said {line!r}")
                selector.unregister(key.fileobj)
                waiting -= 1


class Peers:
    """pgqueuer's runs and the asynchronous HTTP ceiling, on a Bench's cluster."""

    def __init__(self, bench: Bench) -> None:
        self.bench = bench
        self._dsn: str | None = None

    def _database(self) -> str:
        """pgqueuer's own database on the cluster, its schema installed (once)."""
        if self._dsn is None:
            with psycopg.connect(self.bench.admin_url, autocommit=True) as admin:
                admin.execute(pgsql.SQL("CREATE DATABASE {}").format(pgsql.Identifier(DATABASE)))
            dsn = self.bench.admin_url.rsplit("/", 1)[0] + "/" + DATABASE
            asyncio.run(_install(dsn))
            self._dsn = dsn
        return self._dsn

    def _consumers(
        self,
        stack: ExitStack,
        processes: int,
        max_tasks: int,
        label: str,
        env: dict[str, str] | None,
    ) -> list[subprocess.Popen]:
        consumers = []
        for index in range(processes):
            log = open(self.bench.base / f"{label}-{index}.log", "wb")
            stack.callback(log.close)
            process = subprocess.Popen(
                [
                    PYTHON,
                    str(ROOT / "bench" / "pgqueuer_consumer.py"),
                    self._database(),
                    str(max_tasks),
                    PGQUEUER_LOOP,
                ],
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
                env={**os.environ, **(env or {})},
            )
            stack.callback(self.bench._stop, process)
            consumers.append(process)
        _wait_ready(consumers, time.monotonic() + READY_TIMEOUT)
        return consumers

    def run(
        self,
        processes: int,
        n: int,
        *,
        entrypoint: str = "noop",
        max_tasks: int = 0,
        env: dict[str, str] | None = None,
    ) -> dict:
        """One configuration: K idle consumers, n jobs enqueued at once, until all are done."""
        bench, dsn = self.bench, self._database()
        label = f"pgqueuer-{entrypoint}-{processes}x{max_tasks or 'uncapped'}"
        with psycopg.connect(dsn, autocommit=True) as conn, ExitStack() as stack:
            # As bench/worker.py's runs: each starts from vacuumed, analysed tables.
            conn.execute("VACUUM ANALYZE pgqueuer, pgqueuer_log")
            first_id = conn.execute("SELECT coalesce(max(id), 0) FROM pgqueuer_log").fetchone()[0]
            consumers = self._consumers(stack, processes, max_tasks, label, env)
            connections = conn.execute(CONNECTIONS).fetchone()[0]
            cpu = [bench._cpu_seconds(p.pid) for p in consumers]
            switches = [context_switches(p.pid) for p in consumers]
            server_cpu = bench._server_cpu_seconds()
            commits = conn.execute(COMMITS, [DATABASE]).fetchone()[0]
            committed = asyncio.run(_enqueue(dsn, entrypoint, n))
            deadline = time.monotonic() + RUN_TIMEOUT
            while conn.execute(LIVE_ANY).fetchone()[0]:
                if time.monotonic() > deadline or any(p.poll() is not None for p in consumers):
                    raise RuntimeError(f"{label}: not finished; see {bench.base}")
                connections = max(connections, conn.execute(CONNECTIONS).fetchone()[0])
                time.sleep(POLL_SECONDS)
            cpu = [bench._cpu_seconds(p.pid) - b for p, b in zip(consumers, cpu, strict=True)]
            switches = switches_per(switches, [context_switches(p.pid) for p in consumers], n)
            server_cpu = bench._server_cpu_seconds() - server_cpu
            commits = conn.execute(COMMITS, [DATABASE]).fetchone()[0] - commits
            memory = [bench._memory(p.pid) for p in consumers]
            succeeded, failed, last = conn.execute(RUN_WINDOW, [first_id]).fetchone()
        elapsed = last.timestamp() - committed
        result = {
            "entrypoint": entrypoint,
            "processes": processes,
            "max_concurrent_tasks": max_tasks or None,
            "loop": PGQUEUER_LOOP,
            "jobs": n,
            "succeeded": succeeded,
            "failed": failed,
            "seconds": round(elapsed, 3),
            "jobs_per_second": round(n / elapsed, 1),
            "connections": connections,
            "rss_mib": memory,
            "consumer_cpu_ms_per_job": round(sum(cpu) / n * 1000, 3),
            "postgres_cpu_ms_per_job": round(server_cpu / n * 1000, 3),
            "commits_per_job": round(commits / n, 2),
            "context_switches_per_job": switches,
        }
        print(
            f"  {label}: {result['jobs_per_second']} jobs/s ({succeeded}/{n} succeeded, "
            f"{failed} failed, {elapsed:.2f}s), {connections} connections, CPU/job: consumers "
            f"{result['consumer_cpu_ms_per_job']} ms, PostgreSQL "
            f"{result['postgres_cpu_ms_per_job']} ms; {result['commits_per_job']} commits/job, "
            f"context switches/job {switches['voluntary']} + {switches['nonvoluntary']}",
            flush=True,
        )
        return result

    def pgqueuer(
        self, counts: list[int], n: int, concurrencies: list[int], calls: int, delay: float
    ) -> dict:
        report: dict = {"loop": PGQUEUER_LOOP, "noop": [self.run(k, n) for k in counts]}
        with ExitStack() as stack:
            url = self._provider(stack, delay)
            report["slow"] = {
                "provider_delay_seconds": delay,
                "runs": [self._slow(c, max(calls, c * 10), url) for c in concurrencies],
            }
        return report

    def _slow(self, concurrency: int, n: int, url: str) -> dict:
        """One consumer at `concurrency` tasks calling the provider; its throughput, or the error
        (as our worker's slow runs: one failing concurrency leaves the others measured)."""
        try:
            return self.run(
                1,
                n,
                entrypoint="post",
                max_tasks=concurrency,
                env={"BENCH_PROVIDER_URL": url},
            )
        except RuntimeError as exc:
            print(f"  pgqueuer+aiohttp at {concurrency}: {exc}", flush=True)
            return {"max_concurrent_tasks": concurrency, "error": str(exc)}

    def _provider(self, stack: ExitStack, delay: float) -> str:
        """The slow provider the worker's section calls, started for this one; its URL."""
        port, _ = self.bench.slow_route(stack, delay)
        return f"http://127.0.0.1:{port}/slow"

    def http_async(self, concurrencies: list[int], calls: int, delay: float) -> dict:
        report: dict = {"provider_delay_seconds": delay, "runs": []}
        with ExitStack() as stack:
            url = self._provider(stack, delay)
            for concurrency in concurrencies:
                n = max(calls, concurrency * 10)
                for loop in ASYNC_LOOPS:
                    run = subprocess.run(
                        [
                            PYTHON,
                            str(ROOT / "bench" / "asynchttp.py"),
                            url,
                            str(concurrency),
                            str(n),
                            loop,
                        ],
                        check=True,
                        capture_output=True,
                        text=True,
                        timeout=RUN_TIMEOUT,
                    )
                    result = {"concurrency": concurrency, "loop": loop, **json.loads(run.stdout)}
                    result["cpu_ms_per_call"] = round(result["cpu_seconds"] / n * 1000, 3)
                    result["context_switches_per_call"] = {
                        "voluntary": round(result["voluntary_ctxt_switches"] / n, 2),
                        "nonvoluntary": round(result["nonvoluntary_ctxt_switches"] / n, 2),
                    }
                    print(
                        f"  aiohttp alone on {loop} at {concurrency} (no database): "
                        f"{result['calls_per_second']} calls/s, {result['cpu_ms_per_call']} ms "
                        f"CPU/call, {result['errors']} errors",
                        flush=True,
                    )
                    report["runs"].append(result)
        return report


def _ratio(ours: float, theirs: float) -> str:
    return f"{ours / theirs:.2f}x" if theirs else "n/a"


def summary_lines(report: dict) -> list[str]:
    """The summary's lines of the pgqueuer and http-async sections, beside ours."""
    lines: list[str] = []
    ours_runs = report.get("throughput", []) + report.get("throughput_more_concurrency", [])
    ours_best = max(ours_runs, key=lambda r: r["executions_per_second"], default=None)
    ours_at = {r["processes"]: r for r in report.get("throughput", [])}
    if "pgqueuer" in report:
        noop = report["pgqueuer"]["noop"]
        lines.append(
            f"  pgqueuer ({report['pgqueuer']['loop']}) no-op jobs/s by processes: "
            + ", ".join(f"{r['processes']}: {r['jobs_per_second']}" for r in noop)
        )
        for theirs in noop:
            ours = ours_at.get(theirs["processes"])
            lines.append(
                f"  pgqueuer at {theirs['processes']}: per job consumer CPU "
                f"{theirs['consumer_cpu_ms_per_job']} ms, PostgreSQL "
                f"{theirs['postgres_cpu_ms_per_job']} ms, {theirs['commits_per_job']} commits, "
                f"{switches_text(theirs['context_switches_per_job'])} context switches"
                + (
                    f"; ours {ours['processes']}x{ours['concurrency']}: "
                    f"{ours['executions_per_second']}/s "
                    f"({_ratio(ours['executions_per_second'], theirs['jobs_per_second'])}), "
                    f"worker {ours['worker_cpu_ms_per_execution']} ms, PostgreSQL "
                    f"{ours['postgres_cpu_ms_per_execution']} ms, "
                    f"{ours['commits_per_execution']} commits, "
                    f"{switches_text(ours['context_switches_per_execution'])} context switches"
                    if ours
                    else ""
                )
            )
        theirs_best = max(noop, key=lambda r: r["jobs_per_second"])
        lines.append(
            f"  pgqueuer best: {theirs_best['jobs_per_second']} jobs/s "
            f"({theirs_best['processes']} processes)"
            + (
                f"; ours best: {ours_best['executions_per_second']} executions/s "
                f"({ours_best['processes']}x{ours_best['concurrency']}) "
                f"({_ratio(ours_best['executions_per_second'], theirs_best['jobs_per_second'])})"
                if ours_best
                else ""
            )
        )
    ours_slow = {
        r["concurrency"]: r
        for r in report.get("slow_provider", {}).get("ours", [])
        if "error" not in r
    }
    if "pgqueuer" in report:
        for theirs in report["pgqueuer"]["slow"]["runs"]:
            c = theirs["max_concurrent_tasks"]
            if "error" in theirs:
                lines.append(f"  slow provider at {c}: pgqueuer+aiohttp {theirs['error']}")
                continue
            ours = ours_slow.get(c)
            lines.append(
                f"  slow provider at {c}: pgqueuer+aiohttp {theirs['jobs_per_second']}/s "
                f"({theirs['failed']} failed), {theirs['consumer_cpu_ms_per_job']} ms CPU/job, "
                f"{switches_text(theirs['context_switches_per_job'])} context switches/job"
                + (
                    f"; ours {ours['executions_per_second']}/s "
                    f"({_ratio(ours['executions_per_second'], theirs['jobs_per_second'])})"
                    if ours
                    else ""
                )
            )
    if "http_async" in report:
        by_concurrency: dict[int, list[dict]] = {}
        for r in report["http_async"]["runs"]:
            by_concurrency.setdefault(r["concurrency"], []).append(r)
        for c, runs in by_concurrency.items():
            best = max(runs, key=lambda r: r["calls_per_second"])
            ours = ours_slow.get(c)
            lines.append(
                f"  slow provider at {c}: aiohttp alone "
                + ", ".join(
                    f"on {r['loop']} {r['calls_per_second']}/s ({r['cpu_ms_per_call']} ms "
                    f"CPU/call, {switches_text(r['context_switches_per_call'])} context switches)"
                    for r in runs
                )
                + (
                    f"; ours / the faster: "
                    f"{_ratio(ours['executions_per_second'], best['calls_per_second'])}"
                    if ours
                    else ""
                )
            )
    return lines
