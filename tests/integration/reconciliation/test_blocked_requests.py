"""The Blocked requests page: short ids, what holds each request (a case, or an execution doing
what), since when in UTC to the second with its age, one filter entry per capability, and links
that lead somewhere."""

import re
from datetime import timedelta

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from executions.models import CheckpointStatus, Execution, ExecutionStatus, Request

from .factories import CheckpointFactory, ExecutionFactory, RequestFactory, reconciliation_case

pytestmark = pytest.mark.django_db

BLOCKED = "admin:reconciliation_blockedrequest_changelist"
UTC_TO_THE_SECOND = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC \((\d+ \w+) ago\)")


def _client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _blocked_by(status: str, **fields) -> Execution:
    request = RequestFactory()
    execution = ExecutionFactory(
        request=request, status=status, error_code=None, error_detail=None, **fields
    )
    Request.objects.filter(pk=request.pk).update(blocked_by=execution)
    return execution


def _held(owner: str, until) -> Execution:
    """RUNNING under a lease (the claim keeps next_attempt_at at the lease's end)."""
    return _blocked_by(
        ExecutionStatus.RUNNING, lease_owner=owner, lease_expires_at=until, next_attempt_at=until
    )


def _row(page: str, execution: Execution) -> str:
    start = page.index(f'title="{execution.request_id}"')
    return page[start : page.index("</tr>", start)]


def test_blocked_requests__each_row_says_what_holds_it_and_since_when(operator):
    now = timezone.now()
    case = reconciliation_case()
    Execution.objects.filter(pk=case.pk).update(created_at=now - timedelta(minutes=12))
    running = _held("host-a:41:w1", now + timedelta(seconds=30))
    expired = _held("host-b:42:w1", now - timedelta(seconds=40))
    retrying = _blocked_by(
        ExecutionStatus.RETRY_WAIT, attempts=2, next_attempt_at=now + timedelta(minutes=5)
    )

    page = _client(operator).get(reverse(BLOCKED)).content.decode()

    opened = _row(page, case)
    assert f">{str(case.request_id)[:8]}</a>" in opened  # short id, the full one in its title
    case_link = reverse("admin:reconciliation_reconciliationcase_change", args=[case.pk])
    assert f'href="{case_link}"' in opened and f"case {str(case.pk)[:8]}" in opened
    assert "waiting for an operator: UNCERTAIN_WRITE — the connection dropped" in opened
    assert UTC_TO_THE_SECOND.search(opened).group(1) == "12 min"  # blocked since, with its age
    assert "DRAFT (revision 2)" in opened

    held = _row(page, running)
    execution_link = reverse("admin:executions_execution_change", args=[running.pk])
    assert f'href="{execution_link}"' in held
    assert "lease held by host-a:41:w1 until" in held
    assert "lease expired" in _row(page, expired) and "any worker will reclaim it" in _row(
        page, expired
    )
    assert "waiting to retry (attempt 3)" in _row(page, retrying)
    assert "(in 4 min)" in _row(page, retrying) or "(in 5 min)" in _row(page, retrying)
    assert "/history/" not in page


def test_blocked_requests__capability_filter_lists_each_capability_once(operator):
    for _ in range(3):
        case = reconciliation_case()
        CheckpointFactory(
            execution=case, action_id="refund", sequence=1, status=CheckpointStatus.SUCCEEDED
        )
    page = _client(operator).get(reverse(BLOCKED)).content.decode()
    assert page.count("capability=payments.charge%401") == 1


def test_blocked_requests__age_filter_is_how_long_the_request_is_held(operator):
    old, new = reconciliation_case(), reconciliation_case()
    Execution.objects.filter(pk=old.pk).update(created_at=timezone.now() - timedelta(days=2))
    client = _client(operator)
    response = client.get(reverse(BLOCKED), {"age": "1d-7d"})
    assert [str(r.pk) for r in response.context["cl"].result_list] == [str(old.request_id)]
    response = client.get(reverse(BLOCKED), {"age": "lt1h"})
    assert [str(r.pk) for r in response.context["cl"].result_list] == [str(new.request_id)]
