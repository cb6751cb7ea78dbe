"""Worker benchmark: throughput, pickup latency, claim time with history, beside Procrastinate.

    bench/run [--executions 10000] [--history 1000000] [--processes 1,2,4] ...

Everything runs on a throwaway PostgreSQL cluster built here with scripts/localpg.py, with the
default durable settings (fsync and synchronous_commit on), and removed at the end.

1. Throughput: K `manage.py runworker` processes (concurrency 10, batch 10; then 1 and 2
   processes at a higher concurrency, --more-concurrency) are started and idle; N executions
   of a one-NO_OP-action transition are enqueued in one transaction (with the NOTIFY an
   acceptance sends). executions/s = N / (last finished_at - commit). Worker RSS (peak) is
   read from /proc after the run.
2. Pickup latency under light load: one idle worker; executions accepted one at a time, about
   50 per second; for each, the claim (execution.started_at) and the action start (checkpoint
   started_at), both from the database clock, minus the client's time of the acceptance
   commit (same host, same clock).
3. Claim time: the claim statement alone, batch 10, timed from the client, on an empty table
   and again after ~1,000,000 finished executions were added (then 4 workers again).
4. Procrastinate, same cluster, same method as 1: K worker processes started and idle, N no-op
   jobs deferred in one batch, jobs/s = N / (last succeeded event - commit).

Prints a report and writes it as JSON to .local/bench-worker-<time>.json.
"""

import argparse
import asyncio
import json
import os
import secrets
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from contextlib import ExitStack
from pathlib import Path

import psycopg
from psycopg import sql as pgsql

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from executions import sql  # noqa: E402 (plain SQL constants, no Django needed)

PYTHON = str(ROOT / ".venv" / "bin" / "python") if (ROOT / ".venv").exists() else sys.executable
READY_TIMEOUT = 60  # seconds for worker processes to connect
RUN_TIMEOUT = 300  # seconds for one throughput run
POLL_SECONDS = 0.05  # seconds between completion checks
PICKUP_GAP_SECONDS = 0.02  # seconds between acceptances in the light-load pickup run
FLOW = {
    "key": "bench",
    "version": 1,
    "initialState": "DRAFT",
    "states": ["DRAFT", "DONE"],
    "dataSchema": {"type": "object"},
    "transitions": [
        {
            "id": "go",
            "from": ["DRAFT"],
            "actions": [{"id": "noop", "capability": "NO_OP", "version": 1, "input": {}}],
            "decision": {
                "hitPolicy": "FIRST",
                "rules": [{"id": "done", "when": True, "target": "DONE", "outcome": "DONE"}],
            },
            "updates": [{"path": "/done", "value": True}],
        }
    ],
}

# Bulk acceptance: N requests, each blocked by its PENDING execution, in one transaction.
ENQUEUE_REQUESTS_AND_EXECUTIONS = """
WITH r AS (
    INSERT INTO request (id, flow_id, owner, scope, data, state, revision, version)
    SELECT gen_random_uuid(), %(flow_id)s, 'bench', %(tag)s, '{}', 'DRAFT', 2, 2
      FROM generate_series(1, %(n)s)
    RETURNING id
)
INSERT INTO execution (id, request_id, flow_id, transition_id, accepted_revision, actor_snapshot)
SELECT gen_random_uuid(), r.id, %(flow_id)s, 'go', 2, '{}' FROM r
"""
BLOCK_REQUESTS = """
UPDATE request AS r SET blocked_by_id = e.id
  FROM execution AS e
 WHERE e.request_id = r.id AND r.scope = %(tag)s
"""
LIVE_COUNT = "SELECT count(*) FROM execution WHERE status IN ('PENDING', 'RETRY_WAIT', 'RUNNING')"
RUN_WINDOW = """
SELECT count(*) FILTER (WHERE e.status = 'SUCCEEDED'), max(e.finished_at)
  FROM execution AS e JOIN request AS r ON r.id = e.request_id
 WHERE r.scope = %(tag)s
"""
# ~1,000,000 finished executions of history, under one request.
HISTORY = """
INSERT INTO execution (id, request_id, flow_id, transition_id, status, accepted_revision,
                       attempts, fencing_token, result, actor_snapshot, created_at,
                       next_attempt_at, started_at, finished_at)
SELECT gen_random_uuid(), %(request_id)s, %(flow_id)s, 'go', 'SUCCEEDED', 2, 1, 1,
       '{"outcome": "DONE", "targetState": "DONE"}', '{}', t, t, t, t
  FROM generate_series(1, %(n)s) AS g,
       LATERAL (SELECT now() - interval '1 day' + g * interval '1 millisecond' AS t) AS ts
"""


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(p / 100 * (len(ordered) - 1))))
    return ordered[index]


def ms(seconds: float) -> float:
    return round(seconds * 1000, 2)


class Bench:
    def __init__(self, args: argparse.Namespace, base: Path) -> None:
        self.args = args
        self.base = base
        self.report: dict = {"settings": vars(args).copy()}

    # -- the cluster ------------------------------------------------------------------------

    def start_cluster(self) -> None:
        env_file = self.base / "db.env"
        subprocess.run(
            [
                PYTHON,
                "scripts/localpg.py",
                "setup",
                "--dir",
                str(self.base / "pg"),
                "--env-file",
                str(env_file),
            ],
            cwd=ROOT,
            check=True,
        )
        self.db = dict(line.split("=", 1) for line in env_file.read_text().split())
        admin = subprocess.run(
            [PYTHON, "scripts/localpg.py", "url", "--dir", str(self.base / "pg")],
            cwd=ROOT,
            check=True,
            capture_output=True,
            text=True,
        )
        self.admin_url = admin.stdout.strip()
        self.env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("WORKER_", "REQUEST_API", "FLOW_ADMIN", "INTEGRATIONS"))
        }
        self.env.update(
            self.db,
            SECRET_KEY=secrets.token_urlsafe(32),
            DJANGO_SETTINGS_MODULE="orquestador.settings",
            SIMULATION_MODE="true",
            WORKER_ENABLED="true",
            WORKER_CONCURRENCY=str(self.args.concurrency),
            WORKER_BATCH="10",
            LOG_LEVEL=self.args.log_level,
            PYTHONUNBUFFERED="1",
        )
        for command in (["migrate", "--noinput"], ["grantruntime"]):
            subprocess.run(
                [PYTHON, "manage.py", *command],
                cwd=ROOT,
                env=self.env,
                check=True,
                stdout=subprocess.DEVNULL,
            )
        self.owner = psycopg.connect(self.db["MIGRATION_DATABASE_URL"], autocommit=True)
        self.runtime = psycopg.connect(self.db["DATABASE_URL"], autocommit=True)
        self.flow_id = self.owner.execute(
            "INSERT INTO flow (key, version, definition, checksum) VALUES ('bench', 1, %s, 'x') "
            "RETURNING id",
            [psycopg.types.json.Jsonb(FLOW)],
        ).fetchone()[0]
        version = self.owner.execute("SHOW server_version").fetchone()[0]
        fsync = self.owner.execute("SHOW fsync").fetchone()[0]
        sync_commit = self.owner.execute("SHOW synchronous_commit").fetchone()[0]
        self.report["postgres"] = {
            "version": version,
            "fsync": fsync,
            "synchronous_commit": sync_commit,
        }
        self.report["cpus"] = os.cpu_count()

    def stop_cluster(self) -> None:
        for conn in (getattr(self, "owner", None), getattr(self, "runtime", None)):
            if conn is not None:
                conn.close()
        subprocess.run(
            [PYTHON, "scripts/localpg.py", "stop", "--dir", str(self.base / "pg")],
            cwd=ROOT,
            check=False,
        )

    # -- enqueueing ---------------------------------------------------------------------------

    def enqueue(self, n: int) -> tuple[str, float]:
        """Accept n executions in one transaction with a NOTIFY; return (tag, commit time)."""
        tag = "bench-" + uuid.uuid4().hex[:8]
        with self.owner.transaction():
            self.owner.execute(
                ENQUEUE_REQUESTS_AND_EXECUTIONS, {"flow_id": self.flow_id, "tag": tag, "n": n}
            )
            self.owner.execute(BLOCK_REQUESTS, {"tag": tag})
            self.owner.execute(sql.NOTIFY_WORK, {"execution_id": tag})
        return tag, time.time()

    # -- our worker ---------------------------------------------------------------------------

    def start_workers(
        self, count: int, stack: ExitStack, label: str, concurrency: int | None = None
    ) -> list[subprocess.Popen]:
        concurrency = concurrency or self.args.concurrency
        env = {**self.env, "WORKER_CONCURRENCY": str(concurrency)}
        before = self._worker_connections()
        processes = []
        for index in range(count):
            log = open(self.base / f"{label}-{index}.log", "wb")
            stack.callback(log.close)
            process = subprocess.Popen(
                [PYTHON, "manage.py", "runworker"],
                cwd=ROOT,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
            stack.callback(self._stop, process)
            processes.append(process)
        # Ready: every slot's connection and every listener is open.
        wanted = before + count * (concurrency + 1)
        deadline = time.monotonic() + READY_TIMEOUT
        while self._worker_connections() < wanted:
            if time.monotonic() > deadline or any(p.poll() is not None for p in processes):
                raise RuntimeError(f"{label}: workers did not start; see {self.base}")
            time.sleep(0.1)
        return processes

    def _worker_connections(self) -> int:
        return self.owner.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'orquestador-worker'"
        ).fetchone()[0]

    @staticmethod
    def _stop(process: subprocess.Popen) -> None:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    @staticmethod
    def _memory(pid: int) -> dict[str, float]:
        fields = {}
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                fields[key] = round(int(value.split()[0]) / 1024, 1)  # MiB
        return fields

    def throughput(
        self, processes: int, n: int, label: str, concurrency: int | None = None
    ) -> dict:
        concurrency = concurrency or self.args.concurrency
        with ExitStack() as stack:
            workers = self.start_workers(processes, stack, label, concurrency)
            tag, committed = self.enqueue(n)
            deadline = time.monotonic() + RUN_TIMEOUT
            while self.runtime.execute(LIVE_COUNT).fetchone()[0]:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{label}: not finished in {RUN_TIMEOUT}s")
                time.sleep(POLL_SECONDS)
            memory = [self._memory(p.pid) for p in workers]
        done, last = self.runtime.execute(RUN_WINDOW, {"tag": tag}).fetchone()
        elapsed = last.timestamp() - committed
        result = {
            "processes": processes,
            "concurrency": concurrency,
            "executions": n,
            "succeeded": done,
            "seconds": round(elapsed, 3),
            "executions_per_second": round(n / elapsed, 1),
            "rss_mib": memory,
        }
        print(
            f"  {label}: {result['executions_per_second']} executions/s "
            f"({n} in {elapsed:.2f}s, {processes}x{concurrency}), "
            f"peak RSS {max(m['VmHWM'] for m in memory)} MiB",
            flush=True,
        )
        return result

    def pickup(self, samples: int) -> dict:
        accepted: dict[uuid.UUID, float] = {}
        with ExitStack() as stack:
            self.start_workers(1, stack, "pickup")
            for _ in range(samples):
                request_id, execution_id = uuid.uuid4(), uuid.uuid4()
                with self.runtime.transaction():
                    self.runtime.execute(
                        "INSERT INTO request (id, flow_id, owner, scope, data, state, revision, "
                        "version) VALUES (%s, %s, 'bench', 'pickup', '{}', 'DRAFT', 2, 2)",
                        [request_id, self.flow_id],
                    )
                    self.runtime.execute(
                        "INSERT INTO execution (id, request_id, flow_id, transition_id, "
                        "accepted_revision, actor_snapshot) VALUES (%s, %s, %s, 'go', 2, '{}')",
                        [execution_id, request_id, self.flow_id],
                    )
                    self.runtime.execute(
                        "UPDATE request SET blocked_by_id = %s WHERE id = %s",
                        [execution_id, request_id],
                    )
                    self.runtime.execute(sql.NOTIFY_WORK, {"execution_id": str(execution_id)})
                accepted[execution_id] = time.time()
                time.sleep(PICKUP_GAP_SECONDS)
            deadline = time.monotonic() + RUN_TIMEOUT
            while self.runtime.execute(LIVE_COUNT).fetchone()[0]:
                if time.monotonic() > deadline:
                    raise RuntimeError("pickup: not finished")
                time.sleep(POLL_SECONDS)
        rows = self.runtime.execute(
            "SELECT e.id, e.started_at, c.started_at FROM execution e "
            "JOIN action_execution c ON c.execution_id = e.id WHERE e.id = ANY(%s)",
            [list(accepted)],
        ).fetchall()
        claim = [r[1].timestamp() - accepted[r[0]] for r in rows]
        action = [r[2].timestamp() - accepted[r[0]] for r in rows]
        result = {
            "samples": len(rows),
            "claim_p50_ms": ms(percentile(claim, 50)),
            "claim_p99_ms": ms(percentile(claim, 99)),
            "action_start_p50_ms": ms(percentile(action, 50)),
            "action_start_p99_ms": ms(percentile(action, 99)),
        }
        print(f"  pickup: {result}", flush=True)
        return result

    def claim_time(self, claims: int, label: str) -> dict:
        owner = "bench-claimer"
        self.enqueue(claims * 10)
        timings = []
        for _ in range(claims):
            started = time.perf_counter()
            self.runtime.execute(
                sql.CLAIM_EXECUTIONS, {"owner": owner, "limit": 10, "lease_seconds": 60}
            ).fetchall()
            timings.append(time.perf_counter() - started)
        self.owner.execute(
            "UPDATE execution SET status = 'SUCCEEDED', finished_at = clock_timestamp(), "
            "lease_owner = NULL, lease_expires_at = NULL WHERE lease_owner = %s",
            [owner],
        )
        rows = self.owner.execute("SELECT count(*) FROM execution").fetchone()[0]
        result = {
            "executions_in_table": rows,
            "claims": claims,
            "p50_ms": ms(statistics.median(timings)),
            "p99_ms": ms(percentile(timings, 99)),
        }
        print(f"  claim time ({label}): {result}", flush=True)
        return result

    def add_history(self, n: int) -> None:
        request_id = uuid.uuid4()
        started = time.monotonic()
        self.owner.execute(
            "INSERT INTO request (id, flow_id, owner, scope, data, state) "
            "VALUES (%s, %s, 'bench', 'history', '{}', 'DONE')",
            [request_id, self.flow_id],
        )
        self.owner.execute(HISTORY, {"request_id": request_id, "flow_id": self.flow_id, "n": n})
        self.owner.execute("VACUUM ANALYZE execution")
        print(f"  added {n} finished executions in {time.monotonic() - started:.1f}s", flush=True)

    # -- Procrastinate ------------------------------------------------------------------------

    def procrastinate(self, configurations: list[tuple[int, int]], n: int) -> list[dict]:
        from procrastinate import App, PsycopgConnector

        with psycopg.connect(self.admin_url, autocommit=True) as admin:
            admin.execute(pgsql.SQL("CREATE DATABASE {}").format(pgsql.Identifier("procr")))
        dsn = self.admin_url.rsplit("/", 1)[0] + "/procr"
        app = App(connector=PsycopgConnector(conninfo=dsn))
        noop = app.task(name="noop")(_noop)
        with app.open():
            app.schema_manager.apply_schema()
        results = []
        with psycopg.connect(dsn, autocommit=True) as conn:
            for processes, concurrency in configurations:
                conn.execute("DELETE FROM procrastinate_workers")
                with ExitStack() as stack:
                    for index in range(processes):
                        log = open(self.base / f"procr-{processes}x{concurrency}-{index}.log", "wb")
                        stack.callback(log.close)
                        process = subprocess.Popen(
                            [
                                PYTHON,
                                str(ROOT / "bench" / "procrastinate_worker.py"),
                                dsn,
                                str(concurrency),
                            ],
                            stdout=log,
                            stderr=subprocess.STDOUT,
                        )
                        stack.callback(self._stop, process)
                    deadline = time.monotonic() + READY_TIMEOUT
                    while (
                        conn.execute("SELECT count(*) FROM procrastinate_workers").fetchone()[0]
                        < processes
                    ):
                        if time.monotonic() > deadline:
                            raise RuntimeError("procrastinate workers did not start")
                        time.sleep(0.1)
                    first_id = conn.execute(
                        "SELECT coalesce(max(id), 0) FROM procrastinate_jobs"
                    ).fetchone()[0]
                    committed = asyncio.run(_defer(app, noop, n))
                    deadline = time.monotonic() + RUN_TIMEOUT
                    while (
                        conn.execute(
                            "SELECT count(*) FROM procrastinate_jobs WHERE id > %s "
                            "AND status = 'succeeded'",
                            [first_id],
                        ).fetchone()[0]
                        < n
                    ):
                        if time.monotonic() > deadline:
                            raise RuntimeError("procrastinate run did not finish")
                        time.sleep(POLL_SECONDS)
                last = conn.execute(
                    "SELECT max(at) FROM procrastinate_events WHERE type = 'succeeded' "
                    "AND job_id > %s",
                    [first_id],
                ).fetchone()[0]
                elapsed = last.timestamp() - committed
                result = {
                    "processes": processes,
                    "concurrency": concurrency,
                    "jobs": n,
                    "seconds": round(elapsed, 3),
                    "jobs_per_second": round(n / elapsed, 1),
                }
                print(
                    f"  procrastinate {processes}x{concurrency}: "
                    f"{result['jobs_per_second']} jobs/s",
                    flush=True,
                )
                results.append(result)
        return results

    # -- the whole run ------------------------------------------------------------------------

    def run(self) -> dict:
        args = self.args
        print(f"cluster in {self.base} (durable settings)", flush=True)
        self.start_cluster()
        print(f"PostgreSQL {self.report['postgres']}", flush=True)
        print("throughput (empty history):", flush=True)
        self.report["throughput"] = [
            self.throughput(k, args.executions, f"{k}-proc") for k in args.processes
        ]
        if args.more_concurrency:
            print(f"throughput at WORKER_CONCURRENCY={args.more_concurrency}:", flush=True)
            self.report["throughput_more_concurrency"] = [
                self.throughput(
                    k, args.executions, f"{k}-proc-c{args.more_concurrency}", args.more_concurrency
                )
                for k in (1, 2)
            ]
        print("pickup latency, light load (1 worker, ~50 acceptances/s):", flush=True)
        self.report["pickup"] = self.pickup(args.pickup_samples)
        print("claim statement time:", flush=True)
        self.report["claim_empty"] = self.claim_time(args.claims, "empty history")
        self.add_history(args.history)
        self.report["claim_history"] = self.claim_time(args.claims, "with history")
        print("throughput with history:", flush=True)
        self.report["throughput_history"] = self.throughput(
            max(args.processes), args.executions, f"{max(args.processes)}-proc+history"
        )
        if not args.skip_procrastinate:
            print("Procrastinate, same cluster:", flush=True)
            self.report["procrastinate"] = self.procrastinate(
                [(1, 1), (1, 10), (2, 10), (4, 10)], args.procrastinate_jobs
            )
        return self.report


async def _noop() -> None:
    return None


async def _defer(app, task, n: int) -> float:
    async with app.open_async():
        await task.batch_defer_async(*({} for _ in range(n)))
    return time.time()


def summary(report: dict) -> list[str]:
    runs = report["throughput"] + report.get("throughput_more_concurrency", [])
    best = max(r["executions_per_second"] for r in runs)
    lines = [
        "",
        "summary",
        "  executions/s by processes: "
        + ", ".join(
            f"{r['processes']}: {r['executions_per_second']}" for r in report["throughput"]
        ),
        f"  executions/s with history: {report['throughput_history']['executions_per_second']}",
        "  executions/s at higher concurrency: "
        + ", ".join(
            f"{r['processes']}x{r['concurrency']}: {r['executions_per_second']}"
            for r in report.get("throughput_more_concurrency", [])
        ),
        f"  pickup p50/p99 (claim): {report['pickup']['claim_p50_ms']} / "
        f"{report['pickup']['claim_p99_ms']} ms; action start: "
        f"{report['pickup']['action_start_p50_ms']} / {report['pickup']['action_start_p99_ms']} ms",
        f"  claim p50/p99: empty {report['claim_empty']['p50_ms']} / "
        f"{report['claim_empty']['p99_ms']} ms; with "
        f"{report['claim_history']['executions_in_table']} rows "
        f"{report['claim_history']['p50_ms']} / {report['claim_history']['p99_ms']} ms",
        "  worker peak RSS (MiB): "
        + ", ".join(str(max(m["VmHWM"] for m in r["rss_mib"])) for r in report["throughput"]),
    ]
    if "procrastinate" in report:
        theirs = max(r["jobs_per_second"] for r in report["procrastinate"])
        lines.append(
            f"  Procrastinate best: {theirs} jobs/s; ours best: {best} executions/s "
            f"({best / theirs:.2f}x)"
        )
    return lines


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--executions", type=int, default=10_000)
    parser.add_argument("--processes", default="1,2,4")
    parser.add_argument("--concurrency", type=int, default=10)
    parser.add_argument(
        "--more-concurrency",
        type=int,
        default=30,
        help="also run 1 and 2 processes at this WORKER_CONCURRENCY (0: skip)",
    )
    parser.add_argument("--pickup-samples", type=int, default=300)
    parser.add_argument("--claims", type=int, default=300)
    parser.add_argument("--history", type=int, default=1_000_000)
    parser.add_argument("--procrastinate-jobs", type=int, default=5_000)
    parser.add_argument("--skip-procrastinate", action="store_true")
    parser.add_argument("--log-level", default="WARNING", help="LOG_LEVEL of the workers")
    parser.add_argument("--keep", action="store_true", help="keep the cluster folder")
    args = parser.parse_args(argv)
    args.processes = [int(p) for p in args.processes.split(",")]

    (ROOT / ".local").mkdir(exist_ok=True)
    base = Path(tempfile.mkdtemp(prefix="bench-worker.", dir=ROOT / ".local"))
    os.chmod(base, 0o755)  # noqa: S103 (the server's OS user must reach the cluster inside)
    bench = Bench(args, base)
    try:
        report = bench.run()
    finally:
        bench.stop_cluster()
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)
    for line in summary(report):
        print(line)
    out = ROOT / ".local" / f"bench-worker-{time.strftime('%Y%m%dT%H%M%S')}.json"
    out.write_text(json.dumps(report, indent=2, default=str))
    print(f"  report: {out.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
