"""Webhook deliveries survive SIGKILL: real runworker processes deliver to a real receiver on
127.0.0.1 while they are killed mid-storm and replaced; every event of every execution arrives
at least once (the same event id each time it is sent again), none is lost, all end DELIVERED."""

import pytest

from executions.webhooks.models import WebhookSubscription
from executions.webhooks.signing import secret_new
from tests.support.receiver import Receiver
from tests.support.worker import (
    WorkerProcess,
    action,
    create_flow,
    enqueue,
    flow_definition,
    statuses,
    wait_until,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.process]

EXECUTIONS = 300
KILLS = 3
DEADLINE_SECONDS = 120
SETTINGS = {  # passed as a WorkerProcess's overrides, over its defaults
    "WEBHOOK_ALLOW_HTTP": "true",
    "WEBHOOK_ALLOW_PRIVATE_NETWORKS": "true",
    "WEBHOOK_TIMEOUT_SECONDS": "1",
    "WEBHOOK_RETRY_BASE_SECONDS": "0.1",
    "WORKER_CONCURRENCY": "10",
    "WORKER_BATCH": "10",
}


def event_ids(conn) -> set[str]:
    rows = conn.execute("SELECT id::text FROM webhook_event").fetchall()
    return {row[0] for row in rows}


def pending(conn) -> int:
    return conn.execute(
        "SELECT count(*) FROM webhook_delivery WHERE status <> 'DELIVERED'"
    ).fetchone()[0]


def progress(conn, ids) -> str:
    executions = dict(
        conn.execute(
            "SELECT status, count(*) FROM execution WHERE id = ANY(%s) GROUP BY 1", [ids]
        ).fetchall()
    )
    deliveries = dict(
        conn.execute("SELECT status, count(*) FROM webhook_delivery GROUP BY 1").fetchall()
    )
    return f"executions {executions}, deliveries {deliveries}"


def test_webhooks__every_event_delivered_at_least_once_through_sigkills(
    process_env, runtime_conn, tmp_path
):
    flow = create_flow(runtime_conn, flow_definition([action("n", "NO_OP")]))
    env = process_env
    with Receiver(delay=0.03) as receiver:
        WebhookSubscription.objects.create(
            tenant="acme",
            url=receiver.url,
            events=["execution.succeeded", "execution.failed"],
            secret=secret_new(),
        )
        ids = [enqueue(runtime_conn, flow).execution_id for _ in range(EXECUTIONS)]
        workers = [WorkerProcess(env, tmp_path / f"worker-{n}.log", **SETTINGS) for n in range(2)]
        try:
            for kill in range(KILLS):
                wait_until(
                    lambda k=kill: len(receiver.received) >= (k + 1) * EXECUTIONS // (KILLS + 2),
                    timeout=DEADLINE_SECONDS,
                    what="deliveries under way",
                )
                victim = workers.pop(0)
                victim.process.kill()  # SIGKILL, our own child by its pid
                victim.close()
                workers.append(WorkerProcess(env, tmp_path / f"worker-{2 + kill}.log", **SETTINGS))
            try:
                wait_until(
                    lambda: (
                        set(statuses(runtime_conn, ids)) <= {"SUCCEEDED", "FAILED"}
                        and pending(runtime_conn) == 0
                    ),
                    timeout=DEADLINE_SECONDS,
                    what="every delivery to be DELIVERED",
                )
            except AssertionError as exc:
                raise AssertionError(f"{exc}: {progress(runtime_conn, ids)}") from None
        finally:
            for worker in workers:
                worker.close()
    expected = event_ids(runtime_conn)
    # One event per execution (its ending: a run a kill cut short and a takeover finished, or
    # one the poison cap settled), none for a change that rolled back.
    assert len(expected) == EXECUTIONS
    received = [got.body["id"] for got in receiver.received]
    assert set(received) == expected  # none lost, none invented
    assert all(got.headers["Orquestador-Event-Id"] == got.body["id"] for got in receiver.received)
