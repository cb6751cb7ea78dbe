"""When an action's RUNNING checkpoint is written: beside a read's call, before a write's call.

A READ_ONLY call starts while its start write is still on its way (held here at a gate inside
the grouped write, so the overlap is shown, not timed); the run still waits for that start before
it writes anything after the call. A write's adapter, and a read's in a busy process, is only
called once its RUNNING checkpoint is committed, read from inside the adapter on another
connection.
"""

import threading
import uuid

import psycopg
import pytest

from executions.leases import Fence
from executions.worker import groupcommit
from executions.worker.runner import BESIDE_MAX_RUNS
from executions.worker.runtime import WorkerRequest
from tests.support.worker import (
    ScriptedAdapter,
    action,
    binding,
    checkpoint_rows,
    enqueue,
    execution_row,
    ok,
    registry,
    request_row,
    run_next,
    runtime_for,
    wait_until,
)

pytestmark = pytest.mark.django_db(transaction=True)

LEASE_SECONDS = 30.0  # long enough that no lease lapses while a gate holds a write
GATE_SECONDS = 15.0  # seconds a gate waits before the test is failed for it


class HeldWrites:
    """Wraps a runtime's grouped start and save statements: the start waits at a gate, and the
    order in which the statements ran is recorded."""

    def __init__(self, runtime) -> None:
        writes = runtime._deps.writes
        self.order: list[str] = []
        self.start_threads: list[threading.Thread] = []  # where each start statement ran
        self.start_entered = threading.Event()
        self.start_gate = threading.Event()
        self._wrap(writes.starts, "start", gate=True)
        self._wrap(writes.successes, "save", gate=False)

    def _wrap(self, group, name: str, *, gate: bool) -> None:
        write_many = group._write_many

        def held(conn, items):
            if gate:
                self.start_threads.append(threading.current_thread())
                self.start_entered.set()
                assert self.start_gate.wait(GATE_SECONDS), "the start gate was never opened"
            self.order.append(f"{name} sent")
            try:
                return write_many(conn, items)
            finally:
                self.order.append(f"{name} returned")

        group._write_many = held


def _in_thread(target):
    outcome: dict = {}

    def run():
        try:
            outcome["result"] = target()
        except BaseException as exc:  # reported by the test
            outcome["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, outcome


def _checkpoint(dsn: str, execution_id: str, action_id: str) -> dict | None:
    """The action's checkpoint as another connection sees it (committed rows only)."""
    with psycopg.connect(dsn, autocommit=True) as other:
        return checkpoint_rows(other, execution_id).get(action_id)


def test_read__its_adapter_is_called_while_its_start_write_is_held(conn, make_flow, runtime_dsn):
    inside = threading.Event()
    leave = threading.Event()
    seen: dict = {}

    def slow_read(ctx):
        seen["attempt"] = ctx.attempt
        seen["checkpoint"] = _checkpoint(runtime_dsn, ctx.execution_id, "a")
        inside.set()
        assert leave.wait(GATE_SECONDS), "the test never let the read finish"
        return ok({"read": True})

    adapter = ScriptedAdapter(script=[slow_read])
    accepted = enqueue(conn, make_flow([action("a", "A")]))
    with runtime_for(runtime_dsn, registry(binding("A", adapter)), slots=2) as runtime:
        held = HeldWrites(runtime)
        thread, outcome = _in_thread(lambda: run_next(conn, runtime, lease_seconds=LEASE_SECONDS))
        assert held.start_entered.wait(GATE_SECONDS)
        assert inside.wait(GATE_SECONDS), "the read was not called while its start was held"
        assert seen == {"attempt": 1, "checkpoint": None}  # called with no checkpoint yet
        assert held.order == []  # the start statement has not even been sent

        # The start goes through while the read is still running: its RUNNING checkpoint is
        # there to see for as long as the call lasts.
        held.start_gate.set()
        running = wait_until(
            lambda: _checkpoint(runtime_dsn, accepted.execution_id, "a"),
            what="the RUNNING checkpoint while the read runs",
        )
        assert (running["status"], running["attempt"]) == ("RUNNING", 1)
        assert thread.is_alive()
        leave.set()
        thread.join(GATE_SECONDS)

    assert "error" not in outcome, outcome
    assert outcome["result"].status == "completed"
    saved = checkpoint_rows(conn, accepted.execution_id)["a"]
    assert (saved["status"], saved["attempt"], saved["output"]) == ("SUCCEEDED", 1, {"read": True})
    assert held.order == ["start sent", "start returned", "save sent", "save returned"]
    assert request_row(conn, accepted.request_id)["state"] == "DONE"


def test_read__its_success_is_written_only_after_its_start(
    conn, make_flow, runtime_dsn, monkeypatch
):
    adapter = ScriptedAdapter(script=[ok({"read": 1})])
    accepted = enqueue(conn, make_flow([action("a", "A")]))
    waiting = threading.Event()
    result = groupcommit.Pending.result

    def watched(self):  # the run is about to wait for its start
        waiting.set()
        return result(self)

    monkeypatch.setattr(groupcommit.Pending, "result", watched)
    with runtime_for(runtime_dsn, registry(binding("A", adapter)), slots=2) as runtime:
        held = HeldWrites(runtime)
        thread, outcome = _in_thread(lambda: run_next(conn, runtime, lease_seconds=LEASE_SECONDS))
        assert held.start_entered.wait(GATE_SECONDS)
        # The read returned while its start is held; the run waits for the start...
        assert waiting.wait(GATE_SECONDS), "the run did not wait for its start"
        assert len(adapter.calls) == 1
        assert held.order == []  # ...and has sent nothing else meanwhile
        assert checkpoint_rows(conn, accepted.execution_id) == {}
        held.start_gate.set()
        thread.join(GATE_SECONDS)

    assert "error" not in outcome, outcome
    assert outcome["result"].status == "completed"
    assert held.order == ["start sent", "start returned", "save sent", "save returned"]
    assert checkpoint_rows(conn, accepted.execution_id)["a"]["status"] == "SUCCEEDED"


def test_read__a_holder_superseded_during_its_call_writes_nothing_after_it(
    conn, make_flow, runtime_dsn
):
    accepted = enqueue(conn, make_flow([action("a", "A")]))
    taken_over = threading.Event()

    def read_then_lose_the_execution(ctx):
        # Another holder takes over while the call runs and before its start is written.
        with psycopg.connect(runtime_dsn, autocommit=True) as other:
            other.execute(
                "UPDATE execution SET fencing_token = fencing_token + 1 WHERE id = %s",
                [ctx.execution_id],
            )
        taken_over.set()
        return ok({"read": 1})

    adapter = ScriptedAdapter(script=[read_then_lose_the_execution])
    with runtime_for(runtime_dsn, registry(binding("A", adapter)), slots=2) as runtime:
        held = HeldWrites(runtime)
        thread, outcome = _in_thread(lambda: run_next(conn, runtime, lease_seconds=LEASE_SECONDS))
        assert held.start_entered.wait(GATE_SECONDS)
        assert taken_over.wait(GATE_SECONDS), "the read was not called while its start was held"
        held.start_gate.set()
        thread.join(GATE_SECONDS)

    assert "error" not in outcome, outcome
    assert outcome["result"].status == "superseded"
    assert len(adapter.calls) == 1
    # The fenced start matched nothing, and nothing was sent after it.
    assert held.order == ["start sent", "start returned"]
    assert checkpoint_rows(conn, accepted.execution_id) == {}
    execution = execution_row(conn, accepted.execution_id)
    assert (execution["status"], execution["fencing_token"]) == ("RUNNING", 2)
    assert request_row(conn, accepted.request_id)["blocked_by_id"] == accepted.execution_id


@pytest.mark.parametrize("effect", ["NON_IDEMPOTENT_WRITE", "IDEMPOTENT_WRITE"])
def test_write__its_adapter_is_called_only_after_its_running_checkpoint_commits(
    conn, make_flow, runtime_dsn, effect
):
    seen: list = []
    callers: list[threading.Thread] = []

    def write(ctx):
        callers.append(threading.current_thread())
        seen.append(_checkpoint(runtime_dsn, ctx.execution_id, "w"))
        return ok({"written": True})

    adapter = ScriptedAdapter(script=[write])
    accepted = enqueue(conn, make_flow([action("w", "W")]))
    with runtime_for(runtime_dsn, registry(binding("W", adapter, effect=effect))) as runtime:
        held = HeldWrites(runtime)
        held.start_gate.set()  # nothing held: the order alone is under test
        result = run_next(conn, runtime, lease_seconds=LEASE_SECONDS)

    assert result.status == "completed"
    (checkpoint,) = seen
    assert checkpoint is not None, "the write was called before its RUNNING checkpoint committed"
    assert (checkpoint["status"], checkpoint["attempt"], checkpoint["effect"]) == (
        "RUNNING",
        1,
        effect,
    )
    # The run's own thread sent the start and waited for it before it called the adapter.
    assert held.start_threads == callers
    assert checkpoint_rows(conn, accepted.execution_id)["w"]["status"] == "SUCCEEDED"


def test_read__in_a_busy_process_its_start_is_committed_before_its_call(
    conn, make_flow, runtime_dsn
):
    seen: list = []

    def read(ctx):
        seen.append(_checkpoint(runtime_dsn, ctx.execution_id, "a"))
        return ok({"read": 1})

    adapter = ScriptedAdapter(script=[read])
    accepted = enqueue(conn, make_flow([action("a", "A")]))
    with runtime_for(runtime_dsn, registry(binding("A", adapter)), slots=2) as runtime:
        for _ in range(BESIDE_MAX_RUNS):  # other runs in progress in this process
            runtime.allocate(WorkerRequest(fence=Fence(uuid.uuid4(), uuid.uuid4(), 1, "other")))
        result = run_next(conn, runtime, lease_seconds=LEASE_SECONDS)

    assert result.status == "completed"
    (checkpoint,) = seen
    assert (checkpoint["status"], checkpoint["attempt"]) == ("RUNNING", 1)
    assert checkpoint_rows(conn, accepted.execution_id)["a"]["status"] == "SUCCEEDED"
