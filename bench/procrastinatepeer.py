"""The `procrastinate` section of bench/worker.py: Procrastinate's jobs/s on the same cluster.

Same method as the throughput section: K worker processes (bench/procrastinate_worker.py)
started and idle, N no-op jobs deferred in one batch, jobs/s = N / (last succeeded event -
commit); 1x1, 1x10, 2x10, 4x10, and 1 and 2 processes at the highest --more-concurrency. The
pickup and slow sections run it too (its pickup task, its httpx `post` task).
"""

import asyncio
import os
import subprocess
import time
from contextlib import ExitStack
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg import sql as pgsql

from bench.common import POLL_SECONDS, PYTHON, READY_TIMEOUT, ROOT, RUN_TIMEOUT, ratio

if TYPE_CHECKING:
    from bench.worker import Bench


def configurations(more_concurrency: list[int]) -> list[tuple[int, int]]:
    """(processes, concurrency) of Procrastinate's no-op runs: 1x1, 1x10, 2x10, 4x10, and 1 and 2
    processes at our highest --more-concurrency, so each side's best is taken from the same
    configurations."""
    runs = [(1, 1), (1, 10), (2, 10), (4, 10)]
    if more_concurrency:
        runs += [(1, max(more_concurrency)), (2, max(more_concurrency))]
    return runs


async def _defer(app: Any, task_name: str, n: int) -> float:
    async with app.open_async():
        await app.configure_task(task_name).batch_defer_async(*({} for _ in range(n)))
    return time.time()


class Procrastinate:
    """Procrastinate on a Bench's cluster, in a database of its own (created at first use)."""

    def __init__(self, bench: "Bench") -> None:
        self.bench = bench
        self._app: tuple[Any, str] | None = None

    def app(self) -> tuple[Any, str]:
        """The baseline's app on its own database of this cluster (created once), and its DSN."""
        if self._app is None:
            from procrastinate import App, PsycopgConnector

            with psycopg.connect(self.bench.admin_url, autocommit=True) as admin:
                admin.execute(pgsql.SQL("CREATE DATABASE {}").format(pgsql.Identifier("procr")))
            dsn = self.bench.admin_url.rsplit("/", 1)[0] + "/procr"
            app = App(connector=PsycopgConnector(conninfo=dsn))
            with app.open():
                app.schema_manager.apply_schema()
            self._app = (app, dsn)
        return self._app

    def workers(
        self,
        stack: ExitStack,
        conn: psycopg.Connection,
        processes: int,
        concurrency: int,
        label: str,
        env: dict[str, str] | None = None,
    ) -> list[subprocess.Popen]:
        _, dsn = self.app()
        conn.execute("DELETE FROM procrastinate_workers")
        workers = []
        for index in range(processes):
            log = open(self.bench.base / f"procr-{label}-{index}.log", "wb")
            stack.callback(log.close)
            process = subprocess.Popen(
                [PYTHON, str(ROOT / "bench" / "procrastinate_worker.py"), dsn, str(concurrency)],
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, **(env or {})},
            )
            stack.callback(self.bench._stop, process)
            workers.append(process)
        deadline = time.monotonic() + READY_TIMEOUT
        while conn.execute("SELECT count(*) FROM procrastinate_workers").fetchone()[0] < processes:
            if time.monotonic() > deadline or any(p.poll() is not None for p in workers):
                raise RuntimeError(f"procrastinate workers did not start; see {self.bench.base}")
            time.sleep(0.1)
        return workers

    def run(
        self,
        processes: int,
        concurrency: int,
        n: int,
        task_name: str = "noop",
        env: dict[str, str] | None = None,
    ) -> dict:
        bench = self.bench
        app, dsn = self.app()
        label = f"{task_name}-{processes}x{concurrency}"
        with psycopg.connect(dsn, autocommit=True) as conn, ExitStack() as stack:
            workers = self.workers(stack, conn, processes, concurrency, label, env)
            connections_sql = (
                "SELECT count(*) FROM pg_stat_activity WHERE datname = 'procr' "
                "AND pid <> pg_backend_pid()"
            )
            connections = conn.execute(connections_sql).fetchone()[0]
            cpu = [bench._cpu_seconds(p.pid) for p in workers]
            first_id = conn.execute(
                "SELECT coalesce(max(id), 0) FROM procrastinate_jobs"
            ).fetchone()[0]
            committed = asyncio.run(_defer(app, task_name, n))
            deadline = time.monotonic() + RUN_TIMEOUT
            # As LIVE_ANY: whether any of these jobs is still to finish, not a count of them.
            while conn.execute(
                "SELECT EXISTS (SELECT FROM procrastinate_jobs WHERE id > %s "
                "AND status IN ('todo', 'doing'))",
                [first_id],
            ).fetchone()[0]:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"procrastinate {label} did not finish")
                connections = max(connections, conn.execute(connections_sql).fetchone()[0])
                time.sleep(POLL_SECONDS)
            cpu = [
                bench._cpu_seconds(p.pid) - before for p, before in zip(workers, cpu, strict=True)
            ]
            memory = [bench._memory(p.pid) for p in workers]
            succeeded, last = conn.execute(
                "SELECT count(*) FILTER (WHERE status = 'succeeded'), "
                "(SELECT max(at) FROM procrastinate_events WHERE type IN ('succeeded', 'failed') "
                "AND job_id > %s) FROM procrastinate_jobs WHERE id > %s",
                [first_id, first_id],
            ).fetchone()
        elapsed = last.timestamp() - committed
        result = {
            "task": task_name,
            "processes": processes,
            "concurrency": concurrency,
            "jobs": n,
            "succeeded": succeeded,
            "seconds": round(elapsed, 3),
            "jobs_per_second": round(n / elapsed, 1),
            "connections": connections,
            "cpu_ms_per_job": round(sum(cpu) / n * 1000, 3),
            "rss_mib": memory,
        }
        print(
            f"  procrastinate {label}: {result['jobs_per_second']} jobs/s ({succeeded}/{n} "
            f"succeeded), {connections} connections, {result['cpu_ms_per_job']} ms CPU/job",
            flush=True,
        )
        return result


def summary_lines(report: dict) -> list[str]:
    """Their best beside ours, of the throughput section's runs."""
    if "procrastinate" not in report:
        return []
    runs = report.get("throughput", []) + report.get("throughput_more_concurrency", [])
    best = max((r["executions_per_second"] for r in runs), default=0)
    theirs = max(report["procrastinate"], key=lambda r: r["jobs_per_second"])
    ours = max(runs, key=lambda r: r["executions_per_second"], default=None)
    return [
        f"  Procrastinate best: {theirs['jobs_per_second']} jobs/s "
        f"({theirs['processes']}x{theirs['concurrency']}); ours best: {best} executions/s"
        + (f" ({ours['processes']}x{ours['concurrency']})" if ours else "")
        + f" ({ratio(best, theirs['jobs_per_second'])})"
    ]
