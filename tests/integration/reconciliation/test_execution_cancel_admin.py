"""The admin action "Cancel execution": its own permission, a required reason, the durable
cancellation service behind it, and a refusal for whoever lacks the permission."""

import pytest
from django.contrib.admin import helpers
from django.test import Client
from django.urls import reverse

from executions.models import AuditEvent, CheckpointStatus, Execution, ExecutionStatus, Request

from .conftest import VIEW
from .factories import CheckpointFactory, ExecutionFactory, RequestFactory, row

pytestmark = pytest.mark.django_db

CHANGELIST = reverse("admin:executions_execution_changelist")


def blocked_execution(
    status: str = ExecutionStatus.PENDING, error_code: str | None = None
) -> Execution:
    request = RequestFactory()
    execution = ExecutionFactory(request=request, status=status, error_code=error_code)
    request.blocked_by = execution
    request.save(update_fields=["blocked_by"])
    return execution


@pytest.fixture
def canceller(make_user):
    return make_user("carla", *VIEW, "cancel_execution")


def client_for(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def post_cancel(client: Client, *executions: Execution, reason: str | None = None):
    data = {
        "action": "cancel_execution",
        helpers.ACTION_CHECKBOX_NAME: [str(e.pk) for e in executions],
    }
    if reason is not None:
        data.update(post="yes", reason=reason)
    return client.post(CHANGELIST, data)


def test_cancel_action__asks_for_a_reason_first(canceller):
    execution = blocked_execution()

    page = post_cancel(client_for(canceller), execution)

    assert page.status_code == 200
    text = page.content.decode()
    assert str(execution.pk) in text and 'name="reason"' in text
    assert Execution.objects.get(pk=execution.pk).status == ExecutionStatus.PENDING


def test_cancel_action__with_a_reason_cancels_and_releases(canceller):
    execution = blocked_execution(ExecutionStatus.RETRY_WAIT)

    client = client_for(canceller)
    response = post_cancel(client, execution, reason="customer withdrew")

    assert response.status_code == 302
    execution.refresh_from_db()
    assert (execution.status, execution.fencing_token) == (ExecutionStatus.CANCELLED, 2)
    assert Request.objects.get(pk=execution.request_id).blocked_by_id is None
    event = AuditEvent.objects.get(execution=execution, type="EXECUTION_CANCELLED")
    assert (event.actor, event.payload["reason"]) == ("carla", "customer withdrew")
    assert "Cancelled 1 execution(s)" in client.get(CHANGELIST).content.decode()


def test_cancel_action__a_write_done_goes_to_reconciliation(canceller):
    execution = blocked_execution(ExecutionStatus.SUSPENDED)
    CheckpointFactory(execution=execution, status=CheckpointStatus.SUCCEEDED, error_code=None)

    post_cancel(client_for(canceller), execution, reason="stop")

    execution.refresh_from_db()
    assert (execution.status, execution.error_code) == (
        ExecutionStatus.RECONCILIATION_REQUIRED,
        "CANCELLED_AFTER_WRITE",
    )
    assert Request.objects.get(pk=execution.request_id).blocked_by_id == execution.pk


@pytest.mark.parametrize("reason", ["", "   ", "x" * 2001])
def test_cancel_action__a_blank_or_overlong_reason_changes_nothing(canceller, reason):
    execution = blocked_execution()
    before = row(execution.pk)

    page = post_cancel(client_for(canceller), execution, reason=reason)

    assert page.status_code == 200
    assert "errorlist" in page.content.decode()
    assert row(execution.pk) == before


def test_cancel_action__skips_what_is_not_cancellable(canceller):
    live = blocked_execution()
    case = blocked_execution(ExecutionStatus.RECONCILIATION_REQUIRED, error_code="UNCERTAIN_WRITE")
    before = row(case.pk)

    post_cancel(client_for(canceller), live, case, reason="clean up")

    assert Execution.objects.get(pk=live.pk).status == ExecutionStatus.CANCELLED
    assert row(case.pk) == before


def test_cancel_action__only_a_settled_selection_says_nothing_to_cancel(canceller):
    case = blocked_execution(ExecutionStatus.RECONCILIATION_REQUIRED, error_code="UNCERTAIN_WRITE")
    client = client_for(canceller)
    response = post_cancel(client, case, reason="x")
    assert response.status_code == 302
    assert "Nothing to cancel" in client.get(CHANGELIST).content.decode()


def test_cancel_action__without_the_permission_is_refused(viewer):
    execution = blocked_execution()
    before = row(execution.pk)
    client = client_for(viewer)

    assert "cancel_execution" not in client.get(CHANGELIST).content.decode()
    assert post_cancel(client, execution, reason="sneaky").status_code == 403

    assert row(execution.pk) == before
