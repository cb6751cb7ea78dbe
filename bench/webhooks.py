"""The webhooks' benchmark (bench/worker.py's `webhooks` section), against a receiver on
127.0.0.1 (aiohttp, its own event loop) that answers 200 at once and notes when each event
arrived.

1. Latency at light load: one runworker (1 x 10) with a subscription on every event; an
   execution accepted every PICKUP gap; for each, the receiver's arrival time minus the commit
   of its ending (`finished_at`, the database's clock on the same host): p50 and p99.
2. Throughput, no-op at 1 x 10, --executions of them, without a subscription and with one on
   every event: executions/s (until the last one finished), how long after that the last
   delivery arrived, and worker CPU per execution in each run; the difference is the CPU per
   delivered event.
"""

import json
import threading
import time
import uuid
from contextlib import ExitStack
from typing import Any

from aiohttp import web
from psycopg.types.json import Jsonb

from executions import sql
from executions.worker.loopthread import LoopThread

SETTINGS = {
    "WEBHOOK_ALLOW_HTTP": "true",  # the receiver is plain HTTP on loopback
    "WEBHOOK_ALLOW_PRIVATE_NETWORKS": "true",
}
EVERY_EVENT = [
    "execution.succeeded",
    "execution.failed",
    "execution.cancelled",
    "execution.compensated",
    "execution.reconciliation_required",
    "execution.suspended",
]
GAP_SECONDS = 0.02  # between acceptances in the light-load run
DELIVERY_TIMEOUT = 300  # seconds for every delivery to arrive

SUBSCRIBE = """
INSERT INTO webhook_subscription (id, tenant, url, events, description, secret,
                                  consecutive_failures, created_at)
VALUES (gen_random_uuid(), %(tenant)s, %(url)s, %(events)s, 'bench', 'whsec_bench', 0, now())
"""
# Two statements, as bench/worker.py's: rows a statement inserts are not visible to its own
# later parts (the execution's access trigger, the blocking UPDATE).
ENQUEUE = """
WITH r AS (
    INSERT INTO request (id, flow_id, owner, scope, data, state, revision, version)
    SELECT gen_random_uuid(), %(flow_id)s, 'bench', %(tenant)s, '{}', 'DRAFT', 2, 2
      FROM generate_series(1, %(n)s)
    RETURNING id
)
INSERT INTO execution (id, request_id, flow_id, transition_id, accepted_revision, actor_snapshot)
SELECT gen_random_uuid(), r.id, %(flow_id)s, 'go', 2, '{}' FROM r
"""
# The bench's own statements, not the worker's: planned from statistics of the run before (the
# table analysed with another tenant's rows, this one's counted as one), the join became a nested
# loop of every request by every execution, 3000 x 3000 rows in 5.9 s of PostgreSQL CPU inside the
# measured window of the run with a subscription. A hash join is forced in their transaction.
NO_NESTED_LOOP = "SET LOCAL enable_nestloop = off"
BLOCK = """
UPDATE request AS r SET blocked_by_id = e.id
  FROM execution AS e
 WHERE e.request_id = r.id AND r.scope = %(tenant)s AND r.blocked_by_id IS NULL
   AND e.status = 'PENDING'
"""
FINISHED = """
SELECT e.id::text, extract(epoch FROM e.finished_at)
  FROM execution AS e
 WHERE e.scope = %(tenant)s AND e.finished_at IS NOT NULL
"""
WINDOW = """
SELECT count(*) FILTER (WHERE status = 'SUCCEEDED'), max(finished_at)
  FROM execution
 WHERE scope = %(tenant)s
"""


class Receiver:
    """Answers every POST 200 and notes when each execution's event arrived."""

    def __init__(self) -> None:
        self.arrived: dict[str, float] = {}
        self._lock = threading.Lock()
        self._loop = LoopThread(name="bench-receiver")
        self._runner: web.AppRunner | None = None
        self.port = self._loop.call(self._start())

    async def _answer(self, request: web.Request) -> web.Response:
        body = json.loads(await request.read())
        with self._lock:
            self.arrived.setdefault(body["data"]["id"], time.time())
        return web.Response(text="ok")

    async def _start(self) -> int:
        app = web.Application()
        app.router.add_post("/hook", self._answer)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        return site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    def count(self) -> int:
        with self._lock:
            return len(self.arrived)

    def close(self) -> None:
        if self._runner is not None:
            self._loop.call(self._runner.cleanup())
        self._loop.stop()


def _percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * p / 100))] if ordered else 0.0


def _subscribe(bench: Any, tenant: str, receiver: Receiver) -> None:
    bench.owner.execute(
        SUBSCRIBE,
        {
            "tenant": tenant,
            "url": f"http://127.0.0.1:{receiver.port}/hook",
            "events": Jsonb(EVERY_EVENT),
        },
    )


def _wait_deliveries(receiver: Receiver, n: int) -> float:
    deadline = time.monotonic() + DELIVERY_TIMEOUT
    while receiver.count() < n:
        if time.monotonic() > deadline:
            raise RuntimeError(f"webhooks: {receiver.count()}/{n} deliveries arrived")
        time.sleep(0.01)
    return time.time()


def latency(bench: Any, receiver: Receiver, samples: int) -> dict:
    tenant = f"hooks-{uuid.uuid4().hex[:8]}"
    _subscribe(bench, tenant, receiver)
    with ExitStack() as stack:
        bench.start_workers(1, stack, "webhooks-latency", env=SETTINGS)
        for _ in range(samples):
            with bench.owner.transaction():
                bench.owner.execute(ENQUEUE, {"flow_id": bench.flow_id, "tenant": tenant, "n": 1})
                bench.owner.execute(NO_NESTED_LOOP)
                bench.owner.execute(BLOCK, {"tenant": tenant})
                bench.owner.execute(sql.NOTIFY_WORK, {"execution_id": tenant})
            time.sleep(GAP_SECONDS)  # the light load's pace, not a wait for a condition
        _wait_deliveries(receiver, samples)
    finished = dict(bench.owner.execute(FINISHED, {"tenant": tenant}).fetchall())
    gaps = [receiver.arrived[e] - float(at) for e, at in finished.items() if e in receiver.arrived]
    result = {
        "samples": len(gaps),
        "delivery_after_commit_p50_ms": round(_percentile(gaps, 50) * 1000, 2),
        "delivery_after_commit_p99_ms": round(_percentile(gaps, 99) * 1000, 2),
    }
    print(f"  webhooks latency: {result}", flush=True)
    return result


def throughput(bench: Any, receiver: Receiver, n: int, *, subscribed: bool) -> dict:
    tenant = f"hooks-{uuid.uuid4().hex[:8]}"
    if subscribed:
        _subscribe(bench, tenant, receiver)
    start_count = receiver.count()
    label = "webhooks-on" if subscribed else "webhooks-off"
    bench.owner.execute("VACUUM ANALYZE request, execution, webhook_delivery, webhook_event")
    with ExitStack() as stack:
        workers = bench.start_workers(1, stack, label, 10, SETTINGS)
        connections = bench._worker_connections()
        cpu = [bench._cpu_seconds(p.pid) for p in workers]
        server_cpu, commits = bench._server_cpu_seconds(), bench._commits()
        with bench.owner.transaction():
            bench.owner.execute(ENQUEUE, {"flow_id": bench.flow_id, "tenant": tenant, "n": n})
            bench.owner.execute(NO_NESTED_LOOP)
            bench.owner.execute(BLOCK, {"tenant": tenant})
            bench.owner.execute(sql.NOTIFY_WORK, {"execution_id": tenant})
        committed = time.time()
        deadline = time.monotonic() + DELIVERY_TIMEOUT
        while bench.owner.execute(
            "SELECT EXISTS (SELECT FROM execution WHERE scope = %(tenant)s"
            " AND status IN ('PENDING', 'RETRY_WAIT', 'RUNNING'))",
            {"tenant": tenant},
        ).fetchone()[0]:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{label}: not finished")
            connections = max(connections, bench._worker_connections())
            time.sleep(0.05)
        delivered_at = _wait_deliveries(receiver, start_count + n) if subscribed else None
        cpu_total = sum(
            bench._cpu_seconds(p.pid) - before for p, before in zip(workers, cpu, strict=True)
        )
        server_cpu = bench._server_cpu_seconds() - server_cpu
        commits = bench._commits() - commits
    done, last = bench.owner.execute(WINDOW, {"tenant": tenant}).fetchone()
    if done != n:
        raise RuntimeError(f"{label}: {done}/{n} executions")
    elapsed = last.timestamp() - committed
    result = {
        "subscribed": subscribed,
        "executions": n,
        "executions_per_second": round(n / elapsed, 1),
        "worker_cpu_ms_per_execution": round(cpu_total / n * 1000, 3),
        "postgres_cpu_ms_per_execution": round(server_cpu / n * 1000, 3),
        "commits_per_execution": round(commits / n, 2),
        "connections_per_process": connections,
    }
    if delivered_at is not None:
        result["last_delivery_after_last_finish_ms"] = round(
            (delivered_at - last.timestamp()) * 1000, 1
        )
        result["deliveries_per_second"] = round(n / (delivered_at - committed), 1)
    print(f"  {label}: {result}", flush=True)
    return result


def run(bench: Any, *, executions: int, samples: int) -> dict:
    receiver = Receiver()
    try:
        report = {"latency": latency(bench, receiver, samples)}
        off = throughput(bench, receiver, executions, subscribed=False)
        on = throughput(bench, receiver, executions, subscribed=True)
        report.update(
            off=off,
            on=on,
            throughput_ratio=round(on["executions_per_second"] / off["executions_per_second"], 2),
            cpu_ms_per_delivered_event=round(
                on["worker_cpu_ms_per_execution"] - off["worker_cpu_ms_per_execution"], 3
            ),
        )
        print(
            f"  webhooks: {report['throughput_ratio']}x of no-op throughput with a subscription "
            f"on every event; {report['cpu_ms_per_delivered_event']} ms worker CPU per delivered "
            "event",
            flush=True,
        )
        return report
    finally:
        receiver.close()


def summary_lines(report: dict) -> list[str]:
    lat = report["latency"]
    return [
        f"  webhooks: delivery after commit p50 {lat['delivery_after_commit_p50_ms']} ms, p99 "
        f"{lat['delivery_after_commit_p99_ms']} ms (light load); no-op 1x10 "
        f"{report['on']['executions_per_second']}/s with a subscription on every event vs "
        f"{report['off']['executions_per_second']}/s without ({report['throughput_ratio']}x), "
        f"{report['cpu_ms_per_delivered_event']} ms worker CPU per delivered event"
    ]
