"""The `claim` section of bench/worker.py: the claim statement's time, with history and beside a
purge.

The claim statement alone, batch 10, timed from the client on a connection set up as the
worker's, on an empty table, again after ~1,000,000 finished executions were added (--history),
and again while `manage.py purgehistory` works through them; each set of timings starts after a
CHECKPOINT, so the flush of what was just loaded is not counted. With the throughput section,
the most --processes run once more on that history.
"""

import statistics
import subprocess
import time
import uuid
from contextlib import ExitStack
from typing import TYPE_CHECKING

import psycopg

from bench.common import PYTHON, READY_TIMEOUT, ROOT, ms, percentile, ratio
from executions import sql  # plain SQL constants, no Django needed

if TYPE_CHECKING:
    from bench.worker import Bench

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


def run(bench: "Bench", *, claims: int, history: int, throughput: tuple[int, int] | None) -> dict:
    """Every set of timings; with `throughput` (processes, executions), that run on the history."""
    checkpoint(bench)  # each claim timing starts from flushed buffers, as after history
    report = {"claim_empty": claim_time(bench, claims, "empty history")}
    add_history(bench, history)
    report["claim_history"] = claim_time(bench, claims, "with history")
    report["claim_during_purge"] = claim_during_purge(bench, claims)
    if throughput:
        processes, executions = throughput
        print("throughput with history:", flush=True)
        report["throughput_history"] = bench.throughput(
            processes, executions, f"{processes}-proc+history"
        )
    return report


def claim_time(bench: "Bench", claims: int, label: str) -> dict:
    owner = "bench-claimer"
    bench.enqueue(claims * 10)
    timings = []
    with bench._claimer() as claimer:
        for _ in range(claims):
            started = time.perf_counter()
            claimer.execute(
                sql.CLAIM_EXECUTIONS,
                {"owner": owner, "limit": 10, "lease_seconds": 60, "outage": False},
            ).fetchall()
            timings.append(time.perf_counter() - started)
    bench.owner.execute(
        "UPDATE execution SET status = 'SUCCEEDED', finished_at = clock_timestamp(), "
        "lease_owner = NULL, lease_expires_at = NULL WHERE lease_owner = %s",
        [owner],
    )
    rows = bench.owner.execute("SELECT count(*) FROM execution").fetchone()[0]
    result = {
        "executions_in_table": rows,
        "claims": claims,
        "p50_ms": ms(statistics.median(timings)),
        "p99_ms": ms(percentile(timings, 99)),
    }
    print(f"  claim time ({label}): {result}", flush=True)
    return result


def add_history(bench: "Bench", n: int) -> None:
    request_id = uuid.uuid4()
    started = time.monotonic()
    bench.owner.execute(
        "INSERT INTO request (id, flow_id, owner, scope, data, state) "
        "VALUES (%s, %s, 'bench', 'history', '{}', 'DONE')",
        [request_id, bench.flow_id],
    )
    bench.owner.execute(HISTORY, {"request_id": request_id, "flow_id": bench.flow_id, "n": n})
    bench.owner.execute(HISTORY_CHECKPOINTS, {"request_id": request_id})
    bench.owner.execute("VACUUM ANALYZE execution")
    bench.owner.execute("VACUUM ANALYZE action_execution")
    checkpoint(bench)
    print(
        f"  added {n} finished executions (one checkpoint each) in "
        f"{time.monotonic() - started:.1f}s",
        flush=True,
    )


def checkpoint(bench: "Bench") -> None:
    """Flush what was just written: a million rows loaded (and vacuumed) leave gigabytes of
    WAL behind, and the checkpoint they trigger would otherwise land in the next claim
    timings as the load's cost, not the table's."""
    with psycopg.connect(bench.admin_url, autocommit=True) as admin:
        admin.execute("CHECKPOINT")


def claim_during_purge(bench: "Bench", claims: int) -> dict:
    """Claim time while `manage.py purgehistory` works through the history beside it."""
    with ExitStack() as stack:
        log = open(bench.base / "purgehistory.log", "wb")
        stack.callback(log.close)
        purge = subprocess.Popen(
            [PYTHON, "manage.py", "purgehistory", "--older-than", "7", "--pause", "0"],
            cwd=ROOT,
            env=bench.env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        stack.callback(bench._stop, purge)
        deadline = time.monotonic() + READY_TIMEOUT
        purged = 0
        while purged == 0:  # wait until its first batch committed
            if time.monotonic() > deadline or purge.poll() is not None:
                raise RuntimeError(f"purgehistory did not start; see {bench.base}")
            time.sleep(0.05)
            purged = _purged(bench)
        result = claim_time(bench, claims, "during a purge")
        result["purge_running_at_end"] = purge.poll() is None
        result["purged_during_claims"] = _purged(bench) - purged
    return result


def _purged(bench: "Bench") -> int:
    return bench.owner.execute(
        "SELECT count(*) FROM execution WHERE purged_at IS NOT NULL"
    ).fetchone()[0]


def summary_lines(report: dict) -> list[str]:
    if "claim_empty" not in report:
        return []
    during = report["claim_during_purge"]
    return [
        f"  claim p50/p99: empty {report['claim_empty']['p50_ms']} / "
        f"{report['claim_empty']['p99_ms']} ms; with "
        f"{report['claim_history']['executions_in_table']} rows "
        f"{report['claim_history']['p50_ms']} / {report['claim_history']['p99_ms']} ms "
        f"(p99 {ratio(report['claim_history']['p99_ms'], report['claim_empty']['p99_ms'])})",
        f"  claim p50/p99 during purgehistory: {during['p50_ms']} / {during['p99_ms']} ms "
        f"(p99 {ratio(during['p99_ms'], report['claim_history']['p99_ms'])} of without; "
        f"{during['purged_during_claims']} executions purged meanwhile, still running at the "
        f"end: {during['purge_running_at_end']})",
    ]
