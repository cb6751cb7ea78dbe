"""The delivery loop's cycles: results written together, not one statement per attempt; a later
event of an execution sent as soon as the earlier one's result is written; results of attempts
in flight written at stop; a receiver's answer kept whatever bytes it holds."""

import itertools
import time

import pytest

from executions.webhooks import delivery
from tests.support.receiver import Receiver, delivering, poke
from tests.support.worker import wait_until

from .conftest import deliveries, end, subscribe

pytestmark = pytest.mark.django_db(transaction=True)

EVENTS = 30


def test_cycles__results_ending_apart_share_statements(runtime_conn, runtime_dsn, accepted):
    turns = itertools.count()

    def answer(_got) -> int:
        # The receiver's own pace (a thread per connection): its answers leave about 5 ms
        # apart, so hardly two attempts end together.
        time.sleep(next(turns) % EVENTS * 0.005)
        return 200

    with Receiver(answer) as receiver, delivering(runtime_dsn) as deliverer:
        hook = subscribe(receiver.url)
        for _ in range(EVENTS):
            end(runtime_conn, accepted(), "SUCCEEDED")
        poke(deliverer)
        wait_until(
            lambda: all(r["status"] == "DELIVERED" for r in deliveries(runtime_conn, hook.id)),
            what="every delivery",
        )
        answered = sorted(receiver.answered)
    assert deliverer.delivered == EVENTS
    # A result waits for the next cycle, at most RESULT_WAIT_SECONDS: the statements are bounded
    # by the answers' spread over that wait (and the claims, which write what waits), not by the
    # attempts, one statement each.
    spread_seconds = answered[-1] - answered[0]
    bound = 2 + spread_seconds / delivery.RESULT_WAIT_SECONDS + deliverer.claims
    assert deliverer.records <= bound < EVENTS


def test_cycles__a_later_event_goes_once_the_earlier_ones_result_is_written(
    runtime_conn, runtime_dsn, accepted, monkeypatch
):
    monkeypatch.setattr(delivery, "POLL_SECONDS", 3600.0)  # no poll to fall back on
    with Receiver() as receiver, delivering(runtime_dsn) as deliverer:
        hook = subscribe(receiver.url)
        execution_id = accepted()
        end(runtime_conn, execution_id, "SUSPENDED")
        end(runtime_conn, execution_id, "SUCCEEDED")
        # Announced, as another writer's change is: the claim finds both and sends the first;
        # the second is held back until the first one's result is written.
        deliverer._loop.call_soon_threadsafe(deliverer.notified)
        wait_until(lambda: len(receiver.received) == 2, timeout=5.0, what="both events")
    assert [b["type"] for b in receiver.bodies()] == ["execution.suspended", "execution.succeeded"]
    assert [r["status"] for r in deliveries(runtime_conn, hook.id)] == ["DELIVERED"] * 2


def test_cycles__a_stop_writes_the_results_of_attempts_in_flight(
    runtime_conn, runtime_dsn, accepted
):
    with Receiver(delay=0.3) as receiver:
        with delivering(runtime_dsn) as deliverer:
            hook = subscribe(receiver.url)
            end(runtime_conn, accepted(), "SUCCEEDED")
            poke(deliverer)
            wait_until(lambda: receiver.received, what="the attempt under way")
        # The block's end stopped the loop with the attempt in flight.
        (row,) = deliveries(runtime_conn, hook.id)
    assert (row["status"], row["held_until"], row["attempts"]) == ("DELIVERED", None, 1)


def test_cycles__an_answer_holding_nul_is_kept_without_it(runtime_conn, runtime_dsn, accepted):
    with Receiver(reply=b"ok\x00then") as receiver, delivering(runtime_dsn) as deliverer:
        hook = subscribe(receiver.url)
        end(runtime_conn, accepted(), "SUCCEEDED")
        poke(deliverer)
        (row,) = wait_until(
            lambda: [r for r in deliveries(runtime_conn, hook.id) if r["status"] != "PENDING"],
            what="the delivery's result",
        )
    assert (row["status"], row["last_response_body"]) == ("DELIVERED", "ok\ufffdthen")
