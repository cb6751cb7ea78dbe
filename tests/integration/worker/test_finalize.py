"""The final transaction: all of it or none of it, and recovery by lease when it fails."""

import psycopg
import pytest

from orquestador import errors
from tests.support.worker import (
    FAST,
    ScriptedAdapter,
    action,
    audit_events,
    binding,
    checkpoint_rows,
    claim,
    enqueue,
    execution_row,
    expire_lease,
    ok,
    registry,
    request_row,
    run_claim,
    run_next,
    runtime_for,
)

pytestmark = pytest.mark.django_db(transaction=True)

# Installed by the schema owner for one test: the last step of the final transaction (appending
# TRANSITION_COMPLETED) fails, after the request and the execution were already written.
FAIL_COMPLETION = """
CREATE FUNCTION test_fail_completion() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.type = 'TRANSITION_COMPLETED' THEN
        RAISE EXCEPTION 'injected failure of the final transaction';
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER test_fail_completion BEFORE INSERT ON audit_event
    FOR EACH ROW EXECUTE FUNCTION test_fail_completion();
"""
UNDO_FAIL_COMPLETION = """
DROP TRIGGER test_fail_completion ON audit_event;
DROP FUNCTION test_fail_completion();
"""


@pytest.fixture
def failing_completion(migration_dsn):
    with psycopg.connect(migration_dsn, autocommit=True) as owner:
        owner.execute(FAIL_COMPLETION)
        try:
            yield lambda: owner.execute(UNDO_FAIL_COMPLETION)
        finally:
            owner.execute("DROP TRIGGER IF EXISTS test_fail_completion ON audit_event")
            owner.execute("DROP FUNCTION IF EXISTS test_fail_completion()")


def test_finalize__rolls_back_as_a_whole_and_recovers_by_lease(
    conn, make_flow, runtime_dsn, failing_completion
):
    adapter = ScriptedAdapter(default=ok({"v": 7}))
    flow_id = make_flow([action("a", "A")], updates=[{"path": "/v", "from": "/actions/a/v"}])
    accepted = enqueue(conn, flow_id, data={"before": True})

    with runtime_for(runtime_dsn, registry(binding("A", adapter))) as runtime:
        # The worker's own lease: the failed final write is retried for up to half of it (no
        # heartbeat renews it here), then the error is raised and the lease given up.
        (found,) = claim(conn, "worker-a", lease_seconds=FAST.lease_seconds)
        with pytest.raises(psycopg.errors.RaiseException, match="injected failure"):
            run_claim(runtime, found)

    # Nothing of the final transaction stuck; the checkpoint did.
    request = request_row(conn, accepted.request_id)
    assert request["data"] == {"before": True}
    assert (request["state"], request["revision"], request["version"]) == ("DRAFT", 2, 2)
    assert request["blocked_by_id"] == accepted.execution_id
    execution = execution_row(conn, accepted.execution_id)
    assert (execution["status"], execution["result"], execution["finished_at"]) == (
        "RUNNING",
        None,
        None,
    )
    assert checkpoint_rows(conn, accepted.execution_id)["a"]["status"] == "SUCCEEDED"
    assert [t for t, _ in audit_events(conn, accepted.request_id)] == ["TRANSITION_ACCEPTED"]

    failing_completion()  # the fault is gone; the lease runs out; another claim resumes it
    expire_lease(conn, accepted.execution_id)
    with runtime_for(runtime_dsn, registry(binding("A", adapter))) as runtime:
        assert run_next(conn, runtime, owner="worker-b").status == "completed"

    assert len(adapter.calls) == 1  # the SUCCEEDED action was not repeated
    request = request_row(conn, accepted.request_id)
    assert request["data"] == {"before": True, "v": 7}
    assert (request["state"], request["revision"], request["blocked_by_id"]) == ("DONE", 3, None)


@pytest.mark.parametrize(
    "meddling",
    [
        "UPDATE request SET version = version + 1 WHERE id = %s",
        "UPDATE request SET revision = revision + 1 WHERE id = %s",
        "UPDATE request SET state = 'OTHER' WHERE id = %s",
    ],
    ids=["version", "revision", "state"],
)
def test_finalize__refuses_a_request_that_changed_during_the_run(
    conn, make_flow, runtime_dsn, meddling
):
    accepted = None

    def meddle(ctx):
        # Someone writes the request behind the block while the action runs.
        conn.execute(meddling, [accepted.request_id])
        return ok()

    accepted = enqueue(conn, make_flow([action("a", "A")]))
    with runtime_for(runtime_dsn, registry(binding("A", ScriptedAdapter(script=[meddle])))) as rt:
        assert run_next(conn, rt).status == "failed"

    execution = execution_row(conn, accepted.execution_id)
    assert (execution["status"], execution["error_code"]) == ("FAILED", errors.REQUEST_MODIFIED)
    request = request_row(conn, accepted.request_id)
    assert (request["data"], request["blocked_by_id"]) == ({}, None)
    # The action's output was committed before the final commit, which then wrote nothing.
    assert checkpoint_rows(conn, accepted.execution_id)["a"]["status"] == "SUCCEEDED"


def test_finalize__a_checkpoint_no_longer_succeeded_is_a_contract_mismatch_for_an_operator(
    conn, make_flow, runtime_dsn
):
    accepted = None

    def unsettle_a(ctx):
        # Something other than this holder rewrites the first action's checkpoint meanwhile.
        conn.execute(
            "UPDATE action_execution SET status = 'UNKNOWN' "
            "WHERE execution_id = %s AND action_id = 'a'",
            [accepted.execution_id],
        )
        return ok()

    accepted = enqueue(conn, make_flow([action("a", "A"), action("b", "B")]))
    reg = registry(
        binding("A", ScriptedAdapter(), effect="IDEMPOTENT_WRITE"),
        binding("B", ScriptedAdapter(script=[unsettle_a])),
    )
    with runtime_for(runtime_dsn, reg) as rt:
        assert run_next(conn, rt).status == "failed"

    execution = execution_row(conn, accepted.execution_id)
    assert (execution["status"], execution["error_code"]) == (
        "RECONCILIATION_REQUIRED",
        errors.CONTRACT_MISMATCH,
    )
    assert "a UNKNOWN" in execution["error_detail"]
    request = request_row(conn, accepted.request_id)
    assert (request["state"], request["blocked_by_id"]) == ("DRAFT", accepted.execution_id)


@pytest.mark.parametrize("effect", ["READ_ONLY", "IDEMPOTENT_WRITE", "NON_IDEMPOTENT_WRITE"])
def test_finalize__every_action_is_started_and_saved_before_the_final_commit(
    conn, make_flow, runtime_dsn, effect
):
    flow_id = make_flow(
        [action("a", "A"), action("b", "B")], updates=[{"path": "/v", "from": "/actions/b/v"}]
    )
    accepted = enqueue(conn, flow_id)
    reg = registry(
        binding("A", ScriptedAdapter(default=ok({"a": 1})), effect=effect),
        binding("B", ScriptedAdapter(default=ok({"v": 2})), effect=effect),
    )
    with runtime_for(runtime_dsn, reg) as runtime:
        writes = runtime._deps.writes
        assert run_next(conn, runtime).status == "completed"
        made = (writes.starts.items, writes.successes.items, writes.finals.items)
    # Reads and writes alike: a RUNNING checkpoint before each call, its SUCCEEDED one committed
    # on its own right after, the last one included, then the final commit.
    assert made == (2, 2, 1)

    checkpoints = checkpoint_rows(conn, accepted.execution_id)
    assert {k: (c["status"], c["attempt"], c["output"]) for k, c in checkpoints.items()} == {
        "a": ("SUCCEEDED", 1, {"a": 1}),
        "b": ("SUCCEEDED", 1, {"v": 2}),
    }
    execution = execution_row(conn, accepted.execution_id)
    assert checkpoints["a"]["finished_at"] <= checkpoints["b"]["started_at"]
    assert checkpoints["b"]["started_at"] <= checkpoints["b"]["finished_at"]
    assert checkpoints["b"]["finished_at"] <= execution["finished_at"]
    assert request_row(conn, accepted.request_id)["data"] == {"v": 2}


def test_finalize__a_read_whose_checkpoint_changed_during_its_call_is_never_completed(
    conn, make_flow, runtime_dsn
):
    accepted = None

    def another_writer_settles_it(ctx):
        # Something other than this holder rewrites this read's RUNNING checkpoint while the
        # call runs: its SUCCEEDED save must not overwrite it, nor the run complete.
        conn.execute(
            "UPDATE action_execution SET status = 'UNKNOWN' "
            "WHERE execution_id = %s AND action_id = 'a'",
            [accepted.execution_id],
        )
        return ok({"v": 1})

    accepted = enqueue(conn, make_flow([action("a", "A")]))
    reg = registry(binding("A", ScriptedAdapter(script=[another_writer_settles_it])))
    with runtime_for(runtime_dsn, reg) as rt:
        writes = rt._deps.writes
        assert run_next(conn, rt).status == "superseded"
        # The save was sent and matched nothing, so the final commit was never tried.
        assert (writes.starts.items, writes.successes.items, writes.finals.items) == (1, 1, 0)

    checkpoint = checkpoint_rows(conn, accepted.execution_id)["a"]
    assert (checkpoint["status"], checkpoint["output"]) == ("UNKNOWN", None)
    execution = execution_row(conn, accepted.execution_id)
    assert execution["status"] == "RUNNING"  # left for recovery by lease
    assert request_row(conn, accepted.request_id)["blocked_by_id"] == accepted.execution_id
    assert "TRANSITION_COMPLETED" not in [t for t, _ in audit_events(conn, accepted.request_id)]
