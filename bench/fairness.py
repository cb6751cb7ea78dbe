"""The fairness benchmark (bench/worker.py's `fairness` section): WORKER_FAIRNESS=tenant against
the queue's order, with one tenant's backlog beside another tenant's steady trickle.

1. Claim cost: the claim statement alone (batch 10, the worker's session settings), in each
   order, with --fairness-backlog executions of one tenant due (50 of them held) beside nine
   tenants of five each: p50 and p99 from the client.
2. Tenant B alone: --fairness-processes runworker processes at --fairness-concurrency, B
   accepting 2 requests/s (one at a time, as the API does) for --fairness-seconds; B's
   acceptance-to-finish (finished_at - created_at, the database's clock): p50 and the slowest.
3. The same beside tenant A's backlog of --fairness-backlog, accepted in one transaction as B
   starts, B going on at 2/s until A's backlog has drained, under `tenant`, then `queue` (after
   a warm-up drain, not reported): A's throughput (its executions / (its last finish - its
   commit)) and B's slowest in each.
4. The same with A's backlog (--fairness-limited-backlog) behind a route with
   `rate_limit = "--fairness-rate/s"` that B's flow does not call, and tenant C sending one
   request every C_EVERY seconds on A's route, parked beside A's backlog (C's wait, acceptance
   to the limiter's grant, shows whether parked executions come back in tenant order). Under
   `tenant`, then `queue`: B's p50 and slowest against alone, A's throughput (the rate, in both
   orders), C's wait p50 and slowest.

For each run, where B's milliseconds went (`steps`), medians and the slowest's, by the
database's clock and the worker's mark of B's call (bench/marked_worker.py; one host, one
clock): `accept`, the acceptance's transaction from its start to its last statement; `claim`,
from there (its commit included) to the start of the claim that took it; `start`, that claim
to its RUNNING checkpoint's write; `call`, that write to the adapter's call; `save`, the call
to the SUCCEEDED checkpoint's write; `final`, that write to the final commit's. Every execution
but A's and C's in part 4 runs one NO_OP action, so the backlog drains as fast as it can.
"""

import statistics
import time
import uuid
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from psycopg.types.json import Jsonb

from executions import sql
from tests.support.meteredprovider import MeteredProvider

B_RATE = 2.0  # tenant B's acceptances per second
C_EVERY = 2.0  # seconds between tenant C's acceptances (part 4)
SMALL_TENANTS, SMALL_BACKLOG = 9, 5  # beside the big backlog, for the claim timings
HELD = 50  # of the big backlog, held (claimed) while the claim is timed
# Whether a tenant still has live work (execution_fair_idx: stops at its first row).
TENANT_LIVE = """
SELECT EXISTS (SELECT FROM execution
                WHERE scope = %s AND status IN ('PENDING', 'RETRY_WAIT', 'RUNNING', 'SUSPENDED'))
"""
RUN_TIMEOUT = 600  # seconds for one drain
# B's acceptance, claim, checkpoint start and end, and finish, by the database's clock.
STEPS = """
SELECT e.id, extract(epoch FROM e.created_at), extract(epoch FROM e.claimed_at),
       extract(epoch FROM c.started_at), extract(epoch FROM c.finished_at),
       extract(epoch FROM e.finished_at)
  FROM execution AS e
  JOIN action_execution AS c ON c.execution_id = e.id
 WHERE e.id = ANY(%(ids)s) AND e.finished_at IS NOT NULL
"""
# C's wait for its call: acceptance to the limiter's grant (route_call), by the database's clock.
GRANTED = """
SELECT extract(epoch FROM min(rc.started_at) - e.created_at)
  FROM execution AS e
  JOIN route_call AS rc ON rc.execution_id = e.id
 WHERE e.id = ANY(%(ids)s)
 GROUP BY e.id, e.created_at
"""
LAST_FINISH = "SELECT count(*), max(finished_at) FROM execution WHERE scope = %s"
FINISH_CLAIMED = """
UPDATE execution SET status = 'SUCCEEDED', finished_at = clock_timestamp(), lease_owner = NULL,
       lease_expires_at = NULL
 WHERE scope = ANY(%(scopes)s) AND status IN ('PENDING', 'RUNNING')
"""
CLEAR_LIMITS = "TRUNCATE route_call, route_park, route_limit, route_event"
INTEGRATIONS = """
[contracts."bench.fair@1"]
effect = "READ_ONLY"
max_attempts = 3
timeout_seconds = 10

[routes."bench.fair@1"]
adapter = "http.json"
url = "{url}"
rate_limit = "{rate}/s"
"""
STEP_NAMES = ("accept", "claim", "start", "call", "save", "final")
# An acceptance's last statement, its NOTIFY, also reads the clock (`accept` ends there).
NOTIFY_AND_CLOCK = sql.NOTIFY_WORK + ", extract(epoch FROM clock_timestamp())"
# Part 4's flow: one action on the rate-limited route.
LIMITED_FLOW = {
    "key": "bench-fair-limited",
    "version": 1,
    "initialState": "DRAFT",
    "states": ["DRAFT", "DONE"],
    "dataSchema": {"type": "object"},
    "transitions": [
        {
            "id": "go",
            "from": ["DRAFT"],
            "actions": [{"id": "call", "capability": "bench.fair", "version": 1, "input": {}}],
            "decision": {
                "hitPolicy": "FIRST",
                "rules": [{"id": "done", "when": True, "target": "DONE", "outcome": "DONE"}],
            },
        }
    ],
}


@dataclass
class Limited:
    """Part 4's route: A's flow (and C's) calls it; the workers' environment names it."""

    flow_id: int
    rate: int
    env: dict[str, str] = field(default_factory=dict)


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


def _accept_one(bench: Any, scope: str, flow_id: int | None = None) -> tuple[uuid.UUID, float]:
    """One acceptance of tenant `scope`, as the API leaves it, with its NOTIFY; its id and the
    database's clock at its last statement."""
    request_id, execution_id = uuid.uuid4(), uuid.uuid4()
    flow_id = flow_id or bench.flow_id
    conn = bench.runtime
    with conn.transaction():
        conn.execute(
            "INSERT INTO request (id, flow_id, owner, scope, data, state, revision, version) "
            "VALUES (%s, %s, 'bench', %s, '{}', 'DRAFT', 2, 2)",
            [request_id, flow_id, scope],
        )
        conn.execute(
            "INSERT INTO execution (id, request_id, flow_id, transition_id, accepted_revision, "
            "actor_snapshot) VALUES (%s, %s, %s, 'go', 2, '{}')",
            [execution_id, request_id, flow_id],
        )
        conn.execute(
            "UPDATE request SET blocked_by_id = %s WHERE id = %s", [execution_id, request_id]
        )
        notified = conn.execute(NOTIFY_AND_CLOCK, {"execution_id": str(execution_id)}).fetchone()
    return execution_id, float(notified[1])


def _steps(bench: Any, accepted: dict[uuid.UUID, float], marks: Path) -> tuple[list[float], dict]:
    """B's acceptance-to-finish latencies, and where its milliseconds went (module docstring):
    each step's median, and the slowest execution's steps."""
    called: dict[str, float] = {}
    for line in marks.read_text().splitlines():
        execution_id, mark = line.split()
        called[execution_id] = float(mark)
    rows = bench.runtime.execute(STEPS, {"ids": list(accepted)}).fetchall()
    latencies = [float(row[5]) - float(row[1]) for row in rows]
    split: list[dict[str, float]] = []
    for execution_id, created, claimed, started, saved, finished in rows:
        call = called.get(str(execution_id))
        if call is None:
            continue
        at = [float(created), accepted[execution_id], float(claimed), float(started), call]
        at += [float(saved), float(finished)]
        split.append({name: at[i + 1] - at[i] for i, name in enumerate(STEP_NAMES)})
    if not split:
        return latencies, {}
    slowest = max(split, key=lambda s: sum(s.values()))
    return latencies, {
        "p50_ms": {name: _ms(statistics.median(s[name] for s in split)) for name in STEP_NAMES},
        "slowest_ms": {name: _ms(slowest[name]) for name in STEP_NAMES},
    }


def drain(
    bench: Any,
    *,
    fairness: str,
    backlog: int,
    processes: int,
    concurrency: int,
    seconds: float,
    limited: Limited | None = None,
) -> dict:
    """B at 2/s beside A's backlog (for `seconds` when there is none) under `fairness`; with
    `limited`, A's backlog calls its route, and C trickles onto it too."""
    label = f"fair-{fairness}-{backlog}" + (f"-{limited.rate}per-s" if limited else "")
    bench.owner.execute("VACUUM ANALYZE request, execution, action_execution, audit_event")
    # A fresh limiter: no route declared by an earlier run's workers (a worker that enforces no
    # limit on a route another live worker declared refuses to start).
    bench.owner.execute(CLEAR_LIMITS)
    b_scope = "bench-b-" + uuid.uuid4().hex[:8]
    c_scope = "bench-c-" + uuid.uuid4().hex[:8]
    b_ids: dict[uuid.UUID, float] = {}  # B's executions, each with its acceptance's last clock
    c_ids: list[uuid.UUID] = []
    marks = bench.base / f"{label}.marks"
    marks.write_text("")
    env = {
        "WORKER_FAIRNESS": fairness,
        "BENCH_PICKUP_FILE": str(marks),
        "BENCH_MARK_SCOPE": b_scope,
        **(limited.env if limited else {}),
    }
    with ExitStack() as stack:
        bench.start_workers(
            processes, stack, label, concurrency, env=env, command=("bench/marked_worker.py",)
        )
        a_flow = limited.flow_id if limited else None
        a_scope, committed = bench.enqueue(backlog, a_flow) if backlog else (None, time.time())
        started = time.monotonic()
        next_b, next_c = started, started if limited else float("inf")
        while True:
            now = time.monotonic()
            if now > started + RUN_TIMEOUT:
                raise RuntimeError(f"{label}: not drained in {RUN_TIMEOUT}s")
            if a_scope is None:
                if now >= started + seconds:
                    break
            elif not bench.runtime.execute(TENANT_LIVE, [a_scope]).fetchone()[0]:
                break
            if now >= next_b:
                execution_id, notified_at = _accept_one(bench, b_scope)
                b_ids[execution_id] = notified_at
                next_b += 1 / B_RATE
            if limited is not None and now >= next_c:
                c_ids.append(_accept_one(bench, c_scope, limited.flow_id)[0])
                next_c += C_EVERY
            time.sleep(min(0.05, max(0.0, min(next_b, next_c) - time.monotonic())))
        deadline = time.monotonic() + RUN_TIMEOUT
        for scope in (b_scope, c_scope):
            while bench.runtime.execute(TENANT_LIVE, [scope]).fetchone()[0]:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{label}: tenant {scope} not finished")
                time.sleep(0.05)
    latencies, steps = _steps(bench, b_ids, marks)
    result: dict[str, Any] = {
        "fairness": fairness,
        "backlog": backlog,
        "processes": processes,
        "concurrency": concurrency,
        "b_requests": len(b_ids),
        "b_p50_ms": _ms(float(statistics.median(latencies))),
        "b_slowest_ms": _ms(float(max(latencies))),
        "b_steps": steps,
    }
    if a_scope is not None:
        done, last = bench.runtime.execute(LAST_FINISH, [a_scope]).fetchone()
        elapsed = last.timestamp() - committed
        result["a_executions_per_second"] = round(done / elapsed, 1)
    if limited is not None:
        waits = [float(r[0]) for r in bench.runtime.execute(GRANTED, {"ids": c_ids}).fetchall()]
        result.update(
            rate=limited.rate,
            c_requests=len(c_ids),
            c_wait_p50_ms=_ms(statistics.median(waits)) if waits else None,
            c_wait_slowest_ms=_ms(max(waits)) if waits else None,
        )
    print(f"  {label}: {result}", flush=True)
    return result


def _limited(bench: Any, provider: MeteredProvider, rate: int) -> Limited:
    """Part 4's flow (one action on the rate-limited route) and the workers' integrations."""
    key = LIMITED_FLOW["key"]
    found = bench.owner.execute("SELECT id FROM flow WHERE key = %s", [key]).fetchone()
    if found is None:
        found = bench.owner.execute(
            "INSERT INTO flow (key, version, definition, checksum) VALUES (%s, 1, %s, 'x') "
            "RETURNING id",
            [key, Jsonb(LIMITED_FLOW)],
        ).fetchone()
    path = Path(bench.base) / "integrations-fairness.toml"
    path.write_text(INTEGRATIONS.format(url=provider.url(), rate=rate))
    # SIMULATION_MODE stays on: B's flow is NO_OP's.
    return Limited(found[0], rate, {"INTEGRATIONS_FILE": str(path)})


def run(
    bench: Any,
    *,
    backlog: int,
    processes: int,
    concurrency: int,
    seconds: float,
    limited_backlog: int = 0,
    rate: int = 0,
) -> dict:
    shape = {"processes": processes, "concurrency": concurrency, "seconds": seconds}
    report: dict[str, Any] = {"claim": claim_cost(bench, backlog, bench.args.claims)}
    # One drain of a quarter of the backlog first, not reported: the first large drain on a fresh
    # cluster cost 0.88 ms (queue) and 0.99 ms (tenant) of PostgreSQL CPU per execution, the ones
    # after it 0.47-0.59 in either order, so the order measured first took a penalty.
    print("  warm-up (not reported):", flush=True)
    drain(bench, fairness="queue", backlog=backlog // 4, **shape)
    report["b_alone"] = drain(bench, fairness="tenant", backlog=0, **shape)
    for fairness in ("tenant", "queue"):
        report[fairness] = drain(bench, fairness=fairness, backlog=backlog, **shape)
    if limited_backlog and rate:
        with MeteredProvider(delay=0.0) as provider:
            limited = _limited(bench, provider, rate)
            for fairness in ("tenant", "queue"):
                report[f"limited_{fairness}"] = drain(
                    bench, fairness=fairness, backlog=limited_backlog, limited=limited, **shape
                )
        bench.owner.execute(CLEAR_LIMITS)  # for the sections after this one
    return report


def summary_lines(report: dict) -> list[str]:
    fair = report.get("fairness")
    if not fair:
        return []
    claim, alone, tenant, queue = fair["claim"], fair["b_alone"], fair["tenant"], fair["queue"]

    def ratio(a: float, b: float) -> str:
        return f"{a / b:.2f}x" if b else "n/a"

    def steps(run: dict) -> str:
        split = run.get("b_steps", {}).get("p50_ms", {})
        return ", ".join(f"{name} {split[name]}" for name in STEP_NAMES if name in split)

    lines = [
        f"  claim p50/p99 beside a backlog of {claim['backlog']} ({claim['tenants']} tenants): "
        f"queue {claim['queue']['p50_ms']} / {claim['queue']['p99_ms']} ms, tenant "
        f"{claim['tenant']['p50_ms']} / {claim['tenant']['p99_ms']} ms",
        f"  tenant B (2/s) p50 / slowest acceptance-to-finish: alone {alone['b_p50_ms']} / "
        f"{alone['b_slowest_ms']} ms; beside A's backlog of {tenant['backlog']} under tenant "
        f"{tenant['b_p50_ms']} / {tenant['b_slowest_ms']} ms "
        f"({ratio(tenant['b_slowest_ms'], alone['b_slowest_ms'])} of alone), under queue "
        f"{queue['b_p50_ms']} / {queue['b_slowest_ms']} ms",
        f"  B's steps at p50 (ms), alone: {steps(alone)}; beside the backlog under tenant: "
        f"{steps(tenant)}",
        f"  tenant A's backlog: {tenant['a_executions_per_second']} executions/s under tenant, "
        f"{queue['a_executions_per_second']} under queue "
        f"({ratio(tenant['a_executions_per_second'], queue['a_executions_per_second'])})",
    ]
    if "limited_tenant" in fair:
        lt, lq = fair["limited_tenant"], fair["limited_queue"]
        lines += [
            f"  A's backlog of {lt['backlog']} behind rate_limit {lt['rate']}/s: B p50 / slowest "
            f"{lt['b_p50_ms']} / {lt['b_slowest_ms']} ms under tenant "
            f"({ratio(lt['b_slowest_ms'], alone['b_slowest_ms'])} of alone), "
            f"{lq['b_p50_ms']} / {lq['b_slowest_ms']} under queue; A "
            f"{lt['a_executions_per_second']} / {lq['a_executions_per_second']} executions/s "
            f"({ratio(lt['a_executions_per_second'], lq['a_executions_per_second'])})",
            f"  tenant C on A's route, acceptance to its grant p50 / slowest: "
            f"{lt['c_wait_p50_ms']} / {lt['c_wait_slowest_ms']} ms under tenant, "
            f"{lq['c_wait_p50_ms']} / {lq['c_wait_slowest_ms']} ms under queue",
        ]
    return lines
