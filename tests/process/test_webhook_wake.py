"""An event another writer commits (here a cancellation, as the API makes one) reaches an idle
runworker's delivery loop through its listening connection: delivered within a fraction of the
one-second poll, every time, by a real runworker to a real receiver on 127.0.0.1."""

import time

import pytest

from executions.webhooks.models import WebhookSubscription
from executions.webhooks.signing import secret_new
from tests.support.receiver import Receiver
from tests.support.worker import WorkerProcess, create_flow, enqueue, flow_definition, wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.process]

SETTINGS = {
    "WEBHOOK_ALLOW_HTTP": "true",
    "WEBHOOK_ALLOW_PRIVATE_NETWORKS": "true",
    "WORKER_POLL_MS": "30000",  # the claim loop never claims the test's executions by polling
}
# Well under the delivery loop's one-second poll: five in a row this fast by polling alone
# would be chance (0.4 ** 5, about 1 %).
FAST_SECONDS = 0.4
ROUNDS = 5
WARM_UP_TRIES = 10


def cancelled_and_delivered(conn, flow_id: int, receiver: Receiver) -> float:
    """Cancel a new execution (the API's write: no runworker of ours in it); seconds until its
    event arrives."""
    execution_id = enqueue(conn, flow_id, notify=False).execution_id
    arrived = len(receiver.received)
    started = time.monotonic()
    conn.execute(
        "UPDATE execution SET status = 'CANCELLED', finished_at = clock_timestamp() WHERE id = %s",
        [execution_id],
    )
    wait_until(lambda: len(receiver.received) > arrived, timeout=10, what="the delivery")
    elapsed = time.monotonic() - started
    assert receiver.received[-1].body["data"]["id"] == str(execution_id)
    return elapsed


def test_webhooks__another_writers_event_is_delivered_without_waiting_for_the_poll(
    process_env, runtime_conn, tmp_path
):
    flow_id = create_flow(runtime_conn, flow_definition([]))
    with Receiver() as receiver:
        WebhookSubscription.objects.create(
            tenant="acme", url=receiver.url, events=["execution.cancelled"], secret=secret_new()
        )
        with WorkerProcess(process_env, tmp_path / "worker.log", **SETTINGS) as worker:
            worker.wait_started()
            # Until it listens: one fast delivery says the announcement got through.
            for _ in range(WARM_UP_TRIES):
                if cancelled_and_delivered(runtime_conn, flow_id, receiver) < FAST_SECONDS:
                    break
            else:
                raise AssertionError(f"no delivery within {FAST_SECONDS}s: {worker.output()}")
            took = [cancelled_and_delivered(runtime_conn, flow_id, receiver) for _ in range(ROUNDS)]
    assert max(took) < FAST_SECONDS, took
