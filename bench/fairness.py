"""The fairness benchmark (bench/worker.py's `fairness` section): WORKER_FAIRNESS=tenant against
the queue's order, with one tenant's backlog beside another tenant's steady trickle.

1. Claim cost: the claim statement alone (batch 10, the worker's session settings), in each
   order, with --fairness-backlog executions of one tenant due (50 of them held) beside nine
   tenants of five each: p50 and p99 from the client.
2. Tenant B alone: --fairness-processes runworker processes at --fairness-concurrency, B
   accepting 2 requests/s (one at a time, as the API does) for --fairness-seconds; B's
   acceptance-to-finish (finished_at - created_at, the database's clock): p50 and the slowest.
3. The same beside tenant A's backlog of --fairness-backlog, accepted in one transaction as B
   starts, B going on at 2/s until A's backlog has drained: under `tenant`, then under `queue`.
   A's throughput (its executions / (its last finish - its commit)) and B's slowest in each.

Every execution runs one NO_OP action, so the backlog drains as fast as the database lets it.
"""

import statistics
import time
import uuid
from contextlib import ExitStack
from typing import Any

from executions import sql

B_RATE = 2.0  # tenant B's acceptances per second
SMALL_TENANTS, SMALL_BACKLOG = 9, 5  # beside the big backlog, for the claim timings
HELD = 50  # of the big backlog, held (claimed) while the claim is timed
# Whether a tenant still has live work (execution_fair_idx: stops at its first row).
TENANT_LIVE = """
SELECT EXISTS (SELECT FROM execution
                WHERE scope = %s AND status IN ('PENDING', 'RETRY_WAIT', 'RUNNING', 'SUSPENDED'))
"""
RUN_TIMEOUT = 600  # seconds for one drain
# B's acceptance to finish, and A's window, by the database's clock.
LATENCIES = """
SELECT extract(epoch FROM e.finished_at - e.created_at)
  FROM execution AS e
 WHERE e.id = ANY(%(ids)s) AND e.finished_at IS NOT NULL
"""
LAST_FINISH = "SELECT count(*), max(finished_at) FROM execution WHERE scope = %s"
FINISH_CLAIMED = """
UPDATE execution SET status = 'SUCCEEDED', finished_at = clock_timestamp(), lease_owner = NULL,
       lease_expires_at = NULL
 WHERE scope = ANY(%(scopes)s) AND status IN ('PENDING', 'RUNNING')
"""


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 2)


def _percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(p / 100 * (len(ordered) - 1))))]


def claim_cost(bench: Any, backlog: int, claims: int) -> dict:
    """Both orders' claim statement, timed, beside one deep backlog and a few small tenants."""
    big, _ = bench.enqueue(backlog)
    scopes = [big] + [bench.enqueue(SMALL_BACKLOG)[0] for _ in range(SMALL_TENANTS)]
    params = {"limit": 10, "lease_seconds": 60, "outage": False}
    result: dict[str, Any] = {"backlog": backlog, "tenants": len(scopes)}
    with bench._claimer() as claimer:
        claimer.execute(sql.CLAIM_EXECUTIONS, {**params, "owner": "bench-held", "limit": HELD})
        for order, statement in (
            ("queue", sql.CLAIM_EXECUTIONS),
            ("tenant", sql.CLAIM_EXECUTIONS_BY_TENANT),
        ):
            timings = []
            for _ in range(claims):
                started = time.perf_counter()
                claimer.execute(statement, {**params, "owner": "bench-claimer"}).fetchall()
                timings.append(time.perf_counter() - started)
            result[order] = {
                "p50_ms": _ms(statistics.median(timings)),
                "p99_ms": _ms(_percentile(timings, 99)),
            }
    bench.owner.execute(FINISH_CLAIMED, {"scopes": scopes})
    print(f"  claim cost beside a backlog of {backlog}: {result}", flush=True)
    return result


def _accept_one(bench: Any, scope: str) -> uuid.UUID:
    """One acceptance of tenant `scope`, as the API leaves it, with its NOTIFY."""
    request_id, execution_id = uuid.uuid4(), uuid.uuid4()
    conn = bench.runtime
    with conn.transaction():
        conn.execute(
            "INSERT INTO request (id, flow_id, owner, scope, data, state, revision, version) "
            "VALUES (%s, %s, 'bench', %s, '{}', 'DRAFT', 2, 2)",
            [request_id, bench.flow_id, scope],
        )
        conn.execute(
            "INSERT INTO execution (id, request_id, flow_id, transition_id, accepted_revision, "
            "actor_snapshot) VALUES (%s, %s, %s, 'go', 2, '{}')",
            [execution_id, request_id, bench.flow_id],
        )
        conn.execute(
            "UPDATE request SET blocked_by_id = %s WHERE id = %s", [execution_id, request_id]
        )
        conn.execute(sql.NOTIFY_WORK, {"execution_id": str(execution_id)})
    return execution_id


def drain(
    bench: Any, *, fairness: str, backlog: int, processes: int, concurrency: int, seconds: float
) -> dict:
    """B at 2/s beside A's backlog (for `seconds` when there is none) under `fairness`."""
    label = f"fair-{fairness}-{backlog}"
    bench.owner.execute("VACUUM ANALYZE request, execution, action_execution, audit_event")
    b_scope = "bench-b-" + uuid.uuid4().hex[:8]
    b_ids: list[uuid.UUID] = []
    with ExitStack() as stack:
        bench.start_workers(processes, stack, label, concurrency, env={"WORKER_FAIRNESS": fairness})
        a_scope, committed = bench.enqueue(backlog) if backlog else (None, time.time())
        started = time.monotonic()
        next_at = started
        while True:
            now = time.monotonic()
            if now > started + RUN_TIMEOUT:
                raise RuntimeError(f"{label}: not drained in {RUN_TIMEOUT}s")
            if a_scope is None:
                if now >= started + seconds:
                    break
            elif not bench.runtime.execute(TENANT_LIVE, [a_scope]).fetchone()[0]:
                break
            if now >= next_at:
                b_ids.append(_accept_one(bench, b_scope))
                next_at += 1 / B_RATE
            time.sleep(min(0.05, max(0.0, next_at - time.monotonic())))
        deadline = time.monotonic() + RUN_TIMEOUT
        while bench.runtime.execute(TENANT_LIVE, [b_scope]).fetchone()[0]:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{label}: tenant B not finished")
            time.sleep(0.05)
    latencies = [r[0] for r in bench.runtime.execute(LATENCIES, {"ids": b_ids}).fetchall()]
    result: dict[str, Any] = {
        "fairness": fairness,
        "backlog": backlog,
        "processes": processes,
        "concurrency": concurrency,
        "b_requests": len(b_ids),
        "b_p50_ms": _ms(float(statistics.median(latencies))),
        "b_slowest_ms": _ms(float(max(latencies))),
    }
    if a_scope is not None:
        done, last = bench.runtime.execute(LAST_FINISH, [a_scope]).fetchone()
        elapsed = last.timestamp() - committed
        result["a_executions_per_second"] = round(done / elapsed, 1)
    print(f"  {label}: {result}", flush=True)
    return result


def run(bench: Any, *, backlog: int, processes: int, concurrency: int, seconds: float) -> dict:
    shape = {"processes": processes, "concurrency": concurrency}
    report: dict[str, Any] = {"claim": claim_cost(bench, backlog, bench.args.claims)}
    report["b_alone"] = drain(bench, fairness="tenant", backlog=0, seconds=seconds, **shape)
    for fairness in ("tenant", "queue"):
        report[fairness] = drain(
            bench, fairness=fairness, backlog=backlog, seconds=seconds, **shape
        )
    return report


def summary_lines(report: dict) -> list[str]:
    fair = report.get("fairness")
    if not fair:
        return []
    claim, alone, tenant, queue = fair["claim"], fair["b_alone"], fair["tenant"], fair["queue"]

    def ratio(a: float, b: float) -> str:
        return f"{a / b:.2f}x" if b else "n/a"

    return [
        f"  claim p50/p99 beside a backlog of {claim['backlog']} ({claim['tenants']} tenants): "
        f"queue {claim['queue']['p50_ms']} / {claim['queue']['p99_ms']} ms, tenant "
        f"{claim['tenant']['p50_ms']} / {claim['tenant']['p99_ms']} ms",
        f"  tenant B (2/s) slowest acceptance-to-finish: alone {alone['b_slowest_ms']} ms; beside "
        f"A's backlog of {tenant['backlog']} under tenant {tenant['b_slowest_ms']} ms "
        f"({ratio(tenant['b_slowest_ms'], alone['b_slowest_ms'])} of alone), under queue "
        f"{queue['b_slowest_ms']} ms",
        f"  tenant A's backlog: {tenant['a_executions_per_second']} executions/s under tenant, "
        f"{queue['a_executions_per_second']} under queue "
        f"({ratio(tenant['a_executions_per_second'], queue['a_executions_per_second'])})",
    ]
