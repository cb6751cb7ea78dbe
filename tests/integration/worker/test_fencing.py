"""Fencing against real PostgreSQL: a stale holder can change nothing, even after its call ran."""

import threading
import time

import pytest

from executions.queue.checkpoints import checkpoint_settle
from executions.queue.claims import execution_load
from executions.queue.finalize import (
    AttemptSettlement,
    FinalizeItem,
    execution_fail,
    execution_schedule_retry,
)
from executions.queue.leases import ExecutionSuperseded
from executions.queue.steps import Plan, run_sync
from tests.support.worker import (
    GateAdapter,
    ScriptedAdapter,
    action,
    audit_events,
    binding,
    checkpoint_rows,
    claim,
    dispatch_once,
    enqueue,
    execution_row,
    expire_lease,
    finalize_one,
    holding_of,
    ok,
    package_of,
    registry,
    request_row,
    run_claim,
    runtime_for,
    save_checkpoint,
    start_checkpoint,
    wait_until,
)

pytestmark = pytest.mark.django_db(transaction=True)


def _start(conn, fence, *, previous_attempt=0):
    return start_checkpoint(conn=conn, fence=fence, previous_attempt=previous_attempt)


@pytest.fixture
def takeover(conn, make_flow):
    """An execution claimed by A, whose lease expired and was reclaimed by B (token 2)."""
    accepted = enqueue(conn, make_flow([action("a", "A")]))
    (first,) = claim(conn, "worker-a", lease_seconds=0.2)
    expire_lease(conn, accepted.execution_id)
    (second,) = claim(conn, "worker-b", lease_seconds=30)
    return accepted, first.fence, second.fence


def test_stale_token__can_neither_load_nor_start_a_checkpoint(conn, takeover):
    accepted, stale, _ = takeover
    with pytest.raises(ExecutionSuperseded) as refused:
        run_sync(conn, execution_load(fence=stale))
    assert refused.value.execution_id == str(accepted.execution_id)
    with pytest.raises(ExecutionSuperseded):
        _start(conn, stale)
    assert checkpoint_rows(conn, accepted.execution_id) == {}


def test_stale_token__can_neither_save_nor_settle_a_checkpoint(conn, takeover):
    accepted, stale, current = takeover
    assert _start(conn, current) == 1
    with pytest.raises(ExecutionSuperseded):
        save_checkpoint(conn=conn, fence=stale, action_id="a", attempt=1, output={"x": 1})
    with pytest.raises(ExecutionSuperseded), conn.transaction():
        run_sync(
            conn,
            Plan(
                checkpoint_settle(
                    fence=stale,
                    action_id="a",
                    attempt=1,
                    status="FAILED",
                    error_code="X",
                    error_detail=None,
                )
            ),
        )
    row = checkpoint_rows(conn, accepted.execution_id)["a"]
    assert (row["status"], row["output"], row["fencing_token"]) == ("RUNNING", None, 2)


def test_stale_token__can_neither_retry_nor_fail_nor_finish(conn, takeover):
    accepted, stale, current = takeover
    _start(conn, current)
    settlement = AttemptSettlement("a", 1, "FAILED", "HTTP_503", "try later")
    with pytest.raises(ExecutionSuperseded):
        run_sync(
            conn,
            execution_schedule_retry(
                fence=stale, settlement=settlement, delay_seconds=1, actor="t", payload={}
            ),
        )
    for reconcile in (False, True):
        with pytest.raises(ExecutionSuperseded):
            run_sync(
                conn,
                execution_fail(
                    fence=stale,
                    error_code="PERMANENT_FAILURE",
                    error_detail=None,
                    settlement=settlement,
                    reconcile=reconcile,
                    actor="t",
                    payload={},
                ),
            )
    save_checkpoint(conn=conn, fence=current, action_id="a", attempt=1, output={})
    with pytest.raises(ExecutionSuperseded):
        finalize_one(
            conn=conn,
            item=FinalizeItem(
                fence=stale,
                from_state="DRAFT",
                accepted_revision=2,
                request_version=2,
                action_ids=["a"],
                data={"stale": True},
                target_state="DONE",
                result={"outcome": "OK", "targetState": "DONE"},
                payload={},
            ),
        )
    # Every refused transaction rolled back whole: B's execution, checkpoint and request stand.
    execution = execution_row(conn, accepted.execution_id)
    assert (execution["status"], execution["lease_owner"], execution["fencing_token"]) == (
        "RUNNING",
        "worker-b",
        2,
    )
    assert checkpoint_rows(conn, accepted.execution_id)["a"]["status"] == "SUCCEEDED"
    request = request_row(conn, accepted.request_id)
    assert (request["data"], request["state"], request["blocked_by_id"]) == (
        {},
        "DRAFT",
        accepted.execution_id,
    )
    # Only the takeover itself was recorded; none of the stale holder's endings.
    assert [t for t, _ in audit_events(conn, accepted.request_id)] == [
        "TRANSITION_ACCEPTED",
        "LEASE_TAKEN_OVER",
    ]


def test_expired_lease__fences_out_its_own_holder_even_before_a_takeover(conn, make_flow):
    accepted = enqueue(conn, make_flow([action("a", "A")]))
    (found,) = claim(conn, "worker-a", lease_seconds=0.2)
    expire_lease(conn, accepted.execution_id)  # same token, but the lease ran out by DB time
    with pytest.raises(ExecutionSuperseded):
        _start(conn, found.fence)
    assert checkpoint_rows(conn, accepted.execution_id) == {}


def test_late_return__after_a_takeover_changes_nothing(conn, make_flow, runtime_dsn):
    """A stalls inside its adapter past its lease; B takes over and finishes; A returns late."""
    slow = GateAdapter(ok({"who": "A"}), watch_cancel=False)
    fast = ScriptedAdapter(default=ok({"who": "B"}))
    flow_id = make_flow(
        [action("a", "A")],
        updates=[{"path": "/who", "from": "/actions/a/who"}],
    )
    accepted = enqueue(conn, flow_id)
    results: dict[str, object] = {}

    with runtime_for(runtime_dsn, registry(binding("A", slow))) as runtime_a:
        (found_a,) = claim(conn, "worker-a", lease_seconds=0.5)  # no heartbeat renews it
        worker_a = threading.Thread(target=lambda: results.update(a=run_claim(runtime_a, found_a)))
        worker_a.start()
        assert slow.entered.wait(10)
        expire_lease(conn, accepted.execution_id)

        with runtime_for(runtime_dsn, registry(binding("A", fast))) as runtime_b:
            (found_b,) = claim(conn, "worker-b", lease_seconds=30)
            assert found_b.fence.token == found_a.fence.token + 1
            assert run_claim(runtime_b, found_b).status == "completed"

        slow.gate.set()  # the provider answered A after all
        worker_a.join(timeout=10)

    assert results["a"].status == "superseded"  # settled, not failed, not retried
    request = request_row(conn, accepted.request_id)
    assert request["data"] == {"who": "B"}
    assert (request["state"], request["revision"], request["blocked_by_id"]) == ("DONE", 3, None)
    # A's start committed before its call; B found it RUNNING and retried it, attempt 2, under
    # its own token.
    checkpoint = checkpoint_rows(conn, accepted.execution_id)["a"]
    assert (checkpoint["output"], checkpoint["fencing_token"], checkpoint["attempt"]) == (
        {"who": "B"},
        2,
        2,
    )
    assert [c.external_key for c in slow.calls + fast.calls] == [f"{accepted.execution_id}:a"] * 2
    completed = [t for t, _ in audit_events(conn, accepted.request_id)]
    assert completed.count("TRANSITION_COMPLETED") == 1
    wait_until(lambda: execution_row(conn, accepted.execution_id)["status"] == "SUCCEEDED")


def test_lapsed_holding__still_calls_when_the_database_says_the_lease_is_held(
    conn, make_flow, runtime_dsn
):
    """No renewal confirmed for a whole lease (answers slow, not lost): the call asks the
    database first, finds the lease held, and goes (the paused holder whose lease did run out:
    tests/process/test_worker_pause.py)."""
    adapter = ScriptedAdapter(default=ok({"v": 1}))
    accepted = enqueue(conn, make_flow([action("a", "A")]))
    (found,) = claim(conn, "worker-a", lease_seconds=30)
    holding = holding_of(found)
    holding.lease_seconds = 1.0
    holding.renewed_at = time.monotonic() - 5  # its last renewal answered 5 s ago
    assert holding.lapsed()
    with runtime_for(runtime_dsn, registry(binding("A", adapter))) as runtime:
        assert dispatch_once(runtime, package_of(found), holding).status == "completed"
    assert [c.external_key for c in adapter.calls] == [f"{accepted.execution_id}:a"]
