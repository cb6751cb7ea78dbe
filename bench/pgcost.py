"""Where PostgreSQL's work per no-op execution goes, statement by statement and table by table.

    .venv/bin/python bench/pgcost.py [--rounds 3] [--executions 6000] [--processes 2]
        [--concurrency 100] [--top 15] [--no-statements] [--waldump] [--setup SQL]

One throwaway durable cluster as bench/worker.py builds it, with pg_stat_statements preloaded
(unless --no-statements, for CPU figures without its own cost); then --rounds no-op throughput
runs of bench/worker.py's section 1 (K processes x C), each after resetting the statistics.
Printed per run and per execution: executions/s, worker and server CPU, commits; per statement
(the --top by execution time) calls, execution time, rows and WAL bytes; per table rows inserted,
updated (and how many of those were HOT), deleted; WAL records, bytes and full-page images. The
bench's own completion poll (LIVE_ANY) is among the statements and marked. Last, the indexes of
the hot tables, which every non-HOT update and every insert maintains. With --waldump, each run's
WAL by record type (pg_waldump --stats=record), per execution. --setup runs its SQL as the
superuser before the first run (a storage parameter or an index tried before its migration).
"""

import argparse
import json
import re
import statistics
import subprocess
import sys
from contextlib import ExitStack
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import LIVE_ANY, PYTHON  # noqa: E402
from bench.worker import Bench  # noqa: E402

HOT_TABLES = ("request", "execution", "action_execution", "audit_event", "webhook_event")
STATEMENTS = """
SELECT query, calls, total_exec_time, rows, wal_bytes
  FROM pg_stat_statements
 WHERE dbid = (SELECT oid FROM pg_database WHERE datname = %(db)s)
 ORDER BY total_exec_time DESC
"""
TABLES = """
SELECT relname, n_tup_ins, n_tup_upd, n_tup_hot_upd, n_tup_del
  FROM pg_stat_user_tables
 WHERE relname = ANY(%(tables)s)
 ORDER BY relname
"""
WALDUMP_LINE = re.compile(r"^(\S+/\S+)\s+(\d+)\s.*\)\s+(\d+)\s+\(\s*[\d.]+\)\s*$")
# "rmgr: Btree  len ...  desc: INSERT_LEAF off 2, blkref #0: rel 1663/16384/16423 blk 1"
WALDUMP_RECORD = re.compile(r"rmgr: (\S+) .*desc: (\S+).*?blkref #0: rel \d+/\d+/(\d+)")
RELFILENODES = "SELECT relfilenode, relname FROM pg_class WHERE relfilenode <> 0"
WAL = "SELECT wal_records, wal_fpi, wal_bytes FROM pg_stat_wal"
INDEXES = """
SELECT c.relname, i.relname, pg_get_indexdef(i.oid)
  FROM pg_index AS x
  JOIN pg_class AS c ON c.oid = x.indrelid
  JOIN pg_class AS i ON i.oid = x.indexrelid
 WHERE c.relname = ANY(%(tables)s)
 ORDER BY c.relname, i.relname
"""


def _one_line(query: str, width: int = 90) -> str:
    text = " ".join(query.split())
    return text if len(text) <= width else text[: width - 1] + "…"


class Cost(Bench):
    """bench/worker.py's cluster, with pg_stat_statements and a superuser on the database."""

    def start_statistics(self, statements: bool) -> None:
        self.statements = statements
        with psycopg.connect(self.admin_url, autocommit=True) as admin:
            if statements:
                admin.execute("ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'")
            admin.execute("ALTER SYSTEM SET track_functions = 'none'")
        self.owner.close()
        self.runtime.close()
        for command in ("stop", "start"):
            self._localpg(command)
        self.owner = psycopg.connect(self.db["MIGRATION_DATABASE_URL"], autocommit=True)
        self.runtime = psycopg.connect(self.db["DATABASE_URL"], autocommit=True)
        self.runtime_pid = self.runtime.info.backend_pid
        self.pg_pid = int((self.base / "pg" / "data" / "postmaster.pid").read_text().split()[0])
        dbname = self.owner.info.dbname
        self.dbname = dbname
        self.super = psycopg.connect(
            psycopg.conninfo.make_conninfo(self.admin_url, dbname=dbname), autocommit=True
        )
        if statements:
            self.super.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")

    def _localpg(self, command: str) -> None:
        subprocess.run(
            [PYTHON, "scripts/localpg.py", command, "--dir", str(self.base / "pg")],
            cwd=ROOT,
            check=True,
        )

    def measured(self, processes: int, n: int, concurrency: int, label: str) -> dict:
        self.owner.execute("VACUUM ANALYZE request, execution, action_execution, audit_event")
        self.super.execute("SELECT pg_stat_reset()")
        self.super.execute("SELECT pg_stat_reset_shared('wal')")
        if self.statements:
            self.super.execute("SELECT pg_stat_statements_reset()")
        wal_before = self.super.execute(WAL).fetchone()
        start_lsn = self.super.execute("SELECT pg_current_wal_insert_lsn()").fetchone()[0]
        result = self.throughput(processes, n, label, concurrency)
        end_lsn = self.super.execute("SELECT pg_current_wal_insert_lsn()").fetchone()[0]
        self.super.execute("SELECT txid_current()")  # a synchronous commit: flushed past end_lsn
        result["lsn"] = (str(start_lsn), str(end_lsn))
        self.super.execute("SELECT pg_stat_force_next_flush()")
        records, fpi, wal_bytes = (
            a - b for a, b in zip(self.super.execute(WAL).fetchone(), wal_before, strict=True)
        )
        result["wal"] = {
            "records": records / n,
            "full_page_images": fpi / n,
            "bytes": float(wal_bytes) / n,
        }
        result["tables"] = {
            name: {"ins": ins / n, "upd": upd / n, "hot": hot / n, "del": dele / n}
            for name, ins, upd, hot, dele in self.super.execute(
                TABLES, {"tables": list(HOT_TABLES)}
            ).fetchall()
        }
        if self.statements:
            result["statements"] = [
                {
                    "query": query,
                    "calls": calls / n,
                    "ms": total / n,
                    "rows": rows / n,
                    "wal_bytes": float(wal) / n,
                }
                for query, calls, total, rows, wal in self.super.execute(
                    STATEMENTS, {"db": self.dbname}
                ).fetchall()
            ]
        return result


def _waldump(base: Path, lsn: tuple[str, str], *options: str) -> str:
    state = json.loads((base / "pg" / "cluster.json").read_text())
    done = subprocess.run(
        [
            str(Path(state["bin_dir"]) / "pg_waldump"),
            *options,
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
    )
    if done.returncode:
        print(f"    pg_waldump: {done.stderr.strip()}")
    return done.stdout


def waldump(base: Path, lsn: tuple[str, str], n: int, top: int, names: dict[int, str]) -> None:
    """One run's WAL per execution: by record type (pg_waldump --stats=record), then by record
    type and relation (its first block reference: the heap or index written)."""
    rows = []
    for line in _waldump(base, lsn, "--stats=record").splitlines():
        # "Heap/UPDATE  count (%)  record size (%)  FPI size (%)  combined size (%)"
        match = WALDUMP_LINE.match(line)
        if match:
            rows.append((int(match[3]), int(match[2]), match[1]))
    print("    WAL by record type, per execution (count, bytes):")
    for size, count, name in sorted(rows, reverse=True)[:top]:
        print(f"      {name:<28} {count / n:6.2f} {size / n:7.0f} B")
    counts: dict[tuple[str, str], int] = {}
    for line in _waldump(base, lsn).splitlines():
        match = WALDUMP_RECORD.search(line)
        if match:
            relation = names.get(int(match[3]), match[3])
            key = (f"{match[1]}/{match[2]}", relation)
            counts[key] = counts.get(key, 0) + 1
    print("    WAL records by type and relation, per execution:")
    for (kind, relation), count in sorted(counts.items(), key=lambda kv: -kv[1])[: top * 2]:
        print(f"      {kind:<20} {relation:<36} {count / n:6.2f}")


def print_run(result: dict, top: int) -> None:
    wal = result["wal"]
    print(
        f"    WAL per execution: {wal['records']:.1f} records, {wal['bytes']:.0f} bytes, "
        f"{wal['full_page_images']:.2f} full-page images"
    )
    for name, t in result["tables"].items():
        hot = t["hot"] / t["upd"] if t["upd"] else 0.0
        print(
            f"    {name:<18} per execution: {t['ins']:.2f} inserted, {t['upd']:.2f} updated "
            f"({t['hot']:.2f} HOT, {hot:.0%}), {t['del']:.2f} deleted"
        )
    statements = result.get("statements") or []
    total = sum(s["ms"] for s in statements)
    calls = sum(s["calls"] for s in statements)
    print(f"    statements per execution: {calls:.2f} calls, {total * 1000:.1f} µs executing")
    poll = " ".join(LIVE_ANY.split())
    for s in statements[:top]:
        mark = " [bench poll]" if " ".join(s["query"].split()) == poll else ""
        print(
            f"      {s['ms'] * 1000:7.1f} µs {s['calls']:5.2f} calls {s['rows']:5.2f} rows "
            f"{s['wal_bytes']:6.0f} WAL B  {_one_line(s['query'])}{mark}"
        )


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--executions", type=int, default=6000)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=100)
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument("--no-statements", action="store_true")
    parser.add_argument("--waldump", action="store_true")
    parser.add_argument("--setup", default="")
    args = parser.parse_args(argv)
    with ExitStack() as stack:
        bench = Cost.scratch(stack, "pgcost.", concurrency=args.concurrency, log_level="WARNING")
        base = bench.base
        bench.start_statistics(not args.no_statements)
        stack.callback(bench.super.close)
        if args.setup:
            bench.super.execute(args.setup)
        runs = []
        for index in range(args.rounds):
            label = f"round {index + 1}, {args.processes}x{args.concurrency}"
            runs.append(bench.measured(args.processes, args.executions, args.concurrency, label))
            print_run(runs[-1], args.top)
            if args.waldump:
                names = dict(bench.super.execute(RELFILENODES).fetchall())
                waldump(base, runs[-1]["lsn"], args.executions, args.top, names)
        print("medians:")
        for key in (
            "executions_per_second",
            "worker_cpu_ms_per_execution",
            "postgres_cpu_ms_per_execution",
            "commits_per_execution",
        ):
            print(f"  {key}: {statistics.median(r[key] for r in runs)}")
        print(
            f"  WAL bytes per execution: {statistics.median(r['wal']['bytes'] for r in runs):.0f}"
        )
        print("indexes of the hot tables:")
        for table, name, definition in bench.super.execute(
            INDEXES, {"tables": list(HOT_TABLES)}
        ).fetchall():
            print(f"  {table}.{name}: {definition.split(' USING ', 1)[1]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
