"""The dispatcher with real threads and PostgreSQL: capacity, wake-ups, heartbeat and shutdown."""

import dataclasses
import time

import psycopg
import pytest

from executions import sql
from executions.queue.cancel import execution_cancel
from executions.queue.leases import leases_renew
from executions.queue.steps import run_sync
from executions.worker.metrics import CLAIMS
from executions.worker.scheduler import Scheduler
from tests.support.worker import (
    FAST,
    GateAdapter,
    ScriptedAdapter,
    action,
    binding,
    checkpoint_rows,
    claim,
    enqueue,
    execution_row,
    expire_lease,
    ok,
    registry,
    request_row,
    running_scheduler,
    runtime_for,
    status_of,
    statuses,
    transient,
    wait_until,
)

pytestmark = pytest.mark.django_db(transaction=True)


def _db_now(conn):
    return conn.execute("SELECT clock_timestamp()").fetchone()[0]


def test_scheduler__claims_only_free_capacity(conn, make_flow, runtime_dsn):
    gate = GateAdapter()
    ids = [enqueue(conn, make_flow([action("a", "G")])).execution_id for _ in range(5)]
    config = dataclasses.replace(FAST, concurrency=2, batch=10)

    with running_scheduler(runtime_dsn, registry(binding("G", gate)), config=config) as sched:
        wait_until(lambda: len(gate.calls) == 2, what="both slots inside the adapter")
        # A claim of the whole batch would have taken all five at once; it took the free two.
        assert sorted(statuses(conn, ids)) == ["PENDING"] * 3 + ["RUNNING"] * 2
        assert sched.claimed == 2 and sched.busy == 2
        gate.gate.set()
        wait_until(lambda: statuses(conn, ids) == ["SUCCEEDED"] * 5, what="all five done")
        assert sched.claimed == 5


# The grouped save, waiting on a row lock (its text names the status it writes).
SAVE_WAITING = """
SELECT count(*) FROM pg_stat_activity
 WHERE wait_event_type = 'Lock' AND query LIKE '%status = ''SUCCEEDED''%'
"""
LOCK_WAITING = "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"


def _save_held(conn, runtime_dsn, execution_id, gate):
    """Open `gate` with the execution's row locked, and return the locking connection once the
    call's save waits on that lock (the caller ends the lock)."""
    locker = psycopg.connect(runtime_dsn)
    locker.execute("SELECT 1 FROM execution WHERE id = %s FOR UPDATE", [execution_id])
    gate.gate.set()
    wait_until(lambda: conn.execute(SAVE_WAITING).fetchone()[0] == 1, what="the save to wait")
    return locker


def test_scheduler__a_slot_is_free_once_the_last_call_answered(conn, make_flow, runtime_dsn):
    # After its last call only writes are left: the slot takes its next execution while the
    # save and the final commit go; the execution stays held (its lease renewed) until then.
    gate = GateAdapter()
    execution_id = enqueue(conn, make_flow([action("a", "G")])).execution_id
    config = dataclasses.replace(FAST, concurrency=1)

    with running_scheduler(runtime_dsn, registry(binding("G", gate)), config=config) as sched:
        wait_until(lambda: len(gate.calls) == 1, what="the call inside the adapter")
        locker = _save_held(conn, runtime_dsn, execution_id, gate)
        with locker:
            assert (sched.busy, sched.slots.held) == (0, 1)
            assert checkpoint_rows(conn, execution_id)["a"]["status"] == "RUNNING"
            locker.rollback()
        wait_until(lambda: status_of(conn, execution_id) == "SUCCEEDED", what="its final commit")
        wait_until(lambda: sched.slots.held == 0, what="the execution no longer held")


def test_scheduler__a_slot_stays_busy_through_a_save_with_a_call_after_it(
    conn, make_flow, runtime_dsn
):
    # The save of an action that is not the last: the next call still needs the slot.
    gate = GateAdapter()
    flow_id = make_flow([action("a", "G"), action("b", "NO_OP")])
    execution_id = enqueue(conn, flow_id).execution_id
    config = dataclasses.replace(FAST, concurrency=1)

    with running_scheduler(runtime_dsn, registry(binding("G", gate)), config=config) as sched:
        wait_until(lambda: len(gate.calls) == 1, what="the call inside the adapter")
        locker = _save_held(conn, runtime_dsn, execution_id, gate)
        with locker:
            assert (sched.busy, sched.slots.held) == (1, 1)
            locker.rollback()
        wait_until(lambda: status_of(conn, execution_id) == "SUCCEEDED", what="its final commit")
        assert checkpoint_rows(conn, execution_id)["b"]["status"] == "SUCCEEDED"


def test_scheduler__a_run_ended_after_its_last_save_counts_its_slot_busy_again(
    conn, make_flow, runtime_dsn
):
    # The slot was released at the last save; the evaluation then fails the run (the updated
    # data breaks the flow's dataSchema), and while its failure is written the slot is busy.
    gate = GateAdapter()
    flow_id = make_flow(
        [action("a", "G")],
        data_schema={"type": "object", "properties": {"done": {"type": "string"}}},
    )
    accepted = enqueue(conn, flow_id)
    config = dataclasses.replace(FAST, concurrency=1)

    with running_scheduler(runtime_dsn, registry(binding("G", gate)), config=config) as sched:
        wait_until(lambda: len(gate.calls) == 1, what="the call inside the adapter")
        with psycopg.connect(runtime_dsn) as locker:
            locker.execute("SELECT 1 FROM request WHERE id = %s FOR UPDATE", [accepted.request_id])
            gate.gate.set()
            wait_until(
                lambda: (
                    checkpoint_rows(conn, accepted.execution_id)["a"]["status"] == "SUCCEEDED"
                    and conn.execute(LOCK_WAITING).fetchone()[0] == 1
                ),
                what="the failure to wait on the request's lock",
            )
            assert (sched.busy, sched.slots.held) == (1, 1)
            locker.rollback()
        wait_until(lambda: status_of(conn, accepted.execution_id) == "FAILED", what="its failure")
        wait_until(lambda: (sched.busy, sched.slots.held) == (0, 0), what="the slot free")


def test_scheduler__wakes_on_notify_long_before_the_poll(conn, make_flow, runtime_dsn):
    config = dataclasses.replace(FAST, poll_ms=600_000)  # a poll would take ten minutes
    flow_id = make_flow([action("a", "NO_OP")])
    with running_scheduler(runtime_dsn, registry(), config=config) as scheduler:
        wait_until(scheduler.idle.is_set, what="the scheduler to wait for work")
        started = time.monotonic()
        accepted = enqueue(conn, flow_id, notify=True)
        wait_until(lambda: status_of(conn, accepted.execution_id) == "SUCCEEDED", timeout=10)
        assert time.monotonic() - started < 10


def test_scheduler__hands_a_webhook_announcement_to_the_delivery_loop_and_claims_nothing(
    conn, runtime_dsn
):
    config = dataclasses.replace(FAST, poll_ms=600_000)  # a poll would take ten minutes
    heard: list[int] = []
    with running_scheduler(runtime_dsn, registry(), config=config) as scheduler:
        scheduler.webhooks_notified = lambda: heard.append(1)
        wait_until(scheduler.idle.is_set, what="the scheduler to wait for work")
        claims = scheduler.metrics.value(CLAIMS)
        for _ in range(3):
            conn.execute(sql.NOTIFY_WEBHOOKS)
        wait_until(lambda: len(heard) == 3, what="the announcements handed on")
        conn.execute(sql.NOTIFY_WORK, {"execution_id": "nothing"})  # behind them, in order
        wait_until(lambda: scheduler.metrics.value(CLAIMS) > claims, what="the announced claim")
        # Only the work announcement claimed: the three before it left the wait going.
        assert scheduler.metrics.value(CLAIMS) == claims + 1


def test_scheduler__polls_for_work_nobody_announced(conn, make_flow, runtime_dsn):
    flaky = ScriptedAdapter(script=[transient()], default=ok())
    flow_id = make_flow([action("a", "F")])
    config = dataclasses.replace(FAST, poll_ms=100, retry_base_seconds=0.2, retry_max_seconds=0.2)
    with running_scheduler(runtime_dsn, registry(binding("F", flaky)), config=config) as sched:
        wait_until(sched.idle.is_set, what="the scheduler to wait for work")
        accepted = enqueue(conn, flow_id, notify=False)
        # Picked up by the poll, then failed once; the due retry is found by the poll too.
        wait_until(lambda: status_of(conn, accepted.execution_id) == "SUCCEEDED")
    assert [c.attempt for c in flaky.calls] == [1, 2]
    assert execution_row(conn, accepted.execution_id)["attempts"] == 2


def test_renewal__keeps_the_lease_through_a_long_action(conn, make_flow, runtime_dsn):
    config = dataclasses.replace(FAST, lease_seconds=1.0, renew_seconds=0.3)
    gate = GateAdapter()
    accepted = enqueue(conn, make_flow([action("a", "G")]))
    with running_scheduler(runtime_dsn, registry(binding("G", gate)), config=config):
        assert gate.entered.wait(10)
        started = _db_now(conn)

        def three_leases_later():
            # All the while, the lease stays valid and no rival can claim the execution.
            assert claim(conn, "rival") == []
            assert execution_row(conn, accepted.execution_id)["lease_valid"]
            return (_db_now(conn) - started).total_seconds() > 3 * config.lease_seconds

        wait_until(three_leases_later, what="three lease periods to pass")
        gate.gate.set()
        wait_until(lambda: status_of(conn, accepted.execution_id) == "SUCCEEDED")
    execution = execution_row(conn, accepted.execution_id)
    assert (execution["attempts"], execution["fencing_token"]) == (1, 1)
    assert len(gate.calls) == 1


def test_heartbeat__cancels_exactly_the_execution_whose_lease_was_lost(
    conn, make_flow, runtime_dsn
):
    gate = GateAdapter()
    flow_id = make_flow([action("a", "G")])
    lost, kept = enqueue(conn, flow_id), enqueue(conn, flow_id)
    with running_scheduler(runtime_dsn, registry(binding("G", gate))):
        wait_until(lambda: len(gate.contexts) == 2, what="both executions in the adapter")
        contexts = {ctx.execution_id: ctx for ctx in gate.contexts}
        # Both reads' starts committed before their calls (seen from this connection once
        # visible: the adapter was entered after each commit).
        wait_until(
            lambda: all(
                checkpoint_rows(conn, e.execution_id).get("a", {}).get("status") == "RUNNING"
                for e in (lost, kept)
            ),
            what="both reads' RUNNING checkpoints",
        )

        result = execution_cancel(execution_id=lost.execution_id, actor="ops", reason="no longer")

        assert result.status == "CANCELLED"
        wait_until(
            contexts[str(lost.execution_id)].cancelled.is_set, what="the lost lease to cancel"
        )
        assert not contexts[str(kept.execution_id)].cancelled.is_set()
        gate.gate.set()
        wait_until(lambda: status_of(conn, kept.execution_id) == "SUCCEEDED")
    assert status_of(conn, lost.execution_id) == "CANCELLED"
    assert request_row(conn, lost.request_id)["blocked_by_id"] is None
    # The cancelled run wrote nothing after its lease was lost.
    assert checkpoint_rows(conn, lost.execution_id)["a"]["status"] == "RUNNING"


def test_heartbeat__a_late_renewal_never_disturbs_another_execution(conn, make_flow, runtime_dsn):
    flow_id = make_flow([action("a", "NO_OP")])
    first, second = enqueue(conn, flow_id), enqueue(conn, flow_id)
    with runtime_for(runtime_dsn, registry()) as runtime:
        scheduler = Scheduler(config=FAST, conninfo=runtime_dsn, runtime=runtime.target, owner="w")
        (claim_a,) = claim(conn, "w", lease_seconds=30)
        holding_a = scheduler.slots.take(claim_a)
        sent = scheduler.occupants()  # the renewal goes out with execution A in it ...

        # ... and while it is in flight, A is cancelled and its slot runs B instead.
        execution_cancel(execution_id=first.execution_id, actor="ops", reason="stop")
        scheduler.slots.free(holding_a)
        (claim_b,) = claim(conn, "w", lease_seconds=30)
        holding_b = scheduler.slots.take(claim_b)
        assert claim_b.execution_id == second.execution_id

        renewed = scheduler_renewal(conn, sent)
        runtime.run(scheduler.heartbeat.apply_renewal(sent, renewed, sent_at=time.monotonic()))

        assert renewed == set()  # A's lease is lost ...
        assert not holding_b.cancelled.is_set()  # ... and B, now on that slot, is untouched
        assert not holding_a.cancelled.is_set()  # A had already finished: nothing to stop

        # The same answer while A is still held does cancel A, and only A.
        holding_a2 = scheduler.slots.take(claim_a)
        runtime.run(
            scheduler.heartbeat.apply_renewal([holding_a2], set(), sent_at=time.monotonic())
        )
        assert holding_a2.cancelled.is_set() and not holding_b.cancelled.is_set()


def scheduler_renewal(conn, holdings):
    return run_sync(
        conn, leases_renew(owner="w", held=[h.dispatch.fence for h in holdings], lease_seconds=30)
    )


def test_shutdown__drains_running_work_and_claims_nothing_more(conn, make_flow, runtime_dsn):
    config = dataclasses.replace(FAST, drain_seconds=30)
    gate = GateAdapter()
    flow_id = make_flow([action("a", "G")])
    running = enqueue(conn, flow_id)
    with running_scheduler(runtime_dsn, registry(binding("G", gate)), config=config) as sched:
        assert gate.entered.wait(10)
        sched.request_stop()
        later = enqueue(conn, flow_id, notify=True)
        started = _db_now(conn)

        def two_leases_into_the_drain():
            assert execution_row(conn, running.execution_id)["lease_valid"]  # still renewed
            return (_db_now(conn) - started).total_seconds() > 2 * config.lease_seconds

        wait_until(two_leases_into_the_drain, what="the drain to outlast two leases")
        assert not sched.finished.is_set()
        gate.gate.set()
        assert sched.finished.wait(10)
        assert status_of(conn, running.execution_id) == "SUCCEEDED"
        assert not gate.cancelled_seen.is_set()
        assert sched.drained  # a clean stop: runworker withdraws its route limits
    later_row = execution_row(conn, later.execution_id)
    assert (later_row["status"], later_row["attempts"]) == ("PENDING", 0)


def test_shutdown__past_the_drain_leaves_the_rest_recoverable(conn, make_flow, runtime_dsn):
    config = dataclasses.replace(FAST, drain_seconds=0.3)
    gate = GateAdapter()
    accepted = enqueue(conn, make_flow([action("a", "G")]))
    with running_scheduler(runtime_dsn, registry(binding("G", gate)), config=config) as sched:
        assert gate.entered.wait(10)
        wait_until(
            lambda: "a" in checkpoint_rows(conn, accepted.execution_id),
            what="the slow read's RUNNING checkpoint",
        )
        sched.request_stop()
        assert sched.finished.wait(10)
        assert gate.cancelled_seen.is_set()  # told to stop, per execution
        assert not sched.drained  # its route limits lapse with its registry row

    # Left as a dead worker leaves it: RUNNING, its checkpoint RUNNING, its lease not renewed.
    assert status_of(conn, accepted.execution_id) == "RUNNING"
    assert checkpoint_rows(conn, accepted.execution_id)["a"]["status"] == "RUNNING"
    expire_lease(conn, accepted.execution_id)

    rescue = ScriptedAdapter()
    with running_scheduler(runtime_dsn, registry(binding("G", rescue))):
        wait_until(lambda: status_of(conn, accepted.execution_id) == "SUCCEEDED")
    assert [(c.attempt, c.external_key) for c in rescue.calls] == [
        (2, f"{accepted.execution_id}:a")
    ]


def test_scheduler__survives_a_lost_database_connection(conn, make_flow, runtime_dsn):
    flow_id = make_flow([action("a", "NO_OP")])
    config = dataclasses.replace(FAST, poll_ms=100)
    with running_scheduler(runtime_dsn, registry(), config=config, owner="sturdy") as sched:
        wait_until(sched.idle.is_set, what="the scheduler to wait for work")
        # An administrator (or a failover) kills the worker's listening connection.
        with psycopg.connect(runtime_dsn, autocommit=True) as other:
            killed = other.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE query LIKE '%%SKIP LOCKED%%' AND pid <> pg_backend_pid()"
            ).fetchall()
        accepted = enqueue(conn, flow_id)
        wait_until(lambda: status_of(conn, accepted.execution_id) == "SUCCEEDED")
    assert killed, "the listening connection was found"


def test_scheduler__request_stop_is_safe_before_any_work(runtime_dsn):
    with runtime_for(runtime_dsn, registry()) as runtime:
        scheduler = Scheduler(config=FAST, conninfo=runtime_dsn, runtime=runtime.target)
        done = runtime.loop.submit(scheduler.run())
        assert scheduler.running.wait(10)
        scheduler.request_stop()
        done.result(10)
        assert scheduler.finished.is_set() and scheduler.claimed == 0


def test_take__the_same_fence_claimed_again_stops_the_earlier_holder(conn, make_flow, runtime_dsn):
    # A claim commits asynchronously: a database crash can lose it and hand this process the
    # same token again. The earlier run under that fence must stop; a new token never stops one.
    flow_id = make_flow([action("a", "NO_OP")])
    first, _ = enqueue(conn, flow_id), enqueue(conn, flow_id)
    with runtime_for(runtime_dsn, registry()) as runtime:
        scheduler = Scheduler(config=FAST, conninfo=runtime_dsn, runtime=runtime.target, owner="w")
        (claim_a,) = claim(conn, "w", lease_seconds=30)
        assert claim_a.execution_id == first.execution_id
        earlier = scheduler.slots.take(claim_a)

        again = scheduler.slots.take(claim_a)  # the very same fence, as after a lost claim

        assert earlier.cancelled.is_set() and earlier.lost
        assert not again.cancelled.is_set()
        assert scheduler.occupants() == [again]

        (claim_b,) = claim(conn, "w", lease_seconds=30)
        other = scheduler.slots.take(claim_b)
        assert not other.cancelled.is_set() and not again.cancelled.is_set()
