"""Stuck runs: an adapter that ignores its timeout and its cancellation holds a thread (a
synchronous call), but not the lease, not the slot, and not the execution
(docs/worker-protocol.md#poison-cap)."""

import threading

import pytest

from actions.base import ActionContext, ActionResult, Binding
from executions.worker.metrics import STUCK_RUNS
from executions.worker.runner import DEADLINE_MARGIN_LEASES
from orquestador.workerconfig import WorkerConfig
from tests.support.worker import (
    action,
    audit_events,
    binding,
    checkpoint_rows,
    enqueue,
    execution_row,
    ok,
    registry,
    running_scheduler,
    wait_until,
)

pytestmark = pytest.mark.django_db(transaction=True)

TIMEOUT = 0.4  # seconds: the contract's timeout, which the stubborn adapter ignores
CONFIG = WorkerConfig(
    concurrency=1,
    batch=1,
    poll_ms=50,
    lease_seconds=1.0,
    renew_seconds=0.3,
    drain_seconds=1.0,
    retry_base_seconds=0.01,
    retry_max_seconds=0.05,
)


class StubbornAdapter:
    """Its first call blocks until the test releases it, whatever the timeout or cancellation
    say (a thread that never returns); later calls answer at once."""

    name = "test.stubborn"
    fixed_effect = None

    def __init__(self) -> None:
        self.calls: list[int] = []
        self.entered = threading.Event()
        self.release = threading.Event()
        self.returned = threading.Event()

    def call(self, ctx: ActionContext, binding: Binding) -> ActionResult:
        self.calls.append(ctx.attempt)
        if len(self.calls) > 1:
            return ok({"attempt": ctx.attempt})
        self.entered.set()
        self.release.wait(60)
        self.returned.set()
        return ok({"attempt": ctx.attempt, "late": True})


def test_stuck_run__past_its_deadline_loses_the_lease_but_not_the_slot(
    conn, runtime_dsn, make_flow, caplog
):
    adapter = StubbornAdapter()
    reg = registry(binding("STUBBORN", adapter, timeout_seconds=TIMEOUT))
    stuck_flow = make_flow(
        [action("s", "STUBBORN")], updates=[{"path": "/out", "from": "/actions/s"}]
    )
    stuck = enqueue(conn, stuck_flow)
    try:
        with (
            caplog.at_level("INFO", logger="executions.worker"),
            running_scheduler(runtime_dsn, reg, config=CONFIG) as scheduler,
        ):
            assert adapter.entered.wait(15)
            holding = wait_until(scheduler.occupants, what="the stuck run to be held")[0]
            deadline = TIMEOUT + DEADLINE_MARGIN_LEASES * CONFIG.lease_seconds
            wait_until(
                lambda: scheduler.metrics.value(STUCK_RUNS) == 1,
                timeout=deadline + 10,
                what="the heartbeat to give the stuck run up",
            )
            assert holding.cancelled.is_set() and not adapter.returned.is_set()
            assert scheduler.busy == 0  # the slot is back while the thread is still stuck

            # Capacity did not leak: the one slot runs other work meanwhile...
            other = enqueue(conn, make_flow([action("n", "NO_OP")]))
            wait_until(lambda: execution_row(conn, other.execution_id)["status"] == "SUCCEEDED")
            # ...and the stuck execution itself, once its unrenewed lease expires, is taken
            # over and recovered by the rules of docs/worker-protocol.md#recovery (a READ_ONLY call
            # is retried).
            wait_until(
                lambda: execution_row(conn, stuck.execution_id)["status"] == "SUCCEEDED",
                what="the stuck execution to be recovered",
            )
            assert not adapter.returned.is_set()

            # The stuck run's task was cancelled when its slot was given back; the call's thread
            # returns late and what it brings back is dropped.
            wait_until(
                lambda: any(
                    r.getMessage() == "stuck run cancelled after its slot was given back"
                    for r in caplog.records
                ),
                what="the stuck run's task to end",
            )
            adapter.release.set()
            assert adapter.returned.wait(10)
            assert scheduler.busy == 0  # not given back twice
    finally:
        adapter.release.set()

    execution = execution_row(conn, stuck.execution_id)
    assert execution["attempts"] == 2
    assert checkpoint_rows(conn, stuck.execution_id)["s"]["attempt"] == 2
    assert execution["result"] == {"outcome": "OK", "targetState": "DONE"}
    request = conn.execute("SELECT data FROM request WHERE id = %s", [stuck.request_id]).fetchone()[
        0
    ]
    assert request["out"] == {"attempt": 2}  # the late answer never landed
    completed = [t for t, _ in audit_events(conn, stuck.request_id)].count("TRANSITION_COMPLETED")
    assert completed == 1
    assert adapter.calls == [1, 2]
    assert any(
        r.getMessage() == "run past its deadline; lease no longer renewed, slot given back"
        for r in caplog.records
    )
