"""When an action's RUNNING checkpoint is written: before its adapter is called, for every
effect, reads included.

Seen from inside the adapter on another connection (committed rows only), and from the order in
which the grouped statements ran: start, then the call, then the save, then the final commit. A
read that fails is settled from its RUNNING checkpoint; a holder superseded during a read's call
writes nothing after it, and leaves that checkpoint for the next holder.
"""

import psycopg
import pytest

from executions.queue.steps import Plan
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
)

pytestmark = pytest.mark.django_db(transaction=True)

LEASE_SECONDS = 30.0  # long enough that no lease lapses while a test looks
EFFECTS = ["READ_ONLY", "IDEMPOTENT_WRITE", "NON_IDEMPOTENT_WRITE"]


class RecordedWrites:
    """Wraps a runtime's grouped statements and records the order in which they ran (and where
    a test's adapter says it was called)."""

    def __init__(self, runtime) -> None:
        writes = runtime._deps.writes
        self.order: list[str] = []
        self._wrap(writes.starts, "start")
        self._wrap(writes.successes, "save")
        self._wrap(writes.finals, "final")

    def _wrap(self, group, name: str) -> None:
        write_many = group.write_many

        def recorded(items):
            plan = write_many(items)

            def steps():
                self.order.append(f"{name} sent")
                try:
                    return (yield from plan.steps)
                finally:
                    self.order.append(f"{name} returned")

            return Plan(steps(), atomic=plan.atomic, before_commit=plan.before_commit)

        group.write_many = recorded


def _checkpoint(dsn: str, execution_id: str, action_id: str) -> dict | None:
    """The action's checkpoint as another connection sees it (committed rows only)."""
    with psycopg.connect(dsn, autocommit=True) as other:
        return checkpoint_rows(other, execution_id).get(action_id)


@pytest.mark.parametrize("effect", EFFECTS)
def test_action__its_adapter_is_called_only_after_its_running_checkpoint_commits(
    conn, make_flow, runtime_dsn, effect
):
    seen: list = []
    order: list[str] = []

    def call(ctx):
        order.append("called")
        seen.append(_checkpoint(runtime_dsn, ctx.execution_id, "a"))
        return ok({"done": True})

    adapter = ScriptedAdapter(script=[call])
    accepted = enqueue(conn, make_flow([action("a", "A")]))
    with runtime_for(runtime_dsn, registry(binding("A", adapter, effect=effect))) as runtime:
        recorded = RecordedWrites(runtime)
        order = recorded.order  # where the adapter says it was called
        result = run_next(conn, runtime, lease_seconds=LEASE_SECONDS)

    assert result.status == "completed"
    (checkpoint,) = seen
    assert checkpoint is not None, "the adapter was called before its RUNNING checkpoint committed"
    assert (checkpoint["status"], checkpoint["attempt"], checkpoint["effect"]) == (
        "RUNNING",
        1,
        effect,
    )
    assert checkpoint["external_key"] == f"{accepted.execution_id}:a"
    # The run sent the start and waited for it to return before it called the adapter.
    assert recorded.order == [
        "start sent",
        "start returned",
        "called",
        "save sent",
        "save returned",
        "final sent",
        "final returned",
    ]
    saved = checkpoint_rows(conn, accepted.execution_id)["a"]
    assert (saved["status"], saved["attempt"], saved["output"]) == ("SUCCEEDED", 1, {"done": True})
    assert saved["started_at"] == checkpoint["started_at"]  # the RUNNING row, moved on
    assert request_row(conn, accepted.request_id)["state"] == "DONE"


def test_read__each_read_is_saved_before_the_next_action_starts(conn, make_flow, runtime_dsn):
    adapter = ScriptedAdapter(default=ok({"read": 1}))
    accepted = enqueue(conn, make_flow([action("a", "A"), action("b", "A")]))
    with runtime_for(runtime_dsn, registry(binding("A", adapter))) as runtime:
        recorded = RecordedWrites(runtime)
        assert run_next(conn, runtime, lease_seconds=LEASE_SECONDS).status == "completed"

    assert [entry for entry in recorded.order if entry.endswith("sent")] == [
        "start sent",
        "save sent",
        "start sent",
        "save sent",
        "final sent",
    ]
    rows = checkpoint_rows(conn, accepted.execution_id)
    assert {k: (c["status"], c["attempt"]) for k, c in rows.items()} == {
        "a": ("SUCCEEDED", 1),
        "b": ("SUCCEEDED", 1),
    }
    assert rows["a"]["finished_at"] <= rows["b"]["started_at"]


def test_read__a_read_that_fails_is_settled_from_its_running_checkpoint(
    conn, make_flow, runtime_dsn
):
    adapter = ScriptedAdapter(script=[transient("HTTP_503")])
    accepted = enqueue(conn, make_flow([action("a", "A")]))
    with runtime_for(runtime_dsn, registry(binding("A", adapter, max_attempts=3))) as runtime:
        recorded = RecordedWrites(runtime)
        result = run_next(conn, runtime, lease_seconds=LEASE_SECONDS)
    assert (result.status, result.execution_status) == ("failed", "RETRY_WAIT")

    assert recorded.order == ["start sent", "start returned"]  # then settled in the retry's commit
    checkpoint = checkpoint_rows(conn, accepted.execution_id)["a"]
    assert (checkpoint["status"], checkpoint["attempt"], checkpoint["error_code"]) == (
        "FAILED",
        1,
        "HTTP_503",
    )
    assert execution_row(conn, accepted.execution_id)["status"] == "RETRY_WAIT"


def test_read__a_holder_superseded_during_its_call_writes_nothing_after_it(
    conn, make_flow, runtime_dsn
):
    accepted = enqueue(conn, make_flow([action("a", "A")]))

    def read_then_lose_the_execution(ctx):
        # Another holder takes over while the call runs, after its start committed.
        with psycopg.connect(runtime_dsn, autocommit=True) as other:
            other.execute(
                "UPDATE execution SET fencing_token = fencing_token + 1 WHERE id = %s",
                [ctx.execution_id],
            )
        return ok({"read": 1})

    adapter = ScriptedAdapter(script=[read_then_lose_the_execution])
    with runtime_for(runtime_dsn, registry(binding("A", adapter))) as runtime:
        recorded = RecordedWrites(runtime)
        result = run_next(conn, runtime, lease_seconds=LEASE_SECONDS)

    assert result.status == "superseded"
    assert len(adapter.calls) == 1
    # The fenced save matched nothing; no final commit was tried.
    assert recorded.order == ["start sent", "start returned", "save sent", "save returned"]
    checkpoint = checkpoint_rows(conn, accepted.execution_id)["a"]
    # Left RUNNING for the next holder, which retries it within max_attempts.
    assert (checkpoint["status"], checkpoint["attempt"], checkpoint["output"]) == (
        "RUNNING",
        1,
        None,
    )
    execution = execution_row(conn, accepted.execution_id)
    assert (execution["status"], execution["fencing_token"]) == ("RUNNING", 2)
    assert request_row(conn, accepted.request_id)["blocked_by_id"] == accepted.execution_id
