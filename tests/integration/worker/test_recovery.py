"""Recovery of a reclaimed execution from its checkpoints, after a simulated crash.

`SimulatedCrash` leaves the attempt exactly as a dead process would: nothing after the adapter
call runs. Each recovery then rebuilds the worker's persistence side from nothing (a new
runtime, new connections, new adapter objects) and resumes from the database alone.
"""

import pytest

from executions.models import ActionExecution, AuditEvent
from executions.pictures import insight
from orquestador import display, errors
from reconciliation import explain
from tests.support.worker import (
    ScriptedAdapter,
    SimulatedCrash,
    action,
    audit_events,
    binding,
    checkpoint_rows,
    claim,
    enqueue,
    execution_row,
    expire_lease,
    ok,
    operator_resolves,
    registry,
    request_row,
    run_claim,
    run_next,
    runtime_for,
    transient,
    unknown,
    wait_until,
)

pytestmark = pytest.mark.django_db(transaction=True)


def _crash(conn, runtime_dsn, *bindings, lease_seconds=1.5):
    """Run the next execution until an adapter 'kills' the process; let its lease expire. The
    lease must outlast the run's way to its call on a loaded machine (at 0.3 s, CI once saw the
    run superseded before its adapter was called)."""
    with runtime_for(runtime_dsn, registry(*bindings)) as runtime:
        (found,) = claim(conn, "doomed", lease_seconds=lease_seconds)
        with pytest.raises(SimulatedCrash):
            run_claim(runtime, found)
    expire_lease(conn, found.execution_id)
    return found


def _recover(conn, runtime_dsn, *bindings):
    with runtime_for(runtime_dsn, registry(*bindings)) as runtime:
        return run_next(conn, runtime, owner="rescuer")


def test_recovery__checkpoints_survive_a_crash_and_succeeded_actions_are_not_rerun(
    conn, make_flow, runtime_dsn
):
    flow_id = make_flow(
        [
            action("quote", "Q"),
            action("book", "B", input={"price": {"from": "/actions/quote/price"}}),
        ],
        updates=[{"path": "/booking", "from": "/actions/book"}],
    )
    accepted = enqueue(conn, flow_id)
    crashed = _crash(
        conn,
        runtime_dsn,
        binding("Q", ScriptedAdapter(default=ok({"price": 10}))),
        binding("B", ScriptedAdapter(script=[SimulatedCrash()]), effect="IDEMPOTENT_WRITE"),
    )
    after_crash = checkpoint_rows(conn, accepted.execution_id)
    assert after_crash["quote"]["status"] == "SUCCEEDED"
    assert after_crash["book"]["status"] == "RUNNING"
    assert execution_row(conn, accepted.execution_id)["status"] == "RUNNING"

    quote, book = ScriptedAdapter(), ScriptedAdapter(default=ok({"ref": "bk-1"}))
    result = _recover(
        conn, runtime_dsn, binding("Q", quote), binding("B", book, effect="IDEMPOTENT_WRITE")
    )

    assert result.status == "completed"
    assert quote.calls == []  # SUCCEEDED is reused, not re-run
    (call,) = book.calls
    assert call.input == {"price": 10}  # mapped from the recovered output
    assert (call.attempt, call.external_key) == (2, f"{accepted.execution_id}:book")
    execution = execution_row(conn, accepted.execution_id)
    assert (execution["attempts"], execution["fencing_token"]) == (2, crashed.fence.token + 1)
    assert request_row(conn, accepted.request_id)["data"] == {"booking": {"ref": "bk-1"}}


def test_recovery__a_non_idempotent_write_in_flight_goes_to_reconciliation(
    conn, make_flow, runtime_dsn
):
    accepted = enqueue(conn, make_flow([action("charge", "W")]))
    _crash(
        conn,
        runtime_dsn,
        binding("W", ScriptedAdapter(script=[SimulatedCrash()]), effect="NON_IDEMPOTENT_WRITE"),
    )

    again = ScriptedAdapter()
    result = _recover(conn, runtime_dsn, binding("W", again, effect="NON_IDEMPOTENT_WRITE"))

    assert result.status == "failed"
    assert again.calls == []  # never repeated
    execution = execution_row(conn, accepted.execution_id)
    assert (execution["status"], execution["error_code"]) == (
        "RECONCILIATION_REQUIRED",
        errors.UNCERTAIN_WRITE,
    )
    assert request_row(conn, accepted.request_id)["blocked_by_id"] == accepted.execution_id
    assert checkpoint_rows(conn, accepted.execution_id)["charge"]["status"] == "RUNNING"
    assert audit_events(conn, accepted.request_id)[-1] == (
        "RECONCILIATION_REQUIRED",
        {
            "transitionId": "go",
            "principal": "system",
            "actionId": "charge",
            "errorCode": errors.UNCERTAIN_WRITE,
        },
    )


def test_recovery__a_read_in_flight_at_its_last_attempt_is_exhausted(conn, make_flow, runtime_dsn):
    accepted = enqueue(conn, make_flow([action("a", "R")]))

    def crash_once_running(ctx):  # a slow read: its RUNNING checkpoint is written meanwhile
        wait_until(lambda: "a" in checkpoint_rows(conn, accepted.execution_id))
        raise SimulatedCrash()

    _crash(
        conn,
        runtime_dsn,
        binding("R", ScriptedAdapter(script=[crash_once_running]), max_attempts=1),
        lease_seconds=10,  # the start, sent half a second into the call, finds the lease held
    )
    again = ScriptedAdapter()
    _recover(conn, runtime_dsn, binding("R", again, max_attempts=1))
    assert again.calls == []
    execution = execution_row(conn, accepted.execution_id)
    assert (execution["status"], execution["error_code"]) == ("FAILED", errors.RETRIES_EXHAUSTED)
    assert request_row(conn, accepted.request_id)["blocked_by_id"] is None


def test_recovery__a_changed_effect_is_a_contract_mismatch_for_an_operator(
    conn, make_flow, runtime_dsn
):
    accepted = enqueue(conn, make_flow([action("a", "A"), action("b", "B")]))
    _crash(
        conn,
        runtime_dsn,
        binding("A", ScriptedAdapter(default=ok({"v": 1}))),
        binding("B", ScriptedAdapter(script=[SimulatedCrash()])),
    )
    # The contract of A now declares another effect: its checkpoint is not what would be sent.
    reread = ScriptedAdapter()
    result = _recover(
        conn,
        runtime_dsn,
        binding("A", reread, effect="IDEMPOTENT_WRITE"),
        binding("B", ScriptedAdapter()),
    )
    assert result.status == "failed"
    assert reread.calls == []  # a foreign result is never used, nor silently redone
    execution = execution_row(conn, accepted.execution_id)
    assert (execution["status"], execution["error_code"]) == (
        "RECONCILIATION_REQUIRED",
        errors.CONTRACT_MISMATCH,
    )
    assert "effect" in execution["error_detail"]


def test_recovery__an_operators_recorded_output_is_reused(conn, make_flow, runtime_dsn):
    accepted = enqueue(
        conn,
        make_flow(
            [action("charge", "W")], updates=[{"path": "/charge", "from": "/actions/charge"}]
        ),
    )
    with runtime_for(
        runtime_dsn,
        registry(binding("W", ScriptedAdapter(default=unknown()), effect="NON_IDEMPOTENT_WRITE")),
    ) as runtime:
        run_next(conn, runtime)
    operator_resolves(
        conn, accepted.execution_id, action_id="charge", happened=True, output={"id": "ch_9"}
    )

    again = ScriptedAdapter()
    result = _recover(conn, runtime_dsn, binding("W", again, effect="NON_IDEMPOTENT_WRITE"))

    assert result.status == "completed"
    assert again.calls == []
    assert request_row(conn, accepted.request_id)["data"] == {"charge": {"id": "ch_9"}}


def test_recovery__an_authorised_replay_runs_once_with_the_same_key_past_max_attempts(
    conn, make_flow, runtime_dsn
):
    accepted = enqueue(conn, make_flow([action("charge", "W")]))
    first = ScriptedAdapter(default=unknown())
    with runtime_for(
        runtime_dsn, registry(binding("W", first, effect="NON_IDEMPOTENT_WRITE", max_attempts=1))
    ) as runtime:
        run_next(conn, runtime)
    operator_resolves(conn, accepted.execution_id, action_id="charge", happened=False)

    replay = ScriptedAdapter(script=[transient()])
    write = binding("W", replay, effect="NON_IDEMPOTENT_WRITE", max_attempts=1)
    _recover(conn, runtime_dsn, write)

    (call,) = replay.calls
    assert (call.attempt, call.external_key) == (2, first.calls[0].external_key)
    # One replay was granted, and it is spent: a transient failure now ends the execution.
    execution = execution_row(conn, accepted.execution_id)
    assert (execution["status"], execution["error_code"]) == ("FAILED", errors.RETRIES_EXHAUSTED)
    assert request_row(conn, accepted.request_id)["blocked_by_id"] is None


def test_recovery__an_authorised_replay_that_succeeds_completes(conn, make_flow, runtime_dsn):
    accepted = enqueue(conn, make_flow([action("charge", "W")]))
    with runtime_for(
        runtime_dsn,
        registry(binding("W", ScriptedAdapter(default=unknown()), effect="NON_IDEMPOTENT_WRITE")),
    ) as runtime:
        run_next(conn, runtime)
    operator_resolves(conn, accepted.execution_id, action_id="charge", happened=False)
    replay = ScriptedAdapter(default=ok({"id": "ch_2"}))
    assert (
        _recover(conn, runtime_dsn, binding("W", replay, effect="NON_IDEMPOTENT_WRITE")).status
        == "completed"
    )
    assert len(replay.calls) == 1
    assert checkpoint_rows(conn, accepted.execution_id)["charge"]["attempt"] == 2


def test_recovery__the_takeover_is_in_the_audit_and_the_case_says_who_lost_the_lease(
    conn, make_flow, runtime_dsn
):
    accepted = enqueue(conn, make_flow([action("charge", "W")]))
    crashed = _crash(
        conn,
        runtime_dsn,
        binding("W", ScriptedAdapter(script=[SimulatedCrash()]), effect="NON_IDEMPOTENT_WRITE"),
    )
    expired_at = execution_row(conn, accepted.execution_id)["lease_expires_at"]
    _recover(conn, runtime_dsn, binding("W", ScriptedAdapter(), effect="NON_IDEMPOTENT_WRITE"))

    kinds = [kind for kind, _ in audit_events(conn, accepted.request_id)]
    assert kinds[-2:] == ["LEASE_TAKEN_OVER", "RECONCILIATION_REQUIRED"]
    timeline = list(AuditEvent.objects.filter(request_id=accepted.request_id).order_by("id"))
    (lost,) = insight.takeovers(timeline)
    assert (lost.previous_owner, lost.previous_token) == ("doomed", crashed.fence.token)
    assert (lost.new_owner, lost.new_token) == ("rescuer", crashed.fence.token + 1)
    assert lost.lease_expired_at == expired_at
    checkpoint = ActionExecution.objects.get(execution_id=accepted.execution_id)
    why = explain.why(error_code=None, error_detail=None, uncertain=[checkpoint], timeline=timeline)
    assert why.startswith(f"Worker doomed lost its lease at {display.utc(expired_at)} while ")
    assert "was in flight" in why


def test_recovery__a_read_that_crashed_left_running_is_retried_within_max_attempts(
    conn, make_flow, runtime_dsn
):
    accepted = enqueue(conn, make_flow([action("a", "R")]))
    _crash(
        conn, runtime_dsn, binding("R", ScriptedAdapter(script=[SimulatedCrash()]), max_attempts=2)
    )
    crashed = checkpoint_rows(conn, accepted.execution_id)["a"]
    assert (crashed["status"], crashed["attempt"]) == ("RUNNING", 1)  # committed before the call

    again = ScriptedAdapter(default=ok({"v": 1}))
    assert _recover(conn, runtime_dsn, binding("R", again, max_attempts=2)).status == "completed"
    assert [call.attempt for call in again.calls] == [2]  # the same key, the next attempt
    assert again.calls[0].external_key == f"{accepted.execution_id}:a"
    checkpoint = checkpoint_rows(conn, accepted.execution_id)["a"]
    assert (checkpoint["status"], checkpoint["attempt"], checkpoint["fencing_token"]) == (
        "SUCCEEDED",
        2,
        2,
    )


def test_recovery__a_read_that_crashed_with_its_attempts_used_is_not_called_again(
    conn, make_flow, runtime_dsn
):
    accepted = enqueue(conn, make_flow([action("a", "R")]))
    _crash(
        conn, runtime_dsn, binding("R", ScriptedAdapter(script=[SimulatedCrash()]), max_attempts=1)
    )
    again = ScriptedAdapter(default=ok({"v": 1}))
    assert _recover(conn, runtime_dsn, binding("R", again, max_attempts=1)).status == "failed"

    assert again.calls == []
    execution = execution_row(conn, accepted.execution_id)
    assert (execution["status"], execution["error_code"]) == ("FAILED", errors.RETRIES_EXHAUSTED)
    assert request_row(conn, accepted.request_id)["blocked_by_id"] is None  # a read: released
