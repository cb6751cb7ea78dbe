"""PostgreSQL's floor per no-op execution: the protocol's writes replayed with no worker.

    .venv/bin/python bench/pgfloor.py [--variants schema,no-lists,bare,reshaped]
        [--executions 6000] [--batch 30] [--claim-batch 10] [--rounds 3] [--waldump]
        [--callgrind]

One throwaway durable cluster as bench/worker.py builds it (migrated). Each variant of
bench/pgvariants.py (VARIANTS) gets a database of its own, a copy of the migrated one: `schema`
as it is; indexes, foreign keys or the webhook trigger dropped by DDL (`no-lists`, `no-fk`,
`bare`, ...); the vocabulary CHECK constraints as lists or array constants (docs/adr/0024);
`merged`, the last checkpoint's SUCCEEDED written by the final commit's statement; `reshaped`,
bench/pgreshaped.py's prototype. Then round after round, the variants in turn (the order
reversed every other round): --executions accepted in one transaction as bench/worker.py's
throughput section does, then drained by one client as the worker's statements drain them
(executions/sql/ itself for the schema variants; the worker's session settings and durability;
a connection, so a backend, per phase): claims of --claim-batch until --batch executions are
held, then their RUNNING checkpoints, SUCCEEDED checkpoints and final commits, each one grouped
statement. Autovacuum is off (each run starts from VACUUM ANALYZE). No Python of the worker
runs and the client's own CPU is not counted: what is left is PostgreSQL's work.

Printed per run and as medians per variant: PostgreSQL's CPU per execution (every server
process, as bench/worker.py counts it, and each phase's backend from /proc/PID/schedstat), WAL
bytes and records, commits, heap rows written per table; with --waldump, B-tree leaf inserts
and row locks per execution; with --callgrind, the server runs under valgrind's callgrind and
each phase's backend reports the instructions it ran per execution (less those of a backend
that connects and leaves): a count the machine's load moves far less than CPU time (still a
few per cent from run to run: compare variants within a round).
"""

import argparse
import json
import statistics
import subprocess
import sys
import time
from contextlib import ExitStack
from pathlib import Path

import psycopg
from psycopg import sql as pgsql

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import pgreshaped  # noqa: E402
from bench.pgvariants import VARIANTS, driver  # noqa: E402
from bench.worker import PYTHON, Bench  # noqa: E402
from executions import sql  # noqa: E402


def _on_cpu(pid: int) -> int:
    """A process's time on a CPU so far, in nanoseconds (the first field of its schedstat)."""
    return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0])


class Floor(Bench):
    """bench/worker.py's cluster, one database per variant, drained by the harness."""

    def prepare(self, variants: list[str]) -> None:
        self.owner.close()
        self.runtime.close()
        self.super = psycopg.connect(self.admin_url, autocommit=True)
        # Each run starts from VACUUM ANALYZE; an autovacuum inside a run would be counted in it.
        self.super.execute("ALTER SYSTEM SET autovacuum = off")
        self.super.execute("SELECT pg_reload_conf()")
        template = psycopg.conninfo.conninfo_to_dict(self.db["MIGRATION_DATABASE_URL"])["dbname"]
        self.urls: dict[str, str] = {}
        self.callgrind: Path | None = None
        for variant in variants:
            name = "floor_" + variant.replace("-", "_")
            self.super.execute(
                pgsql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
                    pgsql.Identifier(name), pgsql.Identifier(template)
                )
            )
            url = psycopg.conninfo.make_conninfo(self.admin_url, dbname=name)
            with psycopg.connect(url, autocommit=True) as conn:
                if variant == "reshaped":
                    conn.execute(pgreshaped.SCHEMA)
                elif VARIANTS[variant]:
                    conn.execute(VARIANTS[variant])
            self.urls[variant] = url

    def _connect(self, url: str, *, claims: bool) -> psycopg.Connection:
        conn = psycopg.connect(
            url, autocommit=True, prepare_threshold=0, row_factory=psycopg.rows.dict_row
        )
        statements = [sql.WORKER_SESSION, sql.WORKER_SCANS, sql.WORKER_JIT]
        if claims:
            statements += [sql.CLAIM_SESSION, sql.CLAIM_SORTS]
        for statement in statements:
            conn.execute(statement)
        return conn

    def under_callgrind(self, folder: Path) -> None:
        """The cluster restarted with its server under valgrind's callgrind (each backend's
        instructions written to folder/cg.PID when it exits): counts that no load can move."""
        self.super.close()
        self._localpg("stop")
        state = json.loads((self.base / "pg" / "cluster.json").read_text())
        folder.mkdir(mode=0o777, exist_ok=True)
        folder.chmod(0o777)
        command = (
            f"exec valgrind --tool=callgrind --callgrind-out-file={folder}/cg.%p "
            f"{state['bin_dir']}/postgres -D {self.base}/pg/data -p {state['port']}"
        )
        self.valgrind = subprocess.Popen(
            ["su", "postgres", "-s", "/bin/sh", "-c", command],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + VALGRIND_START_SECONDS
        while True:
            try:
                self.super = psycopg.connect(self.admin_url, autocommit=True)
                break
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(1)
        self.pg_pid = int((self.base / "pg" / "data" / "postmaster.pid").read_text().split()[0])
        self.callgrind = folder

    def _localpg(self, command: str) -> None:
        subprocess.run(
            [PYTHON, "scripts/localpg.py", command, "--dir", str(self.base / "pg")],
            cwd=ROOT,
            check=True,
        )

    def _instructions(self, pids: dict[str, int]) -> dict[str, int]:
        """Each phase's backend's instruction count, once it has exited and written it."""
        counts = {}
        deadline = time.monotonic() + VALGRIND_START_SECONDS
        for phase, pid in pids.items():
            path = self.callgrind / f"cg.{pid}"
            while not (path.exists() and "\ntotals:" in path.read_text()):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"no callgrind totals for backend {pid}")
                time.sleep(0.5)
            line = next(x for x in path.read_text().splitlines() if x.startswith("totals:"))
            counts[phase] = int(line.split()[1])
        return counts

    def run(self, variant: str, n: int, batch: int, claim_batch: int, waldump: bool) -> dict:
        url = self.urls[variant]
        drain = driver(variant)
        tables = pgreshaped.TABLES if variant == "reshaped" else HOT_TABLES
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute("VACUUM ANALYZE")
            flow_id = admin.execute("SELECT id FROM flow WHERE key = 'bench'").fetchone()[0]
            with ExitStack() as stack:
                # One connection (so one backend) per phase: each one's CPU is that phase's.
                conn = {
                    phase: stack.enter_context(self._connect(url, claims=phase == "claim"))
                    for phase in PHASES
                }
                pids = {phase: c.info.backend_pid for phase, c in conn.items()}
                admin.execute("SELECT pg_stat_reset()")
                wal_before = admin.execute(WAL).fetchone()
                start_lsn = admin.execute("SELECT pg_current_wal_insert_lsn()").fetchone()[0]
                on_cpu = {phase: _on_cpu(pid) for phase, pid in pids.items()}
                cpu = self._server_cpu_seconds()
                began = time.monotonic()
                drain.enqueue(conn["accept"], flow_id, n)
                done, statements = 0, 2  # the acceptance's two, in one transaction
                while True:
                    # As the worker: claims of up to WORKER_BATCH, then each write grouped across
                    # the executions claimed meanwhile.
                    rows: list[dict] = []
                    while len(rows) < batch:
                        claimed = drain.claim(conn["claim"], min(claim_batch, batch - len(rows)))
                        statements += 1
                        rows += claimed
                        if not claimed:
                            break
                    if not rows:
                        break
                    statements += drain.WRITES
                    started = drain.start(conn["start"], rows)
                    saved = drain.succeed(conn["succeed"], rows)
                    finished = drain.finalize(conn["finalize"], rows)
                    if not started == saved == finished == len(rows):
                        raise RuntimeError(f"{variant}: {len(rows)} claimed, {finished} finished")
                    done += finished
                elapsed = time.monotonic() - began
                cpu = self._server_cpu_seconds() - cpu
                on_cpu = {phase: _on_cpu(pid) - on_cpu[phase] for phase, pid in pids.items()}
            admin.execute("SELECT txid_current()")  # flushed past what the run wrote
            end_lsn = admin.execute("SELECT pg_current_wal_insert_lsn()").fetchone()[0]
            time.sleep(STATS_SECONDS)  # the closed connections' counters reach the statistics
            admin.execute("SELECT pg_stat_force_next_flush()")
            records, fpi, wal_bytes = (
                a - b for a, b in zip(admin.execute(WAL).fetchone(), wal_before, strict=True)
            )
            written = admin.execute(TABLE_WRITES, {"tables": list(tables)}).fetchall()
            names = {node: name for node, name, _ in admin.execute(RELFILENODES).fetchall()}
        if done != n:
            raise RuntimeError(f"{variant}: {done} of {n} finished")
        result = {
            "variant": variant,
            "postgres_cpu_ms": cpu / n * 1000,
            "seconds": elapsed,
            "wal_bytes": float(wal_bytes) / n,
            "wal_records": records / n,
            "full_page_images": fpi / n,
            "phases": {phase: ns / n / 1e6 for phase, ns in on_cpu.items()},
            "commits": (statements - 1) / n,  # a transaction per statement; the acceptance one
            "tables": {
                name: {"ins": ins / n, "upd": upd / n, "hot": hot / n, "del": dele / n}
                for name, ins, upd, hot, dele in written
            },
        }
        if self.callgrind:
            counts = self._instructions(pids)
            idle = self._idle_instructions(url)
            result["instructions"] = {
                phase: (count - idle[phase]) / n for phase, count in counts.items()
            }
        if waldump:
            result["records"] = _records(self.base, (str(start_lsn), str(end_lsn)), n, names)
        return result

    def _idle_instructions(self, url: str) -> dict[str, int]:
        """What a phase's backend costs with no work: connect, session settings, exit."""
        with ExitStack() as stack:
            pids = {
                phase: stack.enter_context(
                    self._connect(url, claims=phase == "claim")
                ).info.backend_pid
                for phase in PHASES
            }
        return self._instructions(pids)


PHASES = ("accept", "claim", "start", "succeed", "finalize")
VALGRIND_START_SECONDS = 120
STATS_SECONDS = 1.0  # for a closed backend's statistics to be flushed
HOT_TABLES = ("request", "execution", "action_execution", "audit_event")
WAL = "SELECT wal_records, wal_fpi, wal_bytes FROM pg_stat_wal"
TABLE_WRITES = """
SELECT relname, n_tup_ins, n_tup_upd, n_tup_hot_upd, n_tup_del
  FROM pg_stat_user_tables
 WHERE relname = ANY(%(tables)s)
 ORDER BY relname
"""
RELFILENODES = "SELECT relfilenode, relname, relkind FROM pg_class WHERE relfilenode <> 0"


def _records(base: Path, lsn: tuple[str, str], n: int, names: dict) -> dict:
    """Index entries (B-tree leaf and posting-list inserts) and row locks per execution, by
    relation, from pg_waldump (each record's first block reference)."""
    state = json.loads((base / "pg" / "cluster.json").read_text())
    out = subprocess.run(
        [
            str(Path(state["bin_dir"]) / "pg_waldump"),
            "--path",
            str(base / "pg" / "data" / "pg_wal"),
            "--start",
            lsn[0],
            "--end",
            lsn[1],
        ],
        check=False,
        capture_output=True,
        text=True,
    ).stdout
    counts: dict[str, float] = {}
    for line in out.splitlines():
        if "desc: " not in line or "blkref #0: rel " not in line:
            continue
        kind = line.split("desc: ", 1)[1].split(" ", 1)[0]
        rmgr = line.split("rmgr: ", 1)[1].split(" ", 1)[0]
        node = int(line.split("blkref #0: rel ", 1)[1].split()[0].split("/")[2])
        if rmgr == "Btree" and kind in ("INSERT_LEAF", "INSERT_POST"):
            key = "index entries"
        elif rmgr == "Heap" and kind == "LOCK":
            key = "row locks"
        else:
            continue
        counts[key] = counts.get(key, 0) + 1 / n
        rel = f"{key}: {names.get(node, node)}"
        counts[rel] = counts.get(rel, 0) + 1 / n
    return counts


def print_run(r: dict) -> None:
    print(
        f"  {r['variant']}: PostgreSQL {r['postgres_cpu_ms']:.3f} ms, WAL {r['wal_bytes']:.0f} B "
        f"({r['wal_records']:.1f} records, {r['full_page_images']:.2f} FPI), "
        f"{r['commits']:.2f} commits per execution; {r['seconds']:.1f} s",
        flush=True,
    )
    phases = r["phases"]
    print(
        f"    their backends' CPU: {sum(phases.values()):.3f} ms = "
        + " + ".join(f"{name} {ms:.3f}" for name, ms in phases.items())
    )
    if "instructions" in r:
        counts = r["instructions"]
        print(
            f"    their backends' instructions: {sum(counts.values()) / 1000:.0f}k = "
            + " + ".join(f"{name} {count / 1000:.0f}k" for name, count in counts.items())
        )
    for name, t in r["tables"].items():
        print(
            f"    {name:<22} {t['ins']:.2f} ins {t['upd']:.2f} upd ({t['hot']:.2f} HOT) "
            f"{t['del']:.2f} del"
        )
    records = r.get("records", {})
    for key in ("index entries", "row locks"):
        if key in records:
            by = sorted(
                ((k.split(": ", 1)[1], v) for k, v in records.items() if k.startswith(key + ": ")),
                key=lambda kv: -kv[1],
            )
            print(f"    {key} {records[key]:.2f}: " + ", ".join(f"{k} {v:.2f}" for k, v in by))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--variants", default="schema,no-lists,bare,reshaped")
    parser.add_argument("--executions", type=int, default=6000)
    parser.add_argument("--batch", type=int, default=30)
    parser.add_argument("--claim-batch", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--waldump", action="store_true")
    parser.add_argument("--callgrind", action="store_true")
    args = parser.parse_args(argv)
    variants = args.variants.split(",")
    unknown = set(variants) - set(VARIANTS)
    if unknown:
        parser.error(f"unknown variants {sorted(unknown)}; known: {sorted(VARIANTS)}")
    runs: dict[str, list[dict]] = {v: [] for v in variants}
    with ExitStack() as stack:
        bench = Floor.scratch(stack, "pgfloor.", concurrency=1)
        bench.prepare(variants)
        if args.callgrind:
            bench.under_callgrind(bench.base / "callgrind")
        stack.callback(bench.super.close)
        for index in range(args.rounds):
            print(f"round {index + 1}, batch {args.batch}:", flush=True)
            order = variants if index % 2 == 0 else variants[::-1]
            for variant in order:
                result = bench.run(
                    variant, args.executions, args.batch, args.claim_batch, args.waldump
                )
                runs[variant].append(result)
                print_run(result)
    print(f"medians of {args.rounds} rounds, batch {args.batch}, per execution:")
    for variant, results in runs.items():
        cpu = statistics.median(r["postgres_cpu_ms"] for r in results)
        wal = statistics.median(r["wal_bytes"] for r in results)
        line = f"  {variant:<14} PostgreSQL {cpu:.3f} ms, WAL {wal:.0f} B"
        phases = {
            name: statistics.median(r["phases"][name] for r in results)
            for name in results[0]["phases"]
        }
        line += " (" + ", ".join(f"{name} {ms:.3f}" for name, ms in phases.items()) + ")"
        if args.waldump:
            entries = statistics.median(r["records"].get("index entries", 0) for r in results)
            locks = statistics.median(r["records"].get("row locks", 0) for r in results)
            line += f", {entries:.1f} index entries, {locks:.1f} row locks"
        if args.callgrind:
            counts = {
                name: statistics.median(r["instructions"][name] for r in results)
                for name in results[0]["instructions"]
            }
            line += (
                f", {sum(counts.values()) / 1000:.0f}k instructions ("
                + ", ".join(f"{name} {count / 1000:.0f}k" for name, count in counts.items())
                + ")"
            )
        print(line + f", {results[0]['commits']:.2f} commits")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
