"""The queue and the admin home: rows that tell cases apart, one filter entry per capability,
bulk actions that only do what each case's evidence supports, the desk on the home page, and
no dead ends (an empty History, a "View site" that leads nowhere, times without a zone)."""

import re
from datetime import timedelta

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from executions.models import (
    ActionExecution,
    AuditEvent,
    AuditType,
    CheckpointStatus,
    Execution,
    ExecutionStatus,
)
from reconciliation import selectors, services

from .factories import (
    DEFINITION,
    CheckpointFactory,
    FlowFactory,
    audit,
    reconciliation_case,
    row,
)

pytestmark = pytest.mark.django_db

QUEUE = "admin:reconciliation_reconciliationcase_changelist"
OUTPUT = {"chargeId": "ch_1", "status": "paid"}
UTC_TO_THE_SECOND = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC")


def _client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _lookup(case: Execution, *, happened: bool | None, output: dict | None = None) -> None:
    audit(
        case.request,
        case,
        AuditType.RECONCILIATION_EVIDENCE,
        actionId="charge",
        happened=happened,
        output=output,
        outputValid=None if output is None else True,
        outputProblems=[],
        detail="",
        operator="olga",
    )


def test_queue_rows__tell_cases_apart(operator, charge_registry):
    asked, fresh = reconciliation_case(), reconciliation_case()
    Execution.objects.filter(pk=asked.pk).update(created_at=timezone.now() - timedelta(minutes=7))
    _lookup(asked, happened=True, output=OUTPUT)
    page = _client(operator).get(reverse(QUEUE)).content.decode()
    for case in (asked, fresh):
        assert f'title="{case.pk}">{str(case.pk)[:8]}</span>' in page  # short id, full in title
    assert "7 min" in page  # how long the oldest has waited
    assert "customer cus_ada · amount 42" in page
    assert "UNCERTAIN_WRITE: the connection dropped after the request was sent" in page
    rows = {case.pk: response_row(page, case.pk) for case in (asked, fresh)}
    assert ">happened<" in rows[asked.pk] and ">not asked<" in rows[fresh.pk]
    assert "Created (UTC)" in page
    assert re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d<", rows[fresh.pk])  # to the second


def test_queue_rows__say_why_in_full_and_leave_the_width_to_the_columns(operator, charge_registry):
    detail = (
        "action 'charge': the outcome of a NON_IDEMPOTENT_WRITE is unknown after the request was "
        "sent (read timed out after 3 s); the provider may have applied it"
    )
    case = reconciliation_case()
    Execution.objects.filter(pk=case.pk).update(error_detail=detail)
    page = _client(operator).get(reverse(QUEUE)).content.decode()
    assert f"UNCERTAIN_WRITE: {detail}".replace("'", "&#x27;") in response_row(page, case.pk)
    assert 'id="nav-sidebar"' not in page  # the queue's width goes to its columns
    assert "#result_list td.field-why" in page
    other = _client(operator).get(reverse("admin:reconciliation_blockedrequest_changelist"))
    assert 'id="nav-sidebar"' not in other.content.decode()  # nor on any other page


def test_flow_filter__lists_each_flow_key_once_and_takes_every_version(operator, charge_registry):
    first = reconciliation_case()
    later = [FlowFactory(version=version) for version in range(2, 8)]
    on_latest = reconciliation_case()
    Execution.objects.filter(pk=on_latest.pk).update(flow=later[-1])
    refunds = FlowFactory(key="refunds", version=1, definition={**DEFINITION, "key": "refunds"})
    elsewhere = reconciliation_case()
    Execution.objects.filter(pk=elsewhere.pk).update(flow=refunds)

    client = _client(operator)
    page = client.get(reverse(QUEUE)).content.decode()
    choices = page[page.index("By flow") : page.index("By capability")]
    assert choices.count("?flow=") == 2
    assert "billing (latest v7)" in choices and "refunds (latest v1)" in choices
    billing = client.get(reverse(QUEUE), {"flow": "billing"}).context["cl"].result_list
    assert {c.pk for c in billing} == {first.pk, on_latest.pk}
    only = client.get(reverse(QUEUE), {"flow": "refunds"}).context["cl"].result_list
    assert [c.pk for c in only] == [elsewhere.pk]


def response_row(page: str, execution_id) -> str:
    start = page.index(f'title="{execution_id}"')
    return page[start : page.index("</tr>", start)]


def test_capability_filter__lists_each_capability_once(operator, charge_registry):
    for _ in range(4):
        case = reconciliation_case()
        CheckpointFactory(
            execution=case, action_id="refund", sequence=1, status=CheckpointStatus.SUCCEEDED
        )
    assert selectors.capabilities(statuses=(ExecutionStatus.RECONCILIATION_REQUIRED,)) == [
        "payments.charge@1"
    ]
    page = _client(operator).get(reverse(QUEUE)).content.decode()
    assert page.count("capability=payments.charge%401") == 1


def test_home__shows_the_desk(operator, charge_registry):
    older, _newer = reconciliation_case(), reconciliation_case()
    Execution.objects.filter(pk=older.pk).update(created_at=timezone.now() - timedelta(hours=2))
    done = reconciliation_case()
    services.execution_abandon(execution_id=done.pk, reason="duplicate", operator=operator)
    page = _client(operator).get(reverse("admin:index")).content.decode()
    desk = page[page.index('id="desk-overview"') :]
    assert re.search(r'id="desk-open">2<', desk)
    assert "2 h" in desk and "payments.charge@1</a>: 2" in desk
    assert "0 automatically (system:prober), 1 by operators" in desk
    assert "View site" not in page


def test_home__without_the_view_permission__shows_no_desk(make_user):
    someone = make_user("nina", "view_flow")
    page = _client(someone).get(reverse("admin:index")).content.decode()
    assert 'id="desk-overview"' not in page


def test_bulk_write_happened__only_where_the_provider_found_it(operator, charge_registry):
    found, absent, unasked = reconciliation_case(), reconciliation_case(), reconciliation_case()
    _lookup(found, happened=True, output=OUTPUT)
    _lookup(absent, happened=False)
    before = {case.pk: row(case.pk) for case in (absent, unasked)}
    client = _client(operator)
    selected = {
        "action": "resolve_write_happened",
        "_selected_action": [found.pk, absent.pk, unasked.pk],
    }
    confirm = client.post(reverse(QUEUE), selected).content.decode()
    assert "will be resolved:</strong> the provider found the write" in confirm
    assert confirm.count("skipped:</strong>") == 2 and "lookup: not asked" in confirm

    done = client.post(
        reverse(QUEUE), {**selected, "post": "yes", "reason": "Lookups checked."}, follow=True
    )
    messages = [str(m) for m in done.context["messages"]]
    assert any(m.startswith(f"Case {str(found.pk)[:8]}: resolved") for m in messages)
    assert sum("skipped" in m for m in messages) == 2
    checkpoint = ActionExecution.objects.get(execution=found)
    assert (checkpoint.status, checkpoint.output) == (CheckpointStatus.SUCCEEDED, OUTPUT)
    assert {case.pk: row(case.pk) for case in (absent, unasked)} == before


def test_bulk_confirmation__shows_each_cases_evidence_and_the_risk(operator, charge_registry):
    found, absent, unasked = reconciliation_case(), reconciliation_case(), reconciliation_case()
    _lookup(found, happened=True, output=OUTPUT)
    _lookup(absent, happened=False)
    client = _client(operator)
    ids = [found.pk, absent.pk, unasked.pk]
    replay = client.post(
        reverse(QUEUE), {"action": "resolve_write_not_happened", "_selected_action": ids}
    ).content.decode()
    rows = {case.pk: _plan(replay, case.pk) for case in (found, absent, unasked)}
    assert "the provider says the write did not happen" in rows[absent.pk]
    assert "asked by olga at" in rows[absent.pk] and "will be resolved:" in rows[absent.pk]
    assert (
        "a provider that does not deduplicate applies the write a second time" in (rows[absent.pk])
    )
    assert "the provider says the write happened" in rows[found.pk]
    assert "skipped:" in rows[found.pk] and "not applied to this case" in rows[found.pk]
    assert "not asked yet" in rows[unasked.pk]

    abandon = client.post(
        reverse(QUEUE), {"action": "abandon_execution", "_selected_action": ids}
    ).content.decode()
    rows = {case.pk: _plan(abandon, case.pk) for case in (found, absent, unasked)}
    assert "the provider says the write happened" in rows[found.pk]
    assert "if the provider applied the write, it stays applied" in rows[found.pk]
    assert all("will be resolved:" in text for text in rows.values())


def _plan(page: str, execution_id) -> str:
    start = page.index(f'id="plan-{execution_id}"')
    return page[start : page.index("</tr>", start)]


def test_bulk_write_not_happened__only_where_the_provider_found_nothing(operator, charge_registry):
    found, absent = reconciliation_case(), reconciliation_case()
    _lookup(found, happened=True, output=OUTPUT)
    _lookup(absent, happened=False)
    _client(operator).post(
        reverse(QUEUE),
        {
            "action": "resolve_write_not_happened",
            "_selected_action": [found.pk, absent.pk],
            "post": "yes",
            "reason": "Lookups checked.",
        },
    )
    assert Execution.objects.get(pk=absent.pk).status == ExecutionStatus.PENDING
    assert Execution.objects.get(pk=found.pk).status == ExecutionStatus.RECONCILIATION_REQUIRED
    resolved = AuditEvent.objects.get(type=AuditType.RECONCILIATION_RESOLVED)
    assert resolved.execution_id == absent.pk


def test_read_only_pages__have_no_empty_history_and_times_to_the_second(operator):
    case = reconciliation_case()
    client = _client(operator)
    page = client.get(reverse("admin:executions_execution_change", args=[case.pk])).content.decode()
    assert "/history/" not in page
    events = client.get(reverse("admin:executions_auditevent_changelist")).content.decode()
    assert UTC_TO_THE_SECOND.search(events)


@pytest.mark.parametrize(
    "changelist",
    [
        "admin:executions_execution_changelist",
        "admin:executions_request_changelist",
        "admin:executions_auditevent_changelist",
        "admin:executions_actionexecution_changelist",
    ],
)
def test_read_only_lists__short_ids_and_times_with_their_age(operator, changelist):
    case = reconciliation_case()
    page = _client(operator).get(reverse(changelist)).content.decode()
    assert re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC \(\d+ s ago\)", page)
    assert str(case.pk)[:8] in page
    assert f">{case.pk}<" not in page and f">{case.request_id}<" not in page  # no id wraps


def test_blocked_requests__offer_no_status_that_cannot_block(operator):
    reconciliation_case()
    page = _client(operator).get(reverse("admin:reconciliation_blockedrequest_changelist"))
    text = page.content.decode()
    assert "?status=RECONCILIATION_REQUIRED" in text
    for final in ("SUCCEEDED", "FAILED", "CANCELLED"):
        assert f"?status={final}" not in text
