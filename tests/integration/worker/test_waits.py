"""The worker and wait actions: suspend, resume from checkpoints, time out
(docs/worker-protocol.md#waits)."""

import pytest

from executions.api.resumes import execution_resume
from orquestador.auth import EXECUTIONS_RESUME, Principal
from tests.support.worker import (
    ScriptedAdapter,
    action,
    audit_events,
    binding,
    checkpoint_rows,
    claim,
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

SCHEMA = {"type": "object", "properties": {"approved": {"type": "boolean"}}}
MARIA = Principal(subject="maria", tenant="acme", permissions=frozenset({EXECUTIONS_RESUME}))


def wait(timeout: int = 3600, **extra) -> dict:
    return {
        "id": "approval",
        "wait": {"event": "manager.approval", "payloadSchema": SCHEMA, "timeoutSeconds": timeout}
        | extra,
    }


DECIDE = [
    {
        "id": "yes",
        "when": {"eq": [{"from": "/actions/approval/approved"}, True]},
        "target": "DONE",
        "outcome": "APPROVED",
    },
    {"id": "no", "when": True, "target": "OTHER", "outcome": "DECLINED"},
]


@pytest.fixture
def quote():
    return ScriptedAdapter(default=ok({"price": 10}))


@pytest.fixture
def charge():
    return ScriptedAdapter(default=ok({"charged": True}))


@pytest.fixture
def runtime(runtime_dsn, quote, charge):
    reg = registry(binding("Q", quote), binding("C", charge, effect="NON_IDEMPOTENT_WRITE"))
    with runtime_for(runtime_dsn, reg) as opened:
        yield opened


def flow(make_flow, wait_action: dict, *, write_first: bool = False) -> int:
    first = action("charge0", "C") if write_first else action("quote", "Q")
    return make_flow(
        [first, wait_action, action("charge", "C", input={"ok": {"from": "/actions/approval"}})],
        rules=DECIDE,
        updates=[{"path": "/approved", "from": "/actions/approval/approved"}],
    )


def due(conn, execution_id) -> bool:
    return conn.execute(
        "SELECT next_attempt_at <= clock_timestamp() FROM execution WHERE id = %s",
        [execution_id],
    ).fetchone()[0]


def test_run__suspends_at_the_wait_and_the_spi_says_suspended(conn, make_flow, runtime, quote):
    accepted = enqueue(conn, flow(make_flow, wait()))

    result = run_next(conn, runtime)

    assert result.status == "suspended"
    assert result.suspended_on["actionId"] == "approval"
    assert result.suspended_on["event"] == "manager.approval"
    assert result.suspended_on["deadline"]
    assert result.state["executionStatus"] == "SUSPENDED"
    execution = execution_row(conn, accepted.execution_id)
    assert (execution["status"], execution["lease_owner"]) == ("SUSPENDED", None)
    assert checkpoint_rows(conn, accepted.execution_id)["approval"]["status"] == "WAITING"
    assert "charge" not in checkpoint_rows(conn, accepted.execution_id)
    assert len(quote.calls) == 1


def test_resume__a_worker_continues_from_the_checkpoints_without_repeating_any_action(
    conn, make_flow, runtime, quote, charge
):
    accepted = enqueue(conn, flow(make_flow, wait()))
    run_next(conn, runtime)

    execution_resume(
        principal=MARIA,
        execution_id=str(accepted.execution_id),
        event_id="e1",
        event="manager.approval",
        payload={"approved": True},
    )
    result = run_next(conn, runtime)

    assert result.status == "completed"
    assert (len(quote.calls), len(charge.calls)) == (1, 1)
    assert charge.calls[0].input == {"ok": {"approved": True}}
    request = request_row(conn, accepted.request_id)
    assert (request["state"], request["data"]["approved"], request["blocked_by_id"]) == (
        "DONE",
        True,
        None,
    )
    kinds = [kind for kind, _ in audit_events(conn, accepted.request_id)]
    assert kinds[-3:] == ["EXECUTION_SUSPENDED", "EXECUTION_RESUMED", "TRANSITION_COMPLETED"]


def test_timeout__continues_with_the_on_timeout_payload(conn, make_flow, runtime, charge):
    accepted = enqueue(
        conn, flow(make_flow, wait(timeout=1, onTimeout={"payload": {"approved": False}}))
    )
    run_next(conn, runtime)
    assert claim(conn, "early") == []  # not before the deadline
    wait_until(lambda: due(conn, accepted.execution_id), what="the deadline")

    result = run_next(conn, runtime)

    assert result.status == "completed"
    assert result.state["outcome"] == "DECLINED"
    approval = checkpoint_rows(conn, accepted.execution_id)["approval"]
    assert (approval["status"], approval["output"], approval["error_code"]) == (
        "SUCCEEDED",
        {"approved": False},
        "EVENT_TIMEOUT",
    )
    resumed = [
        p for kind, p in audit_events(conn, accepted.request_id) if kind == "EXECUTION_RESUMED"
    ]
    assert resumed == [
        {
            "transitionId": "go",
            "principal": "system",
            "actionId": "approval",
            "event": "manager.approval",
            "timedOut": True,
        }
    ]
    assert len(charge.calls) == 1


def test_timeout__without_on_timeout_fails_event_timeout_and_releases(conn, make_flow, runtime):
    accepted = enqueue(conn, flow(make_flow, wait(timeout=1)))
    run_next(conn, runtime)
    wait_until(lambda: due(conn, accepted.execution_id), what="the deadline")

    result = run_next(conn, runtime)

    assert result.status == "failed"
    execution = execution_row(conn, accepted.execution_id)
    assert (execution["status"], execution["error_code"]) == ("FAILED", "EVENT_TIMEOUT")
    assert request_row(conn, accepted.request_id)["blocked_by_id"] is None
    approval = checkpoint_rows(conn, accepted.execution_id)["approval"]
    assert (approval["status"], approval["error_code"]) == ("FAILED", "EVENT_TIMEOUT")


def test_timeout__after_a_write_goes_to_reconciliation(conn, make_flow, runtime, charge):
    accepted = enqueue(conn, flow(make_flow, wait(timeout=1), write_first=True))
    run_next(conn, runtime)
    wait_until(lambda: due(conn, accepted.execution_id), what="the deadline")

    result = run_next(conn, runtime)

    assert result.status == "failed"
    assert result.state["executionStatus"] == "RECONCILIATION_REQUIRED"
    execution = execution_row(conn, accepted.execution_id)
    assert (execution["status"], execution["error_code"]) == (
        "RECONCILIATION_REQUIRED",
        "EVENT_TIMEOUT",
    )
    assert request_row(conn, accepted.request_id)["blocked_by_id"] == accepted.execution_id
    assert len(charge.calls) == 1  # the first write, never repeated


def test_early_event__the_run_goes_through_the_wait_without_suspending(
    conn, make_flow, runtime, charge
):
    accepted = enqueue(conn, flow(make_flow, wait()))
    execution_resume(
        principal=MARIA,
        execution_id=str(accepted.execution_id),
        event_id="early",
        event="manager.approval",
        payload={"approved": True},
    )

    result = run_next(conn, runtime)

    assert result.status == "completed"
    kinds = [kind for kind, _ in audit_events(conn, accepted.request_id)]
    assert "EXECUTION_SUSPENDED" not in kinds and "EXECUTION_RESUMED" in kinds
    assert len(charge.calls) == 1
