"""The webhooks' benchmark (bench/worker.py's `webhooks` section), against receivers on
127.0.0.1 in this process that answer 200 at once and note when each event arrived.

A receiver stands for a customer's server on another machine: its CPU is not the deployment's,
yet here it runs on the same two cores as the worker and PostgreSQL. So the section measures
with two, one after the other, and reports both, each with its own CPU per event:
- `aiohttp`: aiohttp's web server on asyncio's loop, reading each body as JSON (the receiver of
  the runs before; about 0.08 ms of CPU per event here);
- `lean`: a bare HTTP/1.1 protocol on uvloop that reads the header block and the body's length,
  notes the event id and answers (a fraction of that), so the figure is nearer the deployment's
  own cost.

1. Latency at light load (the lean receiver): one runworker (1 x 10) with a subscription on
   every event; an execution accepted every GAP_SECONDS; for each, the receiver's arrival time
   minus the commit of its ending (`finished_at`, the database's clock on the same host): p50
   and p99.
2. Throughput, no-op at 1 x 10, --executions of them, without a subscription, then with one on
   every event to each receiver: executions/s (until the last one finished), how long after that
   the last delivery arrived, and the CPU per execution of the worker, PostgreSQL and the
   receiver in each run; the differences from the run without are the costs per delivered event.
"""

import asyncio
import json
import threading
import time
import uuid
from contextlib import ExitStack
from typing import Any, cast

import uvloop
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
SELECT w.id::text, extract(epoch FROM e.finished_at)
  FROM webhook_event AS w
  JOIN execution AS e ON e.id = w.execution_id
 WHERE w.tenant = %(tenant)s AND e.finished_at IS NOT NULL
"""
WINDOW = """
SELECT count(*) FILTER (WHERE status = 'SUCCEEDED'), max(finished_at)
  FROM execution
 WHERE scope = %(tenant)s
"""


class Receiver:
    """aiohttp's web server on asyncio's loop: answers every POST 200 and notes when each event
    arrived (by the body's id, read as JSON)."""

    name = "aiohttp"

    def __init__(self) -> None:
        self.arrived: dict[str, float] = {}
        self._lock = threading.Lock()
        self._loop = LoopThread(name="bench-receiver")
        self._runner: web.AppRunner | None = None
        self.port = self._loop.call(self._start())

    async def _answer(self, request: web.Request) -> web.Response:
        body = json.loads(await request.read())
        with self._lock:
            self.arrived.setdefault(body["id"], time.time())
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

    def cpu_seconds(self) -> float:
        """CPU time of the receiver's thread so far."""
        return self._loop.call(_thread_time())

    def close(self) -> None:
        if self._runner is not None:
            self._loop.call(self._runner.cleanup())
        self._loop.stop()


ANSWER = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Type: text/plain\r\n\r\nok"


class _LeanProtocol(asyncio.Protocol):
    """HTTP/1.1 as the delivery loop speaks it (keep-alive, one request at a time, a
    Content-Length body): each request's header block, then its body, then 200."""

    def __init__(self, receiver: "LeanReceiver") -> None:
        self.receiver = receiver
        self.buffer = b""
        self.transport = cast(asyncio.Transport, None)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        buffer = self.buffer + data if self.buffer else data
        while (end := buffer.find(b"\r\n\r\n")) >= 0:
            length, event = 0, ""
            for line in buffer[:end].split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                name = name.strip().lower()
                if name == b"content-length":
                    length = int(value)
                elif name == b"orquestador-event-id":
                    event = value.strip().decode()
            if len(buffer) < end + 4 + length:
                break
            buffer = buffer[end + 4 + length :]
            self.receiver.note(event)
            self.transport.write(ANSWER)
        self.buffer = buffer


class LeanReceiver:
    """A bare HTTP/1.1 receiver on uvloop in a thread of its own: answers every POST 200 and
    notes when each event arrived (by its Orquestador-Event-Id), and little else."""

    name = "lean"

    def __init__(self) -> None:
        self.arrived: dict[str, float] = {}
        self._lock = threading.Lock()
        self._loop = uvloop.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="bench-lean-receiver", daemon=True
        )
        self._thread.start()
        self._server: asyncio.Server | None = None
        self.port = self._call(self._start())

    def _call(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(10)

    async def _start(self) -> int:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: _LeanProtocol(self), "127.0.0.1", 0)
        return self._server.sockets[0].getsockname()[1]

    def note(self, event: str) -> None:
        with self._lock:
            self.arrived.setdefault(event, time.time())

    def count(self) -> int:
        with self._lock:
            return len(self.arrived)

    def cpu_seconds(self) -> float:
        """CPU time of the receiver's thread so far."""
        return self._call(_thread_time())

    def close(self) -> None:
        if self._server is not None:
            self._server.close()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)


async def _thread_time() -> float:
    return time.thread_time()


def _percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * p / 100))] if ordered else 0.0


def _subscribe(bench: Any, tenant: str, receiver: "Receiver | LeanReceiver") -> None:
    bench.owner.execute(
        SUBSCRIBE,
        {
            "tenant": tenant,
            "url": f"http://127.0.0.1:{receiver.port}/hook",
            "events": Jsonb(EVERY_EVENT),
        },
    )


def _wait_deliveries(receiver: "Receiver | LeanReceiver", n: int) -> float:
    deadline = time.monotonic() + DELIVERY_TIMEOUT
    while receiver.count() < n:
        if time.monotonic() > deadline:
            raise RuntimeError(f"webhooks: {receiver.count()}/{n} deliveries arrived")
        time.sleep(0.01)
    return time.time()


def latency(
    bench: Any,
    receiver: "Receiver | LeanReceiver",
    samples: int,
    command: tuple[str, ...] = ("manage.py", "runworker"),
) -> dict:
    tenant = f"hooks-{uuid.uuid4().hex[:8]}"
    _subscribe(bench, tenant, receiver)
    start_count = receiver.count()
    with ExitStack() as stack:
        bench.start_workers(1, stack, "webhooks-latency", env=SETTINGS, command=command)
        for _ in range(samples):
            with bench.owner.transaction():
                bench.owner.execute(ENQUEUE, {"flow_id": bench.flow_id, "tenant": tenant, "n": 1})
                bench.owner.execute(NO_NESTED_LOOP)
                bench.owner.execute(BLOCK, {"tenant": tenant})
                bench.owner.execute(sql.NOTIFY_WORK, {"execution_id": tenant})
            time.sleep(GAP_SECONDS)  # the light load's pace, not a wait for a condition
        _wait_deliveries(receiver, start_count + samples)
    finished = dict(bench.owner.execute(FINISHED, {"tenant": tenant}).fetchall())
    gaps = [receiver.arrived[e] - float(at) for e, at in finished.items() if e in receiver.arrived]
    result = {
        "receiver": receiver.name,
        "samples": len(gaps),
        "delivery_after_commit_p50_ms": round(_percentile(gaps, 50) * 1000, 2),
        "delivery_after_commit_p99_ms": round(_percentile(gaps, 99) * 1000, 2),
    }
    print(f"  webhooks latency: {result}", flush=True)
    return result


def throughput(
    bench: Any,
    receiver: "Receiver | LeanReceiver | None",
    n: int,
    command: tuple[str, ...] = ("manage.py", "runworker"),
) -> dict:
    """--executions no-op at 1 x 10: with a subscription on every event to `receiver`, or,
    without one, none; the worker run by `command` (another tree's, for an A/B)."""
    tenant = f"hooks-{uuid.uuid4().hex[:8]}"
    subscribed = receiver is not None
    if receiver is not None:
        _subscribe(bench, tenant, receiver)
    start_count = receiver.count() if receiver is not None else 0
    label = f"webhooks-on-{receiver.name}" if receiver is not None else "webhooks-off"
    bench.owner.execute("VACUUM ANALYZE request, execution, webhook_delivery, webhook_event")
    with ExitStack() as stack:
        workers = bench.start_workers(1, stack, label, 10, SETTINGS, command)
        connections = bench._worker_connections()
        cpu = [bench._cpu_seconds(p.pid) for p in workers]
        server_cpu, commits = bench._server_cpu_seconds(), bench._commits()
        receiver_cpu = receiver.cpu_seconds() if receiver is not None else 0.0
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
        delivered_at = None
        if receiver is not None:
            delivered_at = _wait_deliveries(receiver, start_count + n)
        cpu_total = sum(
            bench._cpu_seconds(p.pid) - before for p, before in zip(workers, cpu, strict=True)
        )
        server_cpu = bench._server_cpu_seconds() - server_cpu
        commits = bench._commits() - commits
        receiver_cpu = receiver.cpu_seconds() - receiver_cpu if receiver is not None else 0.0
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
    if delivered_at is not None and receiver is not None:
        result["receiver"] = receiver.name
        result["receiver_cpu_ms_per_execution"] = round(receiver_cpu / n * 1000, 3)
        result["last_delivery_after_last_finish_ms"] = round(
            (delivered_at - last.timestamp()) * 1000, 1
        )
        result["deliveries_per_second"] = round(n / (delivered_at - committed), 1)
    print(f"  {label}: {result}", flush=True)
    return result


def compared(on: dict, off: dict) -> dict:
    """One receiver's run against the run without a subscription: the ratio, and what each
    delivered event cost the worker, PostgreSQL and the receiver."""

    def more(key: str) -> float:
        return round(on[key] - off[key], 3)

    return {
        "throughput_ratio": round(on["executions_per_second"] / off["executions_per_second"], 2),
        "cpu_ms_per_delivered_event": more("worker_cpu_ms_per_execution"),
        "postgres_cpu_ms_per_delivered_event": more("postgres_cpu_ms_per_execution"),
        "receiver_cpu_ms_per_event": on["receiver_cpu_ms_per_execution"],
        "commits_per_delivered_event": round(
            on["commits_per_execution"] - off["commits_per_execution"], 2
        ),
    }


def run(bench: Any, *, executions: int, samples: int) -> dict:
    receivers = {"aiohttp": Receiver(), "lean": LeanReceiver()}
    try:
        report: dict[str, Any] = {"latency": latency(bench, receivers["lean"], samples)}
        off = throughput(bench, None, executions)
        report["off"] = off
        # The lean receiver's run last: whatever the outbox's growth costs a later run, it
        # costs the headline figure, not the other one.
        for name in ("aiohttp", "lean"):
            on = throughput(bench, receivers[name], executions)
            report[f"on_{name}"] = on
            report[name] = compared(on, off)
        # The headline figures: the lean receiver's (the deployment's own cost).
        report.update(on=report["on_lean"], **report["lean"])
        for name in ("aiohttp", "lean"):
            got = report[name]
            print(
                f"  webhooks ({name} receiver): {got['throughput_ratio']}x of no-op throughput "
                f"with a subscription on every event; per delivered event "
                f"{got['cpu_ms_per_delivered_event']} ms worker CPU, "
                f"{got['postgres_cpu_ms_per_delivered_event']} ms PostgreSQL, "
                f"{got['receiver_cpu_ms_per_event']} ms the receiver's",
                flush=True,
            )
        return report
    finally:
        for receiver in receivers.values():
            receiver.close()


def summary_lines(report: dict) -> list[str]:
    lat = report["latency"]
    lines = [
        f"  webhooks: delivery after commit p50 {lat['delivery_after_commit_p50_ms']} ms, p99 "
        f"{lat['delivery_after_commit_p99_ms']} ms (light load); no-op 1x10 without a "
        f"subscription {report['off']['executions_per_second']}/s"
    ]
    for name in ("lean", "aiohttp"):
        on, got = report[f"on_{name}"], report[name]
        lines.append(
            f"    with one on every event, {name} receiver: {on['executions_per_second']}/s "
            f"({got['throughput_ratio']}x); per delivered event worker "
            f"{got['cpu_ms_per_delivered_event']} ms, PostgreSQL "
            f"{got['postgres_cpu_ms_per_delivered_event']} ms, receiver "
            f"{got['receiver_cpu_ms_per_event']} ms CPU; last delivery "
            f"{on['last_delivery_after_last_finish_ms']} ms after the last finish"
        )
    return lines
