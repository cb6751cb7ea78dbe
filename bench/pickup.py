"""The `pickup` section of bench/worker.py: acceptance commit -> adapter call at light load, ours
beside Procrastinate's.

Ours: one idle worker (bench/marked_worker.py: runworker whose NO_OP adapter notes time.time()
as it is called); executions accepted one at a time, about 50 per second; for each, acceptance
commit -> adapter call, both on the host's clock, and the claim (execution.started_at, the
database clock) as an indication. Theirs: defer commit -> task start, the task taking
time.time() first (bench/procrastinate_worker.py's `pickup`), one worker of one slot.
"""

import asyncio
import time
import uuid
from contextlib import ExitStack
from typing import TYPE_CHECKING, Any

import psycopg

from bench.common import (
    LIVE_ANY,
    PICKUP_GAP_SECONDS,
    POLL_SECONDS,
    RUN_TIMEOUT,
    ms,
    percentile,
    ratio,
)
from executions import sql  # plain SQL constants, no Django needed

if TYPE_CHECKING:
    from bench.worker import Bench


def ours(bench: "Bench", samples: int) -> dict:
    """Acceptance commit -> adapter call: the client's clock just after the acceptance
    commits, and the worker's (bench/marked_worker.py) as its NO_OP adapter is called."""
    accepted: dict[uuid.UUID, float] = {}
    marks_file = bench.base / "pickup.marks"
    marks_file.touch()
    with ExitStack() as stack:
        bench.start_workers(
            1,
            stack,
            "pickup",
            env={"BENCH_PICKUP_FILE": str(marks_file)},
            command=("bench/marked_worker.py",),
        )
        for _ in range(samples):
            request_id, execution_id = uuid.uuid4(), uuid.uuid4()
            with bench.runtime.transaction():
                bench.runtime.execute(
                    "INSERT INTO request (id, flow_id, owner, scope, data, state, revision, "
                    "version) VALUES (%s, %s, 'bench', 'pickup', '{}', 'DRAFT', 2, 2)",
                    [request_id, bench.flow_id],
                )
                bench.runtime.execute(
                    "INSERT INTO execution (id, request_id, flow_id, transition_id, "
                    "accepted_revision, actor_snapshot) VALUES (%s, %s, %s, 'go', 2, '{}')",
                    [execution_id, request_id, bench.flow_id],
                )
                bench.runtime.execute(
                    "UPDATE request SET blocked_by_id = %s WHERE id = %s",
                    [execution_id, request_id],
                )
                bench.runtime.execute(sql.NOTIFY_WORK, {"execution_id": str(execution_id)})
            accepted[execution_id] = time.time()
            time.sleep(PICKUP_GAP_SECONDS)
        deadline = time.monotonic() + RUN_TIMEOUT
        while bench.runtime.execute(LIVE_ANY).fetchone()[0]:
            if time.monotonic() > deadline:
                raise RuntimeError("pickup: not finished")
            time.sleep(POLL_SECONDS)
    called = {
        uuid.UUID(execution_id): float(at)
        for execution_id, at in (line.split() for line in marks_file.read_text().splitlines())
    }
    rows = bench.runtime.execute(
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


async def _defer_one_by_one(app: Any, n: int, gap: float) -> dict[int, float]:
    """Defer n `pickup` jobs one at a time; each job id with the time its defer committed."""
    deferred = {}
    async with app.open_async():
        manager = app.configure_task("pickup")
        for _ in range(n):
            job_id = await manager.defer_async()
            deferred[job_id] = time.time()
            await asyncio.sleep(gap)
    return deferred


def theirs(bench: "Bench", samples: int) -> dict:
    """Defer commit -> task start, as `ours` measures acceptance commit -> adapter call."""
    app, dsn = bench.procrastinate.app()
    marks_file = bench.base / "procr-pickup.marks"
    marks_file.touch()
    with psycopg.connect(dsn, autocommit=True) as conn, ExitStack() as stack:
        bench.procrastinate.workers(
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


def summary_lines(report: dict) -> list[str]:
    if "pickup" not in report:
        return []
    pickup = report["pickup"]
    lines = [
        f"  pickup p50/p99 (claim): {pickup['claim_p50_ms']} / {pickup['claim_p99_ms']} ms; "
        f"acceptance commit -> adapter call: {pickup['adapter_call_p50_ms']} / "
        f"{pickup['adapter_call_p99_ms']} ms"
    ]
    if "procrastinate_pickup" in report:
        theirs = report["procrastinate_pickup"]
        lines.append(
            f"  Procrastinate pickup p50/p99: {theirs['task_start_p50_ms']} / "
            f"{theirs['task_start_p99_ms']} ms; ours / theirs: p50 "
            f"{ratio(pickup['adapter_call_p50_ms'], theirs['task_start_p50_ms'])}, p99 "
            f"{ratio(pickup['adapter_call_p99_ms'], theirs['task_start_p99_ms'])}"
        )
    return lines
