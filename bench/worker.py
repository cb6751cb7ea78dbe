"""Worker benchmark: throughput, pickup latency, claim time with history, beside its peers.

    bench/run [--quick] [--only raw,slow] [--executions 10000] [--history 1000000] ...

Everything runs on a throwaway PostgreSQL cluster built here with scripts/localpg.py, with the
default durable settings (fsync and synchronous_commit on), and removed at the end. The sections
(`--only`; docs/operations.md#benchmark), each measured as its method or module says:
throughput (`Bench.throughput`: K runworkers at concurrency 10 for each --processes, then 1 and 2
at each --more-concurrency), pickup (`Bench.pickup`), claim (`Bench.claim_time`, also during
`purgehistory`), procrastinate (`Bench.procrastinate_run` at 1x1, 1x10, 2x10, 4x10 and our
highest concurrency; `procrastinate_pickup`), raw (`Bench.raw_loop`), slow (`Bench.slow_provider`,
a 100 ms provider at each --slow-concurrency), traces (bench/traces.py), api (bench/api.py),
lists (bench/lists.py), fairness (bench/fairness.py), webhooks (bench/webhooks.py), limits
(bench/limits.py), pgqueuer and http-async (bench/peers.py).

For each throughput run it also reports PostgreSQL's CPU and commits per execution (all server
processes' CPU time and pg_stat_database.xact_commit, before and after), and the worker's
context switches per execution (voluntary and not, every thread's, bench/procstat.py).
`--quick` is a short run of every section (minutes, not tens of minutes). Prints a report and
writes it as JSON to .local/bench-worker-<time>.json.
"""

import argparse
import asyncio
import json
import os
import secrets
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from contextlib import ExitStack
from pathlib import Path
from typing import Self

import psycopg
from psycopg import sql as pgsql

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import api, fairness, lists  # noqa: E402
from bench import traces as tracing_cost  # noqa: E402
from bench import webhooks as webhooks_bench  # noqa: E402
from bench.limits import Limits  # noqa: E402
from bench.limits import summary_lines as limit_summary_lines  # noqa: E402
from bench.peers import Peers  # noqa: E402
from bench.peers import summary_lines as peer_summary_lines  # noqa: E402
from bench.procstat import context_switches, switches_per, switches_text  # noqa: E402
from bench.rawloop import SCHEMA as RAW_SCHEMA  # noqa: E402
from executions import sql  # noqa: E402 (plain SQL constants, no Django needed)
from executions.worker.pooling import PoolingConfig  # noqa: E402 (no Django either)

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
PEER_SECTIONS = ("pgqueuer", "http-async")  # bench/peers.py
LIMIT_SECTIONS = ("limits",)  # bench/limits.py
MAX_CONNECTIONS = 500  # enough for the one-connection-per-slot worker at concurrency 200
JWT_ISSUER, JWT_AUDIENCE = "orquestador", "orquestador-api"

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
# Whether any execution is still to finish: stops at the first one (execution_claim_idx), where a
# count of every live row took 5-10 ms at 10,000 of them, every POLL_SECONDS, on the cores the
# workers share (the raw loop's run is not polled at all: its processes exit when done).
LIVE_ANY = """
SELECT EXISTS (SELECT FROM execution WHERE status IN ('PENDING', 'RETRY_WAIT', 'RUNNING'))
"""
RUN_WINDOW = """
SELECT count(*) FILTER (WHERE e.status = 'SUCCEEDED'), max(e.finished_at)
  FROM execution AS e JOIN request AS r ON r.id = e.request_id
 WHERE r.scope = %(tag)s
"""
# ~1,000,000 finished executions of history, under one request, a month old (purgehistory's
# prey), each with one checkpoint.
HISTORY = """
INSERT INTO execution (id, request_id, flow_id, transition_id, status, accepted_revision,
                       attempts, fencing_token, result, actor_snapshot, created_at,
                       next_attempt_at, started_at, finished_at)
SELECT gen_random_uuid(), %(request_id)s, %(flow_id)s, 'go', 'SUCCEEDED', 2, 1, 1,
       '{"outcome": "DONE", "targetState": "DONE"}', '{}', t, t, t, t
  FROM generate_series(1, %(n)s) AS g,
       LATERAL (SELECT now() - interval '30 days' + g * interval '1 millisecond' AS t) AS ts
"""
HISTORY_CHECKPOINTS = """
INSERT INTO action_execution (execution_id, action_id, sequence, capability, capability_version,
                              effect, status, input_hash, external_key, attempt, fencing_token,
                              output, started_at, finished_at)
SELECT e.id, 'noop', 0, 'NO_OP', 1, 'READ_ONLY', 'SUCCEEDED', repeat('0', 64), e.id || ':noop',
       1, 1, '{}', e.started_at, e.finished_at
  FROM execution AS e
 WHERE e.request_id = %(request_id)s
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
        self.peers = Peers(self)

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
        """`processes` runworkers started and idle, then `n` executions of a one-NO_OP-action
        transition enqueued in one transaction (with the NOTIFY an acceptance sends):
        executions/s = n / (last finished_at - commit), the workers' peak RSS read from /proc
        after the run."""
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

    def pickup(self, samples: int) -> dict:
        """Acceptance commit -> adapter call under light load: one idle worker, executions
        accepted one at a time, about 50 per second; the client's clock just after the
        acceptance commits, and the worker's (bench/marked_worker.py) as its NO_OP adapter is
        called, with the claim (execution.started_at, the database clock) as an indication."""
        accepted: dict[uuid.UUID, float] = {}
        marks_file = self.base / "pickup.marks"
        marks_file.touch()
        with ExitStack() as stack:
            self.start_workers(
                1,
                stack,
                "pickup",
                env={"BENCH_PICKUP_FILE": str(marks_file)},
                command=("bench/marked_worker.py",),
            )
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
            while self.runtime.execute(LIVE_ANY).fetchone()[0]:
                if time.monotonic() > deadline:
                    raise RuntimeError("pickup: not finished")
                time.sleep(POLL_SECONDS)
        called = {
            uuid.UUID(execution_id): float(at)
            for execution_id, at in (line.split() for line in marks_file.read_text().splitlines())
        }
        rows = self.runtime.execute(
            "SELECT e.id, e.started_at FROM execution e WHERE e.id = ANY(%s)", [list(accepted)]
        ).fetchall()
        # The claim's time is the database's clock (same host): an indication, not the target.
        claim = [r[1].timestamp() - accepted[r[0]] for r in rows]
        call = [called[e] - at for e, at in accepted.items() if e in called]
        result = {
            "samples": len(call),
            "claim_p50_ms": ms(percentile(claim, 50)),
            "claim_p99_ms": ms(percentile(claim, 99)),
            "adapter_call_p50_ms": ms(percentile(call, 50)),
            "adapter_call_p99_ms": ms(percentile(call, 99)),
        }
        print(f"  pickup: {result}", flush=True)
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

    def claim_time(self, claims: int, label: str) -> dict:
        """The claim statement alone, batch 10, timed from the client (run on an empty table,
        then after ~1,000,000 finished executions were added, each set after a CHECKPOINT)."""
        owner = "bench-claimer"
        self.enqueue(claims * 10)
        timings = []
        with self._claimer() as claimer:
            for _ in range(claims):
                started = time.perf_counter()
                claimer.execute(
                    sql.CLAIM_EXECUTIONS,
                    {"owner": owner, "limit": 10, "lease_seconds": 60, "outage": False},
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
        self.owner.execute(HISTORY_CHECKPOINTS, {"request_id": request_id})
        self.owner.execute("VACUUM ANALYZE execution")
        self.owner.execute("VACUUM ANALYZE action_execution")
        self.checkpoint()
        print(
            f"  added {n} finished executions (one checkpoint each) in "
            f"{time.monotonic() - started:.1f}s",
            flush=True,
        )

    def checkpoint(self) -> None:
        """Flush what was just written: a million rows loaded (and vacuumed) leave gigabytes of
        WAL behind, and the checkpoint they trigger would otherwise land in the next claim
        timings as the load's cost, not the table's."""
        with psycopg.connect(self.admin_url, autocommit=True) as admin:
            admin.execute("CHECKPOINT")

    def claim_during_purge(self, claims: int) -> dict:
        """Claim time while `manage.py purgehistory` works through the history beside it."""
        with ExitStack() as stack:
            log = open(self.base / "purgehistory.log", "wb")
            stack.callback(log.close)
            purge = subprocess.Popen(
                [PYTHON, "manage.py", "purgehistory", "--older-than", "7", "--pause", "0"],
                cwd=ROOT,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
            stack.callback(self._stop, purge)
            deadline = time.monotonic() + READY_TIMEOUT
            purged = 0
            while purged == 0:  # wait until its first batch committed
                if time.monotonic() > deadline or purge.poll() is not None:
                    raise RuntimeError(f"purgehistory did not start; see {self.base}")
                time.sleep(0.05)
                purged = self._purged()
            result = self.claim_time(claims, "during a purge")
            result["purge_running_at_end"] = purge.poll() is None
            result["purged_during_claims"] = self._purged() - purged
        return result

    def _purged(self) -> int:
        return self.owner.execute(
            "SELECT count(*) FROM execution WHERE purged_at IS NOT NULL"
        ).fetchone()[0]

    # -- the raw loop -------------------------------------------------------------------------

    def raw_loop(self, counts: list[int], n: int) -> list[dict]:
        """K plain psycopg processes (bench/rawloop.py: claim batch 10 with SKIP LOCKED, one
        fenced completion per job, BEGIN/COMMIT around each) on n jobs, in a database of their
        own on the same cluster: jobs/s = n / (last finished_at - start), beside ours at K."""
        with psycopg.connect(self.admin_url, autocommit=True) as admin:
            admin.execute(pgsql.SQL("CREATE DATABASE {}").format(pgsql.Identifier("rawloop")))
        dsn = self.admin_url.rsplit("/", 1)[0] + "/rawloop"
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
                        stack.callback(self._stop, loop)
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

    # -- the slow provider --------------------------------------------------------------------

    def _slow_ours(self, label: str, n: int, concurrency: int, env: dict[str, str]) -> dict:
        """One runworker at `concurrency` on the slow flow; its throughput, or the error."""
        try:
            return self.throughput(
                1,
                n,
                f"{label}, runworker at {concurrency}",
                concurrency,
                flow_id=self.slow_flow_id,
                env=env,
            )
        except RuntimeError as exc:
            print(f"  {label} at {concurrency}: {exc}", flush=True)
            return {"concurrency": concurrency, "error": str(exc)}

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

    def slow_provider(self, concurrencies: list[int], calls: int, delay: float) -> dict:
        """A one-action flow whose http.json provider (bench/provider.py, loopback, TCP_NODELAY)
        answers after `delay`; one runworker at each concurrency: executions/s, the most
        connections its role held, peak RSS, CPU per execution, then again at LOG_LEVEL=INFO.
        Beside it the database-free ceiling (bench/httpclients.py: a requests.Session per
        thread) and Procrastinate posting from an async httpx task. The call is READ_ONLY; at
        the first concurrency it runs again declared an IDEMPOTENT_WRITE, whose checkpoints a
        read does not write (RUNNING before the call, SUCCEEDED on its own)."""
        with ExitStack() as stack:
            port, integrations = self.slow_route(stack, delay)
            url = f"http://127.0.0.1:{port}/slow"
            env = {"INTEGRATIONS_FILE": str(integrations), "SIMULATION_MODE": "false"}
            # The same call declared an IDEMPOTENT_WRITE: its RUNNING checkpoint is committed
            # before the call and its SUCCEEDED one on its own after it (a read's is neither).
            writes = self.base / "integrations-write.toml"
            writes.write_text(
                SLOW_INTEGRATIONS.format(port=port).replace("READ_ONLY", "IDEMPOTENT_WRITE")
            )
            report: dict = {
                "provider_delay_seconds": delay,
                "ours": [],
                "ours_write": [],
                "ours_info": [],
                "http_only": [],
            }
            for concurrency in concurrencies:
                n = max(calls, concurrency * 10)
                report["ours"].append(self._slow_ours("slow provider", n, concurrency, env))
                # The same run at the default level: what logging costs a person who keeps it.
                report["ours_info"].append(
                    self._slow_ours(
                        "slow provider at LOG_LEVEL=INFO",
                        n,
                        concurrency,
                        {**env, "LOG_LEVEL": "INFO"},
                    )
                )
                if concurrency == concurrencies[0]:
                    report["ours_write"].append(
                        self._slow_ours(
                            "slow provider as a write",
                            n,
                            concurrency,
                            {**env, "INTEGRATIONS_FILE": str(writes)},
                        )
                    )
                baseline = subprocess.run(
                    [
                        PYTHON,
                        str(ROOT / "bench" / "httpclients.py"),
                        url,
                        str(concurrency),
                        str(n),
                    ],
                    check=True,
                    capture_output=True,
                    text=True,
                )
                http_only = {"concurrency": concurrency, **json.loads(baseline.stdout)}
                http_only["cpu_ms_per_call"] = round(
                    http_only["cpu_seconds"] / http_only["calls"] * 1000, 3
                )
                http_only["context_switches_per_call"] = {
                    "voluntary": round(http_only["voluntary_ctxt_switches"] / n, 2),
                    "nonvoluntary": round(http_only["nonvoluntary_ctxt_switches"] / n, 2),
                }
                print(
                    f"  slow provider, requests.Session per thread at {concurrency} (no "
                    f"database): {http_only['calls_per_second']} calls/s, "
                    f"{http_only['cpu_ms_per_call']} ms CPU/call, context switches/call "
                    f"{http_only['context_switches_per_call']['voluntary']} + "
                    f"{http_only['context_switches_per_call']['nonvoluntary']}",
                    flush=True,
                )
                report["http_only"].append(http_only)
            if not self.args.skip_procrastinate:
                report["procrastinate"] = [
                    self._slow_procrastinate(c, max(calls, c * 10), url) for c in concurrencies
                ]
        return report

    def _slow_procrastinate(self, concurrency: int, n: int, url: str) -> dict:
        """As _slow_ours: one concurrency that does not finish leaves the others measured."""
        try:
            return self.procrastinate_run(1, concurrency, n, "post", {"BENCH_PROVIDER_URL": url})
        except RuntimeError as exc:
            print(f"  Procrastinate+httpx at {concurrency}: {exc}", flush=True)
            return {"concurrency": concurrency, "error": str(exc)}

    # -- the API ------------------------------------------------------------------------------

    def api(self, clients: list[int], calls: int) -> dict:
        return api.run(
            self,
            python=PYTHON,
            root=ROOT,
            clients=clients,
            calls=calls,
            web_workers=self.args.web_workers,
        )

    # -- Procrastinate ------------------------------------------------------------------------

    def _procrastinate_app(self):
        """The baseline's app on its own database of this cluster (created once)."""
        if getattr(self, "_procr", None) is None:
            from procrastinate import App, PsycopgConnector

            with psycopg.connect(self.admin_url, autocommit=True) as admin:
                admin.execute(pgsql.SQL("CREATE DATABASE {}").format(pgsql.Identifier("procr")))
            dsn = self.admin_url.rsplit("/", 1)[0] + "/procr"
            app = App(connector=PsycopgConnector(conninfo=dsn))
            with app.open():
                app.schema_manager.apply_schema()
            self._procr = (app, dsn)
        return self._procr

    def _procrastinate_workers(
        self,
        stack: ExitStack,
        conn: psycopg.Connection,
        processes: int,
        concurrency: int,
        label: str,
        env: dict[str, str] | None = None,
    ) -> list[subprocess.Popen]:
        _, dsn = self._procrastinate_app()
        conn.execute("DELETE FROM procrastinate_workers")
        workers = []
        for index in range(processes):
            log = open(self.base / f"procr-{label}-{index}.log", "wb")
            stack.callback(log.close)
            process = subprocess.Popen(
                [PYTHON, str(ROOT / "bench" / "procrastinate_worker.py"), dsn, str(concurrency)],
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, **(env or {})},
            )
            stack.callback(self._stop, process)
            workers.append(process)
        deadline = time.monotonic() + READY_TIMEOUT
        while conn.execute("SELECT count(*) FROM procrastinate_workers").fetchone()[0] < processes:
            if time.monotonic() > deadline or any(p.poll() is not None for p in workers):
                raise RuntimeError(f"procrastinate workers did not start; see {self.base}")
            time.sleep(0.1)
        return workers

    def procrastinate_run(
        self,
        processes: int,
        concurrency: int,
        n: int,
        task_name: str = "noop",
        env: dict[str, str] | None = None,
    ) -> dict:
        """Procrastinate by the throughput method, on the same cluster: worker processes started
        and idle, n jobs deferred in one batch, jobs/s = n / (last succeeded event - commit)."""
        app, dsn = self._procrastinate_app()
        label = f"{task_name}-{processes}x{concurrency}"
        with psycopg.connect(dsn, autocommit=True) as conn, ExitStack() as stack:
            workers = self._procrastinate_workers(stack, conn, processes, concurrency, label, env)
            connections_sql = (
                "SELECT count(*) FROM pg_stat_activity WHERE datname = 'procr' "
                "AND pid <> pg_backend_pid()"
            )
            connections = conn.execute(connections_sql).fetchone()[0]
            cpu = [self._cpu_seconds(p.pid) for p in workers]
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
                self._cpu_seconds(p.pid) - before for p, before in zip(workers, cpu, strict=True)
            ]
            memory = [self._memory(p.pid) for p in workers]
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

    def procrastinate_pickup(self, samples: int) -> dict:
        """Procrastinate's pickup at light load: defer commit -> task start, the task taking
        time.time() first, beside ours."""
        app, dsn = self._procrastinate_app()
        marks_file = self.base / "procr-pickup.marks"
        marks_file.touch()
        with psycopg.connect(dsn, autocommit=True) as conn, ExitStack() as stack:
            self._procrastinate_workers(
                stack, conn, 1, 1, "pickup", {"BENCH_PICKUP_FILE": str(marks_file)}
            )
            deferred = asyncio.run(_defer_one_by_one(app, samples, PICKUP_GAP_SECONDS))
            deadline = time.monotonic() + RUN_TIMEOUT
            while len(marks_file.read_text().splitlines()) < samples:
                if time.monotonic() > deadline:
                    raise RuntimeError("procrastinate pickup: not finished")
                time.sleep(POLL_SECONDS)
        started = dict(line.split() for line in marks_file.read_text().splitlines())
        pickup = [float(started[str(job_id)]) - at for job_id, at in deferred.items()]
        result = {
            "samples": len(pickup),
            "task_start_p50_ms": ms(percentile(pickup, 50)),
            "task_start_p99_ms": ms(percentile(pickup, 99)),
        }
        print(f"  procrastinate pickup: {result}", flush=True)
        return result

    # -- the whole run ------------------------------------------------------------------------

    def run(self) -> dict:
        args = self.args
        wanted = set(args.only)
        print(f"cluster in {self.base} (durable settings)", flush=True)
        self.start_cluster()
        print(f"PostgreSQL {self.report['postgres']}", flush=True)
        if "throughput" in wanted:
            print("throughput (empty history):", flush=True)
            self.report["throughput"] = [
                self.throughput(k, args.executions, f"{k}-proc") for k in args.processes
            ]
            if args.more_concurrency:
                values = ", ".join(map(str, args.more_concurrency))
                print(f"throughput at WORKER_CONCURRENCY={values}:", flush=True)
                self.report["throughput_more_concurrency"] = [
                    self.throughput(k, args.executions, f"{k}-proc-c{c}", c)
                    for c in args.more_concurrency
                    for k in (1, 2)
                ]
        if "raw" in wanted:
            print("raw psycopg SKIP LOCKED loop (batch 10, one fenced completion per job):")
            self.report["raw_loop"] = self.raw_loop(args.processes, args.executions)
        if "pickup" in wanted:
            print("pickup latency, light load (1 worker, ~50 acceptances/s):", flush=True)
            self.report["pickup"] = self.pickup(args.pickup_samples)
            if not args.skip_procrastinate:
                self.report["procrastinate_pickup"] = self.procrastinate_pickup(args.pickup_samples)
        if "slow" in wanted:
            print(f"slow provider ({args.slow_delay * 1000:.0f} ms per call):", flush=True)
            self.report["slow_provider"] = self.slow_provider(
                args.slow_concurrency, args.slow_calls, args.slow_delay
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
            self.report["api"] = self.api(args.api_clients, args.api_calls)
        if "claim" in wanted:
            print("claim statement time (the worker's session settings):", flush=True)
            self.checkpoint()  # each claim timing starts from flushed buffers, as after history
            self.report["claim_empty"] = self.claim_time(args.claims, "empty history")
            self.add_history(args.history)
            self.report["claim_history"] = self.claim_time(args.claims, "with history")
            self.report["claim_during_purge"] = self.claim_during_purge(args.claims)
            if "throughput" in wanted:
                print("throughput with history:", flush=True)
                self.report["throughput_history"] = self.throughput(
                    max(args.processes), args.executions, f"{max(args.processes)}-proc+history"
                )
        if "procrastinate" in wanted and not args.skip_procrastinate:
            print("Procrastinate, same cluster:", flush=True)
            self.report["procrastinate"] = [
                self.procrastinate_run(k, c, args.procrastinate_jobs)
                for k, c in procrastinate_configurations(args.more_concurrency)
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
                _free_port(),
                python=PYTHON,
                rows=args.list_rows,
                samples=args.list_samples,
            )
        return self.report


def procrastinate_configurations(more_concurrency: list[int]) -> list[tuple[int, int]]:
    """(processes, concurrency) of Procrastinate's no-op runs: 1x1, 1x10, 2x10, 4x10, and 1 and 2
    processes at our highest --more-concurrency, so each side's best is taken from the same
    configurations."""
    runs = [(1, 1), (1, 10), (2, 10), (4, 10)]
    if more_concurrency:
        runs += [(1, max(more_concurrency)), (2, max(more_concurrency))]
    return runs


async def _defer(app, task_name: str, n: int) -> float:
    async with app.open_async():
        await app.configure_task(task_name).batch_defer_async(*({} for _ in range(n)))
    return time.time()


async def _defer_one_by_one(app, n: int, gap: float) -> dict[int, float]:
    """Defer n `pickup` jobs one at a time; each job id with the time its defer committed."""
    deferred = {}
    async with app.open_async():
        manager = app.configure_task("pickup")
        for _ in range(n):
            job_id = await manager.defer_async()
            deferred[job_id] = time.time()
            await asyncio.sleep(gap)
    return deferred


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _ratio(ours: float, theirs: float) -> str:
    return f"{ours / theirs:.2f}x" if theirs else "n/a"


def summary(report: dict) -> list[str]:
    lines = ["", "summary"]
    runs = report.get("throughput", []) + report.get("throughput_more_concurrency", [])
    best = max((r["executions_per_second"] for r in runs), default=0)
    if "throughput" in report:
        lines.append(
            "  executions/s by processes: "
            + ", ".join(
                f"{r['processes']}: {r['executions_per_second']}" for r in report["throughput"]
            )
        )
        if report.get("throughput_more_concurrency"):
            lines.append(
                "  executions/s at higher concurrency: "
                + ", ".join(
                    f"{r['processes']}x{r['concurrency']}: {r['executions_per_second']}"
                    for r in report["throughput_more_concurrency"]
                )
            )
        lines.append(
            "  worker peak RSS (MiB): "
            + ", ".join(str(max(m["VmHWM"] for m in r["rss_mib"])) for r in report["throughput"])
        )
        lines.append(
            "  per execution at 1 process: worker CPU "
            f"{report['throughput'][0]['worker_cpu_ms_per_execution']} ms, PostgreSQL CPU "
            f"{report['throughput'][0]['postgres_cpu_ms_per_execution']} ms, "
            f"{report['throughput'][0]['commits_per_execution']} commits, "
            f"{switches_text(report['throughput'][0]['context_switches_per_execution'])} context "
            "switches"
        )
    if "throughput_history" in report:
        lines.append(
            f"  executions/s with history: {report['throughput_history']['executions_per_second']}"
        )
    if "raw_loop" in report:
        raw = {r["processes"]: r["jobs_per_second"] for r in report["raw_loop"]}
        lines.append(
            "  raw loop jobs/s by processes: " + ", ".join(f"{k}: {v}" for k, v in raw.items())
        )
        for r in report.get("throughput", []):
            if r["processes"] in raw:
                lines.append(
                    f"  ours {r['processes']}x{r['concurrency']} / raw loop at "
                    f"{r['processes']}: {_ratio(r['executions_per_second'], raw[r['processes']])}"
                )
    if "pickup" in report:
        pickup = report["pickup"]
        lines.append(
            f"  pickup p50/p99 (claim): {pickup['claim_p50_ms']} / {pickup['claim_p99_ms']} ms; "
            f"acceptance commit -> adapter call: {pickup['adapter_call_p50_ms']} / "
            f"{pickup['adapter_call_p99_ms']} ms"
        )
        if "procrastinate_pickup" in report:
            theirs = report["procrastinate_pickup"]
            lines.append(
                f"  Procrastinate pickup p50/p99: {theirs['task_start_p50_ms']} / "
                f"{theirs['task_start_p99_ms']} ms; ours / theirs: p50 "
                f"{_ratio(pickup['adapter_call_p50_ms'], theirs['task_start_p50_ms'])}, p99 "
                f"{_ratio(pickup['adapter_call_p99_ms'], theirs['task_start_p99_ms'])}"
            )
    if "claim_empty" in report:
        lines.append(
            f"  claim p50/p99: empty {report['claim_empty']['p50_ms']} / "
            f"{report['claim_empty']['p99_ms']} ms; with "
            f"{report['claim_history']['executions_in_table']} rows "
            f"{report['claim_history']['p50_ms']} / {report['claim_history']['p99_ms']} ms "
            f"(p99 {_ratio(report['claim_history']['p99_ms'], report['claim_empty']['p99_ms'])})"
        )
        during = report["claim_during_purge"]
        lines.append(
            f"  claim p50/p99 during purgehistory: {during['p50_ms']} / {during['p99_ms']} ms "
            f"(p99 {_ratio(during['p99_ms'], report['claim_history']['p99_ms'])} of without; "
            f"{during['purged_during_claims']} executions purged meanwhile, still running at the "
            f"end: {during['purge_running_at_end']})"
        )
    if "slow_provider" in report:
        slow = report["slow_provider"]
        http = {r["concurrency"]: r["calls_per_second"] for r in slow["http_only"]}
        theirs = {
            r["concurrency"]: r["jobs_per_second"]
            for r in slow.get("procrastinate", [])
            if "error" not in r
        }
        for r in slow["ours"]:
            c = r["concurrency"]
            if "error" in r:
                lines.append(f"  slow provider at {c}: {r['error']}")
                continue
            lines.append(
                f"  slow provider at {c}: ours {r['executions_per_second']}/s on "
                f"{r['connections_per_process']} connections, peak RSS "
                f"{max(m['VmHWM'] for m in r['rss_mib'])} MiB, "
                f"{r['worker_cpu_ms_per_execution']} ms CPU/execution, "
                f"{switches_text(r['context_switches_per_execution'])} context switches; "
                f"HTTP alone {http[c]}/s "
                f"({_ratio(r['executions_per_second'], http[c])}); Procrastinate+httpx "
                f"{theirs.get(c, 'n/a')}/s ({_ratio(r['executions_per_second'], theirs.get(c, 0))})"
            )
        for r in slow.get("ours_write", []):
            c = r["concurrency"]
            if "error" in r:
                lines.append(f"  slow provider as a write at {c}: {r['error']}")
                continue
            lines.append(
                f"  slow provider as a write at {c}: ours {r['executions_per_second']}/s, "
                f"{r['worker_cpu_ms_per_execution']} ms CPU/execution, "
                f"{r['commits_per_execution']} commits/execution; HTTP alone {http[c]}/s "
                f"({_ratio(r['executions_per_second'], http[c])}); Procrastinate+httpx "
                f"({_ratio(r['executions_per_second'], theirs.get(c, 0))})"
            )
        level = {r["concurrency"]: r for r in slow["ours"] if "error" not in r}
        for r in slow.get("ours_info", []):
            c = r["concurrency"]
            if "error" in r or c not in level:
                missing = f"no run at {report['settings']['log_level']} beside it"
                lines.append(f"  slow provider at LOG_LEVEL=INFO at {c}: {r.get('error', missing)}")
                continue
            info, usual = r["worker_cpu_ms_per_execution"], level[c]["worker_cpu_ms_per_execution"]
            lines.append(
                f"  slow provider at LOG_LEVEL=INFO at {c}: ours {r['executions_per_second']}/s, "
                f"{info} ms CPU/execution against {usual} ms at "
                f"{report['settings']['log_level']} ({_ratio(info, usual)})"
            )
    lines += api.summary_lines(report)
    if "procrastinate" in report:
        theirs = max(report["procrastinate"], key=lambda r: r["jobs_per_second"])
        ours = max(runs, key=lambda r: r["executions_per_second"], default=None)
        lines.append(
            f"  Procrastinate best: {theirs['jobs_per_second']} jobs/s "
            f"({theirs['processes']}x{theirs['concurrency']}); ours best: {best} executions/s"
            + (f" ({ours['processes']}x{ours['concurrency']})" if ours else "")
            + f" ({_ratio(best, theirs['jobs_per_second'])})"
        )
    lines += tracing_cost.summary_lines(report.get("traces", {}))
    if "webhooks" in report:
        lines += webhooks_bench.summary_lines(report["webhooks"])
    lines += fairness.summary_lines(report)
    return lines + peer_summary_lines(report) + limit_summary_lines(report)


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
