"""Where a delivered webhook event's CPU goes, part by part, without a worker.

    .venv/bin/python bench/webhookparts.py [--rounds 3] [--executions 3000] [--attempts 4000]
        [--variants SQL_FILE]

1. PostgreSQL (one throwaway cluster, autocommit as a runworker's connection): --executions
   no-op executions of a tenant with a subscription on every event, ended five per statement
   (the outbox trigger writes an event and a delivery for each), then their deliveries claimed
   thirty at a time with WEBHOOK_DELIVERIES_CLAIM and written delivered with
   WEBHOOK_DELIVERIES_RECORD. The backend's CPU (/proc/PID/schedstat) per execution ended and per
   delivery claimed and recorded; the same ending without the trigger gives the trigger's share.
   --variants names a JSON file {name: [DDL before, DDL after]}: each variant runs in every round
   beside `base` (a dropped index, another trigger), the order reversed every other round.
2. The worker's attempt (this process, uvloop): --attempts POSTs through the delivery loop's
   WebhookSender, thirty at a time as a claim starts them, each signed as the loop signs it, to
   bench/webhooks.py's lean receiver in a child process; the loop thread's CPU per attempt.

Medians over --rounds. The parts do not add up to bench/webhookcost.py's figures (there the
statements are shared by larger groups and the machine is loaded); they say which part is large.
"""

import argparse
import asyncio
import json
import multiprocessing
import os
import statistics
import sys
import time
import uuid
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import django
import psycopg
import uvloop
from psycopg.types.json import Jsonb

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import webhooks  # noqa: E402
from bench.worker import Bench  # noqa: E402
from executions import sql  # noqa: E402

FINISH = """
UPDATE execution SET status = 'SUCCEEDED', finished_at = clock_timestamp()
 WHERE id = ANY(%(ids)s)
"""
NO_TRIGGER = (
    "ALTER TABLE execution DISABLE TRIGGER webhook_outbox_write",
    "ALTER TABLE execution ENABLE TRIGGER webhook_outbox_write",
)
FINISH_BATCH = 5
CLAIM_BATCH = 30
SECRET = "whsec_" + "b" * 43  # the bench's own
BODY = json.dumps(
    {
        "id": str(uuid.uuid4()),
        "type": "execution.succeeded",
        "createdAt": "2026-12-06T08:00:00.123456Z",
        "data": {
            "id": str(uuid.uuid4()),
            "requestId": str(uuid.uuid4()),
            "transitionId": "go",
            "status": "SUCCEEDED",
            "outcome": None,
            "targetState": None,
            "errorCode": None,
            "attempts": 1,
            "createdAt": "2026-12-06T08:00:00.012345Z",
            "finishedAt": "2026-12-06T08:00:00.123456Z",
        },
    },
    separators=(",", ":"),
).encode()


def _on_cpu(pid: int) -> int:
    """A process's time on a CPU so far, in nanoseconds."""
    return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0])


def postgres_run(bench: Bench, n: int, trigger: bool) -> dict[str, float]:
    """µs of the backend's CPU per execution ended and per delivery claimed and recorded."""
    tenant = f"parts-{uuid.uuid4().hex[:8]}"
    bench.owner.execute(
        webhooks.SUBSCRIBE,
        {
            "tenant": tenant,
            "url": "https://127.0.0.1:9/hook",
            "events": Jsonb(webhooks.EVERY_EVENT),
        },
    )
    with bench.owner.transaction():
        bench.owner.execute(webhooks.ENQUEUE, {"flow_id": bench.flow_id, "tenant": tenant, "n": n})
    bench.owner.execute("VACUUM ANALYZE execution, webhook_delivery, webhook_event")
    ids = [
        row[0] for row in bench.owner.execute("SELECT id FROM execution WHERE scope = %s", [tenant])
    ]
    if not trigger:
        bench.owner.execute(NO_TRIGGER[0])
    try:
        with psycopg.connect(
            bench.db["DATABASE_URL"], autocommit=True, application_name="orquestador-worker"
        ) as conn:
            pid = conn.info.backend_pid
            start = _on_cpu(pid)
            for index in range(0, n, FINISH_BATCH):
                conn.execute(FINISH, {"ids": ids[index : index + FINISH_BATCH]})
            ended = _on_cpu(pid)
            claim = record = delivered = 0
            while True:
                before = _on_cpu(pid)
                rows = conn.execute(
                    sql.WEBHOOK_DELIVERIES_CLAIM, {"limit": CLAIM_BATCH, "hold_seconds": 15.0}
                ).fetchall()
                claimed = _on_cpu(pid)
                claim += claimed - before
                if not rows:
                    break
                items = [
                    {
                        "id": r[0],
                        "token": r[1],
                        "delivered": True,
                        "code": 200,
                        "error": None,
                        "body": "ok",
                        "delay": 0.0,
                    }
                    for r in rows
                ]
                written = conn.execute(
                    sql.WEBHOOK_DELIVERIES_RECORD,
                    {"items": Jsonb(items), "max_age_seconds": 86400.0},
                ).fetchall()
                record += _on_cpu(pid) - claimed
                delivered += len(written)
    finally:
        if not trigger:
            bench.owner.execute(NO_TRIGGER[1])
    if delivered not in (0, n):
        raise RuntimeError(f"{delivered}/{n} deliveries recorded")
    got = {"end_us_per_execution": (ended - start) / n / 1000}
    if trigger:
        got["claim_us_per_delivery"] = claim / n / 1000
        got["record_us_per_delivery"] = record / n / 1000
    return got


def _serve(queue: Any) -> None:
    receiver = webhooks.LeanReceiver()
    queue.put(receiver.port)
    time.sleep(3600)


async def attempts(port: int, n: int) -> float:
    """µs of this thread's CPU per attempt through WebhookSender, thirty at a time."""
    from executions.webhooks.sender import WebhookSender
    from executions.webhooks.signing import signature_header

    sender = WebhookSender(timeout_seconds=10.0, allow_http=True, allow_private_networks=True)
    url = f"http://127.0.0.1:{port}/hook"

    async def one(index: int) -> None:
        headers = {
            "Orquestador-Event-Id": str(uuid.UUID(int=index)),
            "Orquestador-Signature": signature_header(
                secrets=[SECRET], timestamp=int(time.time()), body=BODY
            ),
        }
        attempt = await sender.send(url=url, body=BODY, headers=headers)
        if not attempt.delivered:
            raise RuntimeError(f"attempt failed: {attempt}")

    await asyncio.gather(*(one(i) for i in range(CLAIM_BATCH)))  # connections open
    start = time.thread_time()
    for first in range(0, n, CLAIM_BATCH):
        await asyncio.gather(*(one(i) for i in range(first, first + CLAIM_BATCH)))
    spent = time.thread_time() - start
    await sender.close()
    return spent / n * 1e6


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--executions", type=int, default=3000)
    parser.add_argument("--attempts", type=int, default=4000)
    parser.add_argument("--variants", default="")
    args = parser.parse_args(argv)
    variants: dict[str, list[str]] = {"base": ["", ""]}
    if args.variants:
        variants.update(json.loads(Path(args.variants).read_text()))
    runs: dict[str, list[dict[str, float]]] = {}
    with ExitStack() as stack:
        context = multiprocessing.get_context("fork")  # before the cluster's connections
        queue = context.Queue()
        child = context.Process(target=_serve, args=(queue,), daemon=True)
        child.start()
        stack.callback(child.kill)
        port = queue.get(timeout=30)
        bench = Bench.scratch(stack, "webhookparts.", concurrency=10)
        os.environ.update(bench.env)  # the sender's module reads the settings
        django.setup()
        for index in range(args.rounds):
            names = list(variants) if index % 2 == 0 else list(variants)[::-1]
            for name in names:
                before, after = variants[name]
                if before:
                    bench.owner.execute(before)
                try:
                    got = postgres_run(bench, args.executions, trigger=True)
                finally:
                    if after:
                        bench.owner.execute(after)
                print(f"round {index + 1}, {name}: {_rounded(got)}", flush=True)
                runs.setdefault(name, []).append(got)
            got = postgres_run(bench, args.executions, trigger=False)
            got["attempt_us"] = uvloop.run(attempts(port, args.attempts))
            print(f"round {index + 1}, without the trigger; attempt: {_rounded(got)}", flush=True)
            runs.setdefault("without the trigger; attempt", []).append(got)
    print("medians:")
    for name, got in runs.items():
        medians = {key: statistics.median(g[key] for g in got) for key in got[0]}
        print(f"  {name}: {_rounded(medians)}", flush=True)
    return 0


def _rounded(got: dict[str, float]) -> dict[str, float]:
    return {key: round(value, 1) for key, value in got.items()}


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
