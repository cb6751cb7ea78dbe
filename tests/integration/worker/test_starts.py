"""When an action's RUNNING checkpoint is written: before a write's call; for a read, only if its
call outlasts READ_START_DELAY_SECONDS.

A quick READ_ONLY call is recorded once, SUCCEEDED (in the final commit when it is the last
action); a slow one gets its RUNNING checkpoint while it runs (seen from inside the adapter on
another connection), and the run waits for that start (held here at a gate inside the grouped
write, so the order is shown, not timed) before it writes anything after the call. A write's
adapter is only called once its RUNNING checkpoint is committed.
"""

import threading

import psycopg
import pytest

from executions.worker import groupcommit
from executions.worker.runner import READ_START_DELAY_SECONDS
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
    transient,
    wait_until,
)

pytestmark = pytest.mark.django_db(transaction=True)

LEASE_SECONDS = 30.0  # long enough that no lease lapses while a gate holds a write
GATE_SECONDS = 15.0  # seconds a gate waits before the test is failed for it


class HeldWrites:
    """Wraps a runtime's grouped statements: the start waits at a gate (open unless `gated`),
    and the order in which the statements ran is recorded."""

    def __init__(self, runtime, *, gated: bool = True) -> None:
        writes = runtime._deps.writes
        self.order: list[str] = []
        self.start_threads: list[threading.Thread] = []  # where each start statement ran
        self.start_entered = threading.Event()
        self.start_gate = threading.Event()
        if not gated:
            self.start_gate.set()
        self._wrap(writes.starts, "start", gate=True)
        self._wrap(writes.successes, "save", gate=False)
        self._wrap(writes.records, "record", gate=False)
        self._wrap(writes.finals, "final", gate=False)

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


def test_read__a_quick_read_is_recorded_once_in_the_final_commit(conn, make_flow, runtime_dsn):
    seen: list = []

    def read(ctx):
        seen.append(_checkpoint(runtime_dsn, ctx.execution_id, "a"))
        return ok({"read": 1})

    adapter = ScriptedAdapter(script=[read])
    accepted = enqueue(conn, make_flow([action("a", "A")]))
    with runtime_for(runtime_dsn, registry(binding("A", adapter))) as runtime:
        held = HeldWrites(runtime, gated=False)
        assert run_next(conn, runtime, lease_seconds=LEASE_SECONDS).status == "completed"

    assert seen == [None]  # called with no checkpoint written
    assert held.order == ["final sent", "final returned"]  # its only write: the final commit
    saved = checkpoint_rows(conn, accepted.execution_id)["a"]
    assert (saved["status"], saved["attempt"], saved["output"]) == ("SUCCEEDED", 1, {"read": 1})
    assert saved["started_at"] <= saved["finished_at"]
    assert (saved["fencing_token"], saved["external_key"]) == (1, f"{accepted.execution_id}:a")
    assert request_row(conn, accepted.request_id)["state"] == "DONE"


def test_read__a_quick_read_before_another_action_is_recorded_in_one_statement(
    conn, make_flow, runtime_dsn
):
    adapter = ScriptedAdapter(default=ok({"read": 1}))
    accepted = enqueue(conn, make_flow([action("a", "A"), action("b", "A")]))
    with runtime_for(runtime_dsn, registry(binding("A", adapter))) as runtime:
        held = HeldWrites(runtime, gated=False)
        assert run_next(conn, runtime, lease_seconds=LEASE_SECONDS).status == "completed"

    assert held.order == ["record sent", "record returned", "final sent", "final returned"]
    rows = checkpoint_rows(conn, accepted.execution_id)
    assert {k: (c["status"], c["attempt"]) for k, c in rows.items()} == {
        "a": ("SUCCEEDED", 1),
        "b": ("SUCCEEDED", 1),
    }
    assert rows["a"]["finished_at"] < rows["b"]["started_at"]


def test_read__a_slow_read_gets_its_running_checkpoint_while_it_runs(conn, make_flow, runtime_dsn):
    seen: dict = {}

    def slow_read(ctx):
        seen["at_call"] = _checkpoint(runtime_dsn, ctx.execution_id, "a")
        # The call outlasts READ_START_DELAY_SECONDS: its start is written while it runs.
        seen["running"] = wait_until(
            lambda: _checkpoint(runtime_dsn, ctx.execution_id, "a"),
            timeout=READ_START_DELAY_SECONDS + GATE_SECONDS,
            what="the RUNNING checkpoint while the read runs",
        )
        return ok({"read": True})

    adapter = ScriptedAdapter(script=[slow_read])
    accepted = enqueue(conn, make_flow([action("a", "A")]))
    with runtime_for(runtime_dsn, registry(binding("A", adapter))) as runtime:
        held = HeldWrites(runtime, gated=False)
        assert run_next(conn, runtime, lease_seconds=LEASE_SECONDS).status == "completed"

    assert seen["at_call"] is None
    running = seen["running"]
    assert (running["status"], running["attempt"], running["effect"]) == ("RUNNING", 1, "READ_ONLY")
    # Written by another thread, not the run's, while the call went on.
    assert held.start_threads and held.start_threads[0].name == "worker-group-writer"
    assert held.order == ["start sent", "start returned", "final sent", "final returned"]
    saved = checkpoint_rows(conn, accepted.execution_id)["a"]
    assert (saved["status"], saved["attempt"], saved["output"]) == ("SUCCEEDED", 1, {"read": True})
    assert saved["started_at"] == running["started_at"]  # the RUNNING row, moved on


def test_read__its_success_is_written_only_after_a_start_in_flight(
    conn, make_flow, runtime_dsn, monkeypatch
):
    accepted = enqueue(conn, make_flow([action("a", "A")]))
    waiting = threading.Event()
    result = groupcommit.Pending.result
    held: HeldWrites | None = None

    def watched(self):  # the run is about to wait for its start
        waiting.set()
        return result(self)

    def read_until_its_start_is_sent(ctx):
        assert held is not None and held.start_entered.wait(READ_START_DELAY_SECONDS + 15)
        return ok({"read": 1})

    adapter = ScriptedAdapter(script=[read_until_its_start_is_sent])
    monkeypatch.setattr(groupcommit.Pending, "result", watched)
    with runtime_for(runtime_dsn, registry(binding("A", adapter))) as runtime:
        held = HeldWrites(runtime)
        thread, outcome = _in_thread(lambda: run_next(conn, runtime, lease_seconds=LEASE_SECONDS))
        # The read returned while its start is held at the gate; the run waits for the start...
        assert waiting.wait(GATE_SECONDS), "the run did not wait for its start"
        assert len(adapter.calls) == 1
        assert held.order == []  # ...and has sent nothing else meanwhile
        assert checkpoint_rows(conn, accepted.execution_id) == {}
        held.start_gate.set()
        thread.join(GATE_SECONDS)

    assert "error" not in outcome, outcome
    assert outcome["result"].status == "completed"
    assert held.order == ["start sent", "start returned", "final sent", "final returned"]
    assert checkpoint_rows(conn, accepted.execution_id)["a"]["status"] == "SUCCEEDED"


def test_read__a_quick_read_that_fails_is_settled_from_a_start_written_after_it(
    conn, make_flow, runtime_dsn
):
    adapter = ScriptedAdapter(script=[transient("HTTP_503")])
    accepted = enqueue(conn, make_flow([action("a", "A")]))
    with runtime_for(runtime_dsn, registry(binding("A", adapter, max_attempts=3))) as runtime:
        held = HeldWrites(runtime, gated=False)
        result = run_next(conn, runtime, lease_seconds=LEASE_SECONDS)
    assert (result.status, result.execution_status) == ("failed", "RETRY_WAIT")

    assert held.order == ["start sent", "start returned"]  # then settled in the retry's commit
    checkpoint = checkpoint_rows(conn, accepted.execution_id)["a"]
    assert (checkpoint["status"], checkpoint["attempt"], checkpoint["error_code"]) == (
        "FAILED",
        1,
        "HTTP_503",
    )
    assert execution_row(conn, accepted.execution_id)["status"] == "RETRY_WAIT"


def test_read__a_holder_superseded_during_its_call_writes_nothing(conn, make_flow, runtime_dsn):
    accepted = enqueue(conn, make_flow([action("a", "A")]))

    def read_then_lose_the_execution(ctx):
        # Another holder takes over while the call runs, before anything of it is written.
        with psycopg.connect(runtime_dsn, autocommit=True) as other:
            other.execute(
                "UPDATE execution SET fencing_token = fencing_token + 1 WHERE id = %s",
                [ctx.execution_id],
            )
        return ok({"read": 1})

    adapter = ScriptedAdapter(script=[read_then_lose_the_execution])
    with runtime_for(runtime_dsn, registry(binding("A", adapter))) as runtime:
        held = HeldWrites(runtime, gated=False)
        result = run_next(conn, runtime, lease_seconds=LEASE_SECONDS)

    assert result.status == "superseded"
    assert len(adapter.calls) == 1
    # The fenced final commit, carrying the read's checkpoint, matched nothing.
    assert held.order == ["final sent", "final returned"]
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
