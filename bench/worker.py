"""Worker benchmark: throughput, pickup latency, claim time with history, beside its peers.

    bench/run [--quick] [--only raw,slow] [--executions 10000] [--history 1000000] ...

One throwaway durable PostgreSQL cluster (scripts/localpg.py; fsync and synchronous_commit on),
removed at the end. Each section is a module of bench/ that says what it measures: throughput,
raw (rawbaseline.py), pickup, claim (claimtime.py), procrastinate (procrastinatepeer.py), slow
(slowprovider.py), traces, api, api-keys (api.py), lists, fairness, webhooks, limits, pgqueuer
and http-async (peers.py). `--quick` is a short run of each; `--only` picks some. The report is
printed and written as JSON to .local/bench-worker-<time>.json.
"""

import argparse
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from contextlib import ExitStack
from pathlib import Path
from typing import Self

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import (
    api,
    claimtime,
    fairness,
    lists,
    pickup,
    procrastinatepeer,
    rawbaseline,
    slowprovider,
    throughput,
)
from bench import traces as tracing_cost
from bench import webhooks as webhooks_bench
from bench.common import (
    LIVE_ANY,
    POLL_SECONDS,
    PYTHON,
    READY_TIMEOUT,
    ROOT,
    RUN_TIMEOUT,
    free_port,
)
from bench.limits import Limits
from bench.limits import summary_lines as limit_summary_lines
from bench.peers import Peers
from bench.peers import summary_lines as peer_summary_lines
from bench.procstat import context_switches, switches_per
from executions import sql  # plain SQL constants, no Django needed
from executions.worker.pooling import PoolingConfig  # no Django either

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

# The slow-provider flow: one READ_ONLY http.json call to bench/provider.py.
FLOW_SLOW = {
    **FLOW,
    "key": "bench-slow",
    "transitions": [
        {
            **FLOW["transitions"][0],
            "actions": [{"id": "call", "capability": "bench.slow", "version": 1, "input": {}}],
        }
    ],
}
SLOW_INTEGRATIONS = """
[contracts."bench.slow@1"]
effect = "READ_ONLY"
max_attempts = 3
timeout_seconds = 10

[routes."bench.slow@1"]
adapter = "http.json"
url = "http://127.0.0.1:{port}/slow"
"""
SECTIONS = (
    "throughput",
    "raw",
    "pickup",
    "slow",
    "api",
    "claim",
    "procrastinate",
    "fairness",
    "webhooks",
    "lists",
)
SECTIONS += ("traces",)  # bench/traces.py: tracing off and on, one runworker
SECTIONS += ("api-keys",)  # bench/api.py's keys_run: static keys against the provider's
PEER_SECTIONS = ("pgqueuer", "http-async")  # bench/peers.py
LIMIT_SECTIONS = ("limits",)  # bench/limits.py
MAX_CONNECTIONS = 500  # enough for the one-connection-per-slot worker at concurrency 200

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
# What each throughput configuration starts with (Bench.throughput).
VACUUM_TABLES = "VACUUM ANALYZE request, execution, action_execution, audit_event"
RUN_WINDOW = """
SELECT count(*) FILTER (WHERE e.status = 'SUCCEEDED'), max(e.finished_at)
  FROM execution AS e JOIN request AS r ON r.id = e.request_id
 WHERE r.scope = %(tag)s
"""


class Bench:
    """The harness every section runs on: the cluster and its connections, bulk acceptance, our
    runworker processes and what /proc says of them, and one throughput run of them."""

    def __init__(self, args: argparse.Namespace, base: Path) -> None:
        self.args = args
        self.base = base
        self.report: dict = {"settings": vars(args).copy()}
        self.peers = Peers(self)
        self.procrastinate = procrastinatepeer.Procrastinate(self)

    @classmethod
    def scratch(
        cls, stack: ExitStack, prefix: str, *, concurrency: int, log_level: str = "WARNING"
    ) -> Self:
        """A bench on a throwaway cluster of its own under .local, stopped and removed with
        `stack`: the way the one-section tools (bench/cycle.py, workercpu.py, pgcost.py) start."""
        (ROOT / ".local").mkdir(exist_ok=True)
        base = Path(
            stack.enter_context(tempfile.TemporaryDirectory(prefix=prefix, dir=ROOT / ".local"))
        )
        base.chmod(0o755)  # the server's OS user must reach the cluster inside
        bench = cls(argparse.Namespace(concurrency=concurrency, log_level=log_level), base)
        bench.start_cluster()
        stack.callback(bench.stop_cluster)
        return bench

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
        with psycopg.connect(self.admin_url, autocommit=True) as admin_conn:
            admin_conn.execute(f"ALTER SYSTEM SET max_connections = {MAX_CONNECTIONS}")
        for command in ("stop", "start"):
            subprocess.run(
                [PYTHON, "scripts/localpg.py", command, "--dir", str(self.base / "pg")],
                cwd=ROOT,
                check=True,
            )
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
        self.flow_id, self.slow_flow_id = (
            self.owner.execute(
                "INSERT INTO flow (key, version, definition, checksum) VALUES (%s, 1, %s, 'x') "
                "RETURNING id",
                [definition["key"], psycopg.types.json.Jsonb(definition)],
            ).fetchone()[0]
            for definition in (FLOW, FLOW_SLOW)
        )
        self.runtime_user = psycopg.conninfo.conninfo_to_dict(self.db["DATABASE_URL"])["user"]
        self.runtime_pid = self.runtime.info.backend_pid
        self.pg_pid = int((self.base / "pg" / "data" / "postmaster.pid").read_text().split()[0])
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

    def enqueue(self, n: int, flow_id: int | None = None) -> tuple[str, float]:
        """Accept n executions in one transaction with a NOTIFY; return (tag, commit time)."""
        tag = "bench-" + uuid.uuid4().hex[:8]
        with self.owner.transaction():
            self.owner.execute(
                ENQUEUE_REQUESTS_AND_EXECUTIONS,
                {"flow_id": flow_id or self.flow_id, "tag": tag, "n": n},
            )
            self.owner.execute(BLOCK_REQUESTS, {"tag": tag})
            self.owner.execute(sql.NOTIFY_WORK, {"execution_id": tag})
        return tag, time.time()

    # -- our worker ---------------------------------------------------------------------------

    def start_workers(
        self,
        count: int,
        stack: ExitStack,
        label: str,
        concurrency: int | None = None,
        env: dict[str, str] | None = None,
        command: tuple[str, ...] = ("manage.py", "runworker"),
    ) -> list[subprocess.Popen]:
        concurrency = concurrency or self.args.concurrency
        env = {**self.env, "WORKER_CONCURRENCY": str(concurrency), **(env or {})}
        before = self._worker_connections()
        processes = []
        for index in range(count):
            log = open(self.base / f"{label}-{index}.log", "wb")
            stack.callback(log.close)
            process = subprocess.Popen(
                [PYTHON, *command],
                cwd=ROOT,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
            stack.callback(self._stop, process)
            processes.append(process)
        # Ready: each process has opened its connections (at least one each) and the count has
        # held still for a second, however many connections a process opens.
        deadline = time.monotonic() + READY_TIMEOUT
        seen, steady_since = -1, time.monotonic()
        while True:
            if time.monotonic() > deadline or any(p.poll() is not None for p in processes):
                raise RuntimeError(f"{label}: workers did not start; see {self.base}")
            now = self._worker_connections()
            if now != seen:
                seen, steady_since = now, time.monotonic()
            elif now >= before + count and time.monotonic() - steady_since >= 1.0:
                return processes
            time.sleep(0.1)

    def _worker_connections(self) -> int:
        """Backends of the runtime role, other than the bench's own: the workers' connections."""
        return self.owner.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE usename = %s AND pid <> %s",
            [self.runtime_user, self.runtime_pid],
        ).fetchone()[0]

    @staticmethod
    def _cpu_seconds(pid: int) -> float:
        """User + system CPU of one process (all its threads), in seconds."""
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def _server_cpu_seconds(self) -> float:
        """CPU of the whole PostgreSQL server: the postmaster, its children, and its reaped ones."""
        total = 0.0
        ticks = os.sysconf("SC_CLK_TCK")
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            pid, ppid = int(entry.name), int(fields[1])
            if pid == self.pg_pid:
                total += sum(int(f) for f in fields[11:15]) / ticks  # with reaped children
            elif ppid == self.pg_pid:
                total += (int(fields[11]) + int(fields[12])) / ticks
        return total

    def _commits(self) -> int:
        return self.owner.execute(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
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
        self,
        processes: int,
        n: int,
        label: str,
        concurrency: int | None = None,
        *,
        flow_id: int | None = None,
        env: dict[str, str] | None = None,
        command: tuple[str, ...] = ("manage.py", "runworker"),
    ) -> dict:
        """K = `processes` runworkers started and idle, then n executions accepted in one
        transaction: executions/s = n / (last finished_at - commit), with the worker's peak RSS,
        CPU, connections and context switches (every thread's, bench/procstat.py), and
        PostgreSQL's CPU (every server process) and commits (pg_stat_database) per execution."""
        concurrency = concurrency or self.args.concurrency
        # Each configuration starts from the same state, as the raw loop's does (VACUUM ANALYZE
        # after its insert): the dead rows and stale statistics of the runs before it cleared,
        # not left to an autovacuum that would land inside this run's window.
        self.owner.execute(VACUUM_TABLES)
        with ExitStack() as stack:
            workers = self.start_workers(processes, stack, label, concurrency, env, command)
            connections = self._worker_connections()
            cpu = [self._cpu_seconds(p.pid) for p in workers]
            switches = [context_switches(p.pid) for p in workers]
            server_cpu, commits = self._server_cpu_seconds(), self._commits()
            tag, committed = self.enqueue(n, flow_id)
            deadline = time.monotonic() + RUN_TIMEOUT
            while self.runtime.execute(LIVE_ANY).fetchone()[0]:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{label}: not finished in {RUN_TIMEOUT}s")
                connections = max(connections, self._worker_connections())
                time.sleep(POLL_SECONDS)
            cpu = [
                self._cpu_seconds(p.pid) - before for p, before in zip(workers, cpu, strict=True)
            ]
            switches = switches_per(switches, [context_switches(p.pid) for p in workers], n)
            server_cpu = self._server_cpu_seconds() - server_cpu
            commits = self._commits() - commits
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
            "connections_per_process": round(connections / processes, 1),
            "worker_cpu_ms_per_execution": round(sum(cpu) / n * 1000, 3),
            "postgres_cpu_ms_per_execution": round(server_cpu / n * 1000, 3),
            "commits_per_execution": round(commits / n, 2),
            "context_switches_per_execution": switches,
        }
        print(
            f"  {label}: {result['executions_per_second']} executions/s "
            f"({done}/{n} succeeded in {elapsed:.2f}s, {processes}x{concurrency}), "
            f"peak RSS {max(m['VmHWM'] for m in memory)} MiB, "
            f"{result['connections_per_process']} connections/process, CPU/execution: worker "
            f"{result['worker_cpu_ms_per_execution']} ms, PostgreSQL "
            f"{result['postgres_cpu_ms_per_execution']} ms; "
            f"{result['commits_per_execution']} commits/execution, context switches/execution "
            f"{switches['voluntary']} + {switches['nonvoluntary']}",
            flush=True,
        )
        return result

    def _claimer(self) -> psycopg.Connection:
        """A claiming connection set up as the worker's own (PoolingConfig's session settings
        and prepared statements), only synchronous and without LISTEN."""
        pooling = PoolingConfig()
        conn = psycopg.connect(
            self.db["DATABASE_URL"], autocommit=True, prepare_threshold=pooling.prepare_threshold
        )
        for statement in pooling.session_statements(claims=True):
            conn.execute(statement)
        return conn

    # -- the slow provider's route (slow, traces, pgqueuer; cycle.py, workercpu.py) -----------

    def slow_route(self, stack: ExitStack, delay: float) -> tuple[int, Path]:
        """bench/provider.py answering after `delay`, stopped with `stack`: its port, and an
        INTEGRATIONS_FILE routing the slow flow's call to it."""
        provider = subprocess.Popen(
            [PYTHON, str(ROOT / "bench" / "provider.py"), str(delay)],
            stdout=subprocess.PIPE,
            text=True,
        )
        stack.callback(self._stop, provider)
        port = int(provider.stdout.readline())
        integrations = self.base / "integrations.toml"
        integrations.write_text(SLOW_INTEGRATIONS.format(port=port))
        return port, integrations

    # -- the whole run ------------------------------------------------------------------------

    def run(self) -> dict:
        args = self.args
        wanted = set(args.only)
        print(f"cluster in {self.base} (durable settings)", flush=True)
        self.start_cluster()
        print(f"PostgreSQL {self.report['postgres']}", flush=True)
        if "throughput" in wanted:
            print("throughput (empty history):", flush=True)
            self.report |= throughput.run(
                self,
                processes=args.processes,
                executions=args.executions,
                more=args.more_concurrency,
            )
        if "raw" in wanted:
            print("raw psycopg SKIP LOCKED loop (batch 10, one fenced completion per job):")
            self.report["raw_loop"] = rawbaseline.run(self, args.processes, args.executions)
        if "pickup" in wanted:
            print("pickup latency, light load (1 worker, ~50 acceptances/s):", flush=True)
            self.report["pickup"] = pickup.ours(self, args.pickup_samples)
            if not args.skip_procrastinate:
                self.report["procrastinate_pickup"] = pickup.theirs(self, args.pickup_samples)
        if "slow" in wanted:
            print(f"slow provider ({args.slow_delay * 1000:.0f} ms per call):", flush=True)
            self.report["slow_provider"] = slowprovider.run(
                self,
                args.slow_concurrency,
                args.slow_calls,
                args.slow_delay,
                procrastinate=not args.skip_procrastinate,
            )
        if "traces" in wanted:
            print("traces (one runworker, tracing off then on):", flush=True)
            self.report["traces"] = tracing_cost.run(
                self,
                python=PYTHON,
                root=ROOT,
                executions=args.executions,
                concurrency=args.slow_concurrency[0],
                calls=args.slow_calls,
                delay=args.slow_delay,
            )
        if "api" in wanted:
            print("API through gunicorn, beside the web ceiling:", flush=True)
            self.report["api"] = api.run(
                self,
                python=PYTHON,
                root=ROOT,
                clients=args.api_clients,
                calls=args.api_calls,
                web_workers=args.web_workers,
            )
        if "api-keys" in wanted:
            print("the web ceiling's CPU per call under each kind of key:", flush=True)
            self.report["api_keys"] = api.keys_run(
                self,
                python=PYTHON,
                root=ROOT,
                clients=max(args.api_clients),
                calls=args.api_calls,
            )
        if "claim" in wanted:
            print("claim statement time (the worker's session settings):", flush=True)
            self.report |= claimtime.run(
                self,
                claims=args.claims,
                history=args.history,
                throughput=(
                    (max(args.processes), args.executions) if "throughput" in wanted else None
                ),
            )
        if "procrastinate" in wanted and not args.skip_procrastinate:
            print("Procrastinate, same cluster:", flush=True)
            self.report["procrastinate"] = [
                self.procrastinate.run(k, c, args.procrastinate_jobs)
                for k, c in procrastinatepeer.configurations(args.more_concurrency)
            ]
        if "pgqueuer" in wanted:
            print("pgqueuer, same cluster:", flush=True)
            self.report["pgqueuer"] = self.peers.pgqueuer(
                args.processes,
                args.executions,
                args.slow_concurrency,
                args.slow_calls,
                args.slow_delay,
            )
        if "http-async" in wanted:
            print(f"aiohttp alone, one event loop ({args.slow_delay * 1000:.0f} ms per call):")
            self.report["http_async"] = self.peers.http_async(
                args.slow_concurrency, args.slow_calls, args.slow_delay
            )
        if "fairness" in wanted:
            print(
                f"fairness (tenant A's backlog of {args.fairness_backlog} beside tenant B at "
                f"2/s, {args.fairness_processes}x{args.fairness_concurrency}):",
                flush=True,
            )
            self.report["fairness"] = fairness.run(
                self,
                backlog=args.fairness_backlog,
                processes=args.fairness_processes,
                concurrency=args.fairness_concurrency,
                seconds=args.fairness_seconds,
                limited_backlog=args.fairness_limited_backlog,
                rate=args.fairness_rate,
            )
        if "webhooks" in wanted:
            print("webhooks (a receiver on 127.0.0.1):", flush=True)
            self.report["webhooks"] = webhooks_bench.run(
                self, executions=args.executions, samples=args.pickup_samples
            )
        if "limits" in wanted:
            print("route limits (4 x 50, a 50 ms provider):", flush=True)
            self.report["limits"] = Limits(self).run(
                calls=args.limit_calls,
                rate_calls=args.limit_rate_calls,
                pickup_samples=args.limit_pickup_samples,
                overhead_calls=args.limit_overhead_calls,
                overhead_rounds=args.limit_overhead_rounds,
            )
        if "lists" in wanted:  # last: it leaves a million rows of each in the tables
            print(f"lists ({args.list_rows} requests and executions, 100 tenants):", flush=True)
            self.report["lists"] = lists.run(
                self.owner,
                {
                    **self.env,
                    **({"WEB_WORKERS": str(args.web_workers)} if args.web_workers else {}),
                },
                ROOT,
                self.base,
                free_port(),
                python=PYTHON,
                rows=args.list_rows,
                samples=args.list_samples,
            )
        return self.report


def summary(report: dict) -> list[str]:
    """The closing summary: each section's lines, in one fixed order."""
    return [
        "",
        "summary",
        *throughput.summary_lines(report),
        *rawbaseline.summary_lines(report),
        *pickup.summary_lines(report),
        *claimtime.summary_lines(report),
        *slowprovider.summary_lines(report),
        *api.summary_lines(report),
        *api.keys_summary_lines(report),
        *procrastinatepeer.summary_lines(report),
        *tracing_cost.summary_lines(report.get("traces", {})),
        *(webhooks_bench.summary_lines(report["webhooks"]) if "webhooks" in report else []),
        *fairness.summary_lines(report),
        *peer_summary_lines(report),
        *limit_summary_lines(report),
    ]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--executions", type=int, default=10_000)
    parser.add_argument("--processes", default="1,2,4")
    parser.add_argument("--concurrency", type=int, default=10)
    parser.add_argument(
        "--more-concurrency",
        default="30,100",
        help="also run 1 and 2 processes at each of these WORKER_CONCURRENCY values (0: skip); "
        "Procrastinate runs at the highest too",
    )
    parser.add_argument("--pickup-samples", type=int, default=300)
    parser.add_argument("--claims", type=int, default=1_000)
    parser.add_argument("--history", type=int, default=1_000_000)
    parser.add_argument("--procrastinate-jobs", type=int, default=5_000)
    parser.add_argument("--skip-procrastinate", action="store_true")
    parser.add_argument("--slow-concurrency", default="100,200,1000")
    parser.add_argument("--slow-calls", type=int, default=5_000)
    parser.add_argument("--slow-delay", type=float, default=0.1, help="provider delay, seconds")
    parser.add_argument("--api-clients", default="1,8,32")
    parser.add_argument("--api-calls", type=int, default=2_000)
    parser.add_argument(
        "--web-workers",
        type=int,
        default=None,
        help="WEB_WORKERS of the web server (default: as scripts/start runs it)",
    )
    parser.add_argument("--list-rows", type=int, default=1_000_000, help="of each, for lists")
    parser.add_argument("--list-samples", type=int, default=30, help="per filter and mode")
    parser.add_argument("--fairness-backlog", type=int, default=20_000, help="tenant A's")
    parser.add_argument("--fairness-processes", type=int, default=4)
    parser.add_argument("--fairness-concurrency", type=int, default=50)
    parser.add_argument(
        "--fairness-seconds", type=float, default=10.0, help="tenant B alone, at 2/s"
    )
    parser.add_argument(
        "--fairness-limited-backlog",
        type=int,
        default=4_000,
        help="tenant A's behind a rate limit (0: skip that case)",
    )
    parser.add_argument("--fairness-rate", type=int, default=200, help="that limit, per second")
    parser.add_argument("--limit-calls", type=int, default=3_000, help="limits: per run")
    parser.add_argument("--limit-rate-calls", type=int, default=600, help="limits: at 50/s")
    parser.add_argument("--limit-pickup-samples", type=int, default=200, help="limits: pickup")
    parser.add_argument(
        "--limit-overhead-calls", type=int, default=6_000, help="limits: per overhead run"
    )
    parser.add_argument(
        "--limit-overhead-rounds", type=int, default=5, help="limits: alternated overhead pairs"
    )
    parser.add_argument("--log-level", default="WARNING", help="LOG_LEVEL of the workers")
    parser.add_argument("--keep", action="store_true", help="keep the cluster folder")
    parser.add_argument(
        "--only",
        default=",".join(SECTIONS + PEER_SECTIONS + LIMIT_SECTIONS),
        help="sections to run",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a short run of every section: smaller counts, 100k rows of history, higher "
        "concurrency 100 only",
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.executions = min(args.executions, 2_000)
        args.history = min(args.history, 100_000)
        args.pickup_samples = min(args.pickup_samples, 100)
        args.claims = min(args.claims, 100)
        args.procrastinate_jobs = min(args.procrastinate_jobs, 1_000)
        args.slow_calls = min(args.slow_calls, 1_500)
        args.api_calls = min(args.api_calls, 300)
        args.list_rows = min(args.list_rows, 100_000)
        args.fairness_backlog = min(args.fairness_backlog, 2_000)
        args.fairness_seconds = min(args.fairness_seconds, 5.0)
        args.fairness_limited_backlog = min(args.fairness_limited_backlog, 1_000)
        args.more_concurrency = "100"  # one higher concurrency: both sides' best configurations
        args.limit_calls = min(args.limit_calls, 400)
        args.limit_rate_calls = min(args.limit_rate_calls, 150)
        args.limit_pickup_samples = min(args.limit_pickup_samples, 40)
        args.limit_overhead_calls = min(args.limit_overhead_calls, 1_000)
        args.limit_overhead_rounds = min(args.limit_overhead_rounds, 2)
    args.more_concurrency = [int(c) for c in args.more_concurrency.split(",") if int(c) > 0]
    args.processes = [int(p) for p in args.processes.split(",")]
    args.slow_concurrency = [int(c) for c in args.slow_concurrency.split(",")]
    args.api_clients = [int(c) for c in args.api_clients.split(",")]
    args.only = [name.strip() for name in args.only.split(",") if name.strip()]
    known = SECTIONS + PEER_SECTIONS + LIMIT_SECTIONS
    unknown = set(args.only) - set(known)
    if unknown:
        parser.error(f"--only: unknown sections {sorted(unknown)} (known: {', '.join(known)})")

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
