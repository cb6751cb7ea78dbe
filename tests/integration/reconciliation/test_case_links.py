"""Every page leads to the next: an execution's and a request's page link to their case, the
case to both; the case's header lists every resolution (the operator's and the prober's) with
who, when and why; the resolved cases' list says who and how; a refused form comes back at the
case's own address, once, and a reload posts nothing."""

import re

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from executions.models import ActionExecution, CheckpointStatus, Execution, ExecutionStatus
from reconciliation import services
from reconciliation.probes import PROBER, SystemOperator

from .factories import reconciliation_case, row
from .test_case_page import OUTPUT, QUEUE, _case_url, _post, _section

pytestmark = pytest.mark.django_db


def _client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _links(page: str) -> set[str]:
    return set(re.findall(r'href="([^"#]+)"', page))


def _execution_url(execution_id) -> str:
    return reverse("admin:executions_execution_change", args=[execution_id])


def _request_url(request_id) -> str:
    return reverse("admin:executions_request_change", args=[request_id])


def _reopened(case: Execution) -> None:
    """The replay an operator allowed was lost too: the worker hands the case back with the
    charge's second attempt uncertain (as it writes it)."""
    ActionExecution.objects.filter(execution=case).update(
        status=CheckpointStatus.UNKNOWN, attempt=2
    )
    Execution.objects.filter(pk=case.pk).update(
        status=ExecutionStatus.RECONCILIATION_REQUIRED, error_code="UNCERTAIN_WRITE"
    )


def test_a_case_links_to_its_execution_and_request_and_back(operator, charge_registry):
    case = reconciliation_case()
    client = _client(operator)

    case_page = client.get(_case_url(case)).content.decode()
    execution_page = client.get(_execution_url(case.pk)).content.decode()
    request_page = client.get(_request_url(case.request_id)).content.decode()

    details = _section(case_page, "case-details")
    assert _execution_url(case.pk) in _links(details)
    assert _request_url(case.request_id) in _links(details)
    # The execution's and the blocked request's pages name the case, waiting for an operator.
    assert _case_url(case) in _links(execution_page)
    assert "waiting for an operator" in execution_page
    assert _case_url(case) in _links(request_page)
    # The request still says which execution blocks it.
    assert _execution_url(case.pk) in _links(request_page)


def test_a_resolved_case_stays_linked_from_its_execution(operator, charge_registry):
    case = reconciliation_case()
    services.execution_abandon(execution_id=case.pk, reason="customer left", operator=operator)
    page = _client(operator).get(_execution_url(case.pk)).content.decode()
    assert _case_url(case) in _links(page)
    assert f"case {str(case.pk)[:8]}</a> (resolved)" in page


def test_an_execution_that_never_needed_an_operator__links_to_no_case(operator, charge_registry):
    case = reconciliation_case()
    # Never in reconciliation, nothing resolved.
    Execution.objects.filter(pk=case.pk).update(
        status=ExecutionStatus.SUCCEEDED, finished_at=timezone.now()
    )
    page = _client(operator).get(_execution_url(case.pk)).content.decode()
    assert _case_url(case) not in _links(page)


def test_the_case_header_lists_every_resolution_with_who_when_and_why(operator, charge_registry):
    case = reconciliation_case()
    client = _client(operator)
    services.execution_resolve_write_not_happened(
        execution_id=case.pk,
        action_id="charge",
        reason="Support says the customer was not charged.",
        operator=operator,
        confirm_risk=True,
    )
    _reopened(case)

    # Open again: the earlier resolution is in the header, folded.
    opened = _section(client.get(_case_url(case)).content.decode(), "case-explained")
    before = _section(opened, "case-resolved-before")
    assert "The write did not happen (one replay)" in before and "olga" in before
    assert "Support says the customer was not charged." in before

    services.execution_resolve_write_happened(
        execution_id=case.pk,
        action_id="charge",
        output=OUTPUT,
        reason="Automatic: probe 1 of 3 — the provider reports the write.",
        operator=SystemOperator(),
    )
    page = client.get(_case_url(case)).content.decode()
    header = page[page.index('id="case-resolved"') : page.index('id="case-details"')]
    rows = re.findall(r'<tr class="case-resolution-done[^"]*">(.*?)</tr>', header, re.S)
    assert len(rows) == 2
    first, second = rows
    assert "The write did not happen (one replay)" in first and ">olga<" in first
    assert "Support says the customer was not charged." in first
    assert "The write happened (charge)" in second and f"{PROBER} (automatic)" in second
    assert "Automatic: probe 1 of 3" in second
    assert all(re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", r) for r in rows)  # when
    assert "Resolved 2 times" in header


def test_the_resolved_list_says_who_resolved_and_how(operator, charge_registry):
    resolved = reconciliation_case()
    waiting = reconciliation_case()
    services.execution_abandon(execution_id=resolved.pk, reason="gone", operator=operator)
    client = _client(operator)

    listed = client.get(reverse(QUEUE), {"status": "FAILED"}).content.decode()
    assert ">Resolved by<" in listed and ">How<" in listed
    assert '<td class="field-resolved_by">olga</td>' in listed
    assert '<td class="field-resolved_how">Abandoned</td>' in listed
    # The waiting queue keeps its own columns.
    queue = client.get(reverse(QUEUE)).content.decode()
    assert str(waiting.pk)[:8] in queue and "field-resolved_by" not in queue


def test_a_refused_form__comes_back_at_the_case_address_once(operator, charge_registry):
    case = reconciliation_case()
    before = row(case.pk)
    client = _client(operator)
    reason = "Typed with care, then refused."

    refused = client.post(
        reverse(QUEUE),
        _post(case, "resolve_write_happened", action_id="charge", reason=reason, output="{x"),
        follow=True,
    )

    assert refused.redirect_chain == [(_case_url(case), 302)]
    page = refused.content.decode()
    assert reason in page and "The output is not valid JSON" in page
    assert next(str(m) for m in refused.context["messages"]).startswith("Not done:")
    # A reload is a GET of the case: nothing posted again, nothing said again, the form fresh.
    again = client.get(_case_url(case))
    assert again.status_code == 200
    assert reason not in again.content.decode()
    assert [str(m) for m in again.context["messages"]] == []
    assert row(case.pk) == before


def test_a_kept_form__waits_for_its_own_case(operator, charge_registry):
    case, other = reconciliation_case(), reconciliation_case()
    client = _client(operator)
    client.post(reverse(QUEUE), _post(case, "abandon_execution", reason=" "))
    # Another case's page does not take it ...
    assert "Not done" not in client.get(_case_url(other)).content.decode()
    # ... its own does, once, with the field's error.
    page = client.get(_case_url(case)).content.decode()
    assert "Reason: This field is required." in page
    assert "Not done" not in client.get(_case_url(case)).content.decode()
