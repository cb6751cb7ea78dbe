"""POST /api/v1/executions/{id}/cancel: the owner stops an execution under the cancellation rule
(docs/worker-protocol.md#cancellation)."""

from datetime import timedelta

import pytest
from django.db.models.functions import Now

from executions.models import ActionExecution, AuditEvent, Execution, ExecutionStatus, Request
from executions.queue.cancel import MAX_REASON_CHARS

from .conftest import assert_error
from .test_transitions import EXECUTION_FIELDS

pytestmark = pytest.mark.django_db


@pytest.fixture
def accepted(alice, flow) -> dict:
    created = alice.create()
    response = alice.accept(created["id"], "submit", 1)
    assert response.status_code == 202
    return response.json()


def cancel(caller, execution_id: str, reason: object = "customer withdrew", **body):
    return caller.post(f"/api/v1/executions/{execution_id}/cancel", {"reason": reason, **body})


def put_in(execution_id: str, status: str) -> None:
    later = Now() + timedelta(seconds=60)
    if status == ExecutionStatus.RUNNING:
        Execution.objects.filter(id=execution_id).update(
            status=status,
            lease_owner="worker-a",
            lease_expires_at=later,
            next_attempt_at=later,
            fencing_token=1,
        )
    elif status in (ExecutionStatus.SUCCEEDED, ExecutionStatus.FAILED):
        Execution.objects.filter(id=execution_id).update(status=status, finished_at=Now())
    else:
        Execution.objects.filter(id=execution_id).update(status=status, next_attempt_at=later)


def checkpoint(execution_id: str, *, status: str, effect: str = "NON_IDEMPOTENT_WRITE") -> None:
    ActionExecution.objects.create(
        execution_id=execution_id,
        action_id="charge",
        sequence=0,
        capability="payments.charge",
        capability_version=1,
        effect=effect,
        status=status,
        input_hash="0" * 64,
        external_key=f"{execution_id}:charge",
        fencing_token=1,
    )


def blocked_by(execution: dict) -> str | None:
    found = Request.objects.get(id=execution["requestId"]).blocked_by_id
    return None if found is None else str(found)


@pytest.mark.parametrize(
    "status",
    [
        ExecutionStatus.PENDING,
        ExecutionStatus.RETRY_WAIT,
        ExecutionStatus.SUSPENDED,
        ExecutionStatus.RUNNING,
    ],
)
def test_cancel__without_writes_ends_cancelled_and_releases_the_request(alice, accepted, status):
    put_in(accepted["id"], status)
    token_before = Execution.objects.get(id=accepted["id"]).fencing_token

    response = cancel(alice, accepted["id"])

    assert response.status_code == 202, response.content
    view = response.json()
    assert set(view) == EXECUTION_FIELDS
    assert (view["id"], view["status"], view["errorCode"]) == (accepted["id"], "CANCELLED", None)
    assert view["finishedAt"] is not None
    row = Execution.objects.get(id=accepted["id"])
    assert row.fencing_token == token_before + 1  # whoever held it is fenced out
    assert (row.lease_owner, row.lease_expires_at) == (None, None)
    assert blocked_by(accepted) is None
    event = AuditEvent.objects.filter(execution_id=accepted["id"]).latest("id")
    assert (event.type, event.actor) == ("EXECUTION_CANCELLED", "alice")
    assert event.payload == {
        "reason": "customer withdrew",
        "previousStatus": status,
        "status": "CANCELLED",
        "principal": "alice@acme",  # who asked, as every principal-caused row names it
    }


def test_cancel__a_read_only_checkpoint_does_not_hold_the_request(alice, accepted):
    put_in(accepted["id"], ExecutionStatus.RUNNING)
    checkpoint(accepted["id"], status="RUNNING", effect="READ_ONLY")

    assert cancel(alice, accepted["id"]).json()["status"] == "CANCELLED"
    assert blocked_by(accepted) is None


@pytest.mark.parametrize(
    ("checkpoint_status", "error_code"),
    [("SUCCEEDED", "CANCELLED_AFTER_WRITE"), ("RUNNING", "UNCERTAIN_WRITE")],
)
@pytest.mark.parametrize("status", [ExecutionStatus.RUNNING, ExecutionStatus.RETRY_WAIT])
def test_cancel__after_a_write_goes_to_reconciliation_and_keeps_the_block(
    alice, accepted, status, checkpoint_status, error_code
):
    put_in(accepted["id"], status)
    checkpoint(accepted["id"], status=checkpoint_status)

    response = cancel(alice, accepted["id"])

    assert response.status_code == 202, response.content
    view = response.json()
    assert (view["status"], view["errorCode"]) == ("RECONCILIATION_REQUIRED", error_code)
    assert blocked_by(accepted) == accepted["id"]
    types = list(
        AuditEvent.objects.filter(execution_id=accepted["id"])
        .order_by("id")
        .values_list("type", flat=True)
    )
    assert types[-2:] == ["EXECUTION_CANCELLED", "RECONCILIATION_REQUIRED"]
    # The write is never marked done or repeated by the cancellation: it stays as it was.
    assert ActionExecution.objects.get(execution_id=accepted["id"]).status == checkpoint_status


@pytest.mark.parametrize(
    ("status", "fragment"),
    [
        (ExecutionStatus.SUCCEEDED, "already SUCCEEDED"),
        (ExecutionStatus.FAILED, "already FAILED"),
        (ExecutionStatus.RECONCILIATION_REQUIRED, "an operator settles it"),
    ],
)
def test_cancel__a_final_or_reconciling_execution_is_not_cancellable(
    alice, accepted, status, fragment
):
    put_in(accepted["id"], status)
    before = Execution.objects.filter(id=accepted["id"]).values().get()

    assert_error(cancel(alice, accepted["id"]), 409, "NOT_CANCELLABLE", fragment)

    assert Execution.objects.filter(id=accepted["id"]).values().get() == before
    assert not AuditEvent.objects.filter(type="EXECUTION_CANCELLED").exists()


def test_cancel__twice_is_not_cancellable_the_second_time(alice, accepted):
    assert cancel(alice, accepted["id"]).status_code == 202
    assert_error(cancel(alice, accepted["id"]), 409, "NOT_CANCELLABLE", "already CANCELLED")
    assert AuditEvent.objects.filter(type="EXECUTION_CANCELLED").count() == 1


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ({}, "reason"),
        ({"reason": ""}, "reason"),
        ({"reason": "   "}, "reason"),
        ({"reason": None}, "reason"),
        ({"reason": 12}, "reason"),
        ({"reason": "x" * (MAX_REASON_CHARS + 1)}, f"at most {MAX_REASON_CHARS}"),
        ({"reason": "ok", "force": True}, "force"),
    ],
)
def test_cancel__a_missing_or_bad_reason_is_refused_naming_it(alice, accepted, body, fragment):
    response = alice.post(f"/api/v1/executions/{accepted['id']}/cancel", body)
    assert_error(response, 400, "INVALID_BODY", fragment)
    assert Execution.objects.get(id=accepted["id"]).status == "PENDING"


def test_cancel__a_reason_at_the_limit_is_kept_whole(alice, accepted):
    reason = "r" * MAX_REASON_CHARS
    assert cancel(alice, accepted["id"], reason=reason).status_code == 202
    assert AuditEvent.objects.get(type="EXECUTION_CANCELLED").payload["reason"] == reason


def test_cancel__a_reason_the_schema_accepts_is_accepted(alice, accepted):
    """U+001C is white space to Python but not to JSON Schema: the schema's word wins."""
    response = alice.post(f"/api/v1/executions/{accepted['id']}/cancel", {"reason": "\u001c"})
    assert response.status_code == 202, response.content
    assert AuditEvent.objects.get(type="EXECUTION_CANCELLED").payload["reason"] == "\u001c"


@pytest.mark.parametrize("who", ["bob", "alice_elsewhere"])
def test_cancel__another_owners_or_tenants_execution_is_not_found(request, accepted, who):
    other = request.getfixturevalue(who)
    assert_error(cancel(other, accepted["id"]), 404, "NOT_FOUND")
    assert Execution.objects.get(id=accepted["id"]).status == "PENDING"


def test_cancel__a_reader_without_requests_write_is_forbidden(auditor, accepted):
    assert_error(cancel(auditor, accepted["id"]), 403, "FORBIDDEN", "requests:write")
    assert Execution.objects.get(id=accepted["id"]).status == "PENDING"


@pytest.mark.parametrize("execution_id", ["00000000-0000-0000-0000-000000000000", "abc"])
def test_cancel__an_unknown_execution_is_not_found(alice, flow, execution_id):
    assert_error(cancel(alice, execution_id), 404, "NOT_FOUND")


def test_cancel__only_post_is_served(alice, accepted):
    assert_error(
        alice.get(f"/api/v1/executions/{accepted['id']}/cancel"), 405, "METHOD_NOT_ALLOWED"
    )
