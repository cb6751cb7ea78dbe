"""The reconciliation admin through Django's test client: the queue, the case page, who may do
what, and that refused POSTs (forged, without permission, without CSRF) change nothing."""

import contextlib
import json
from datetime import timedelta

import pytest
import requests
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
from reconciliation import services
from tests.support.providers import JsonProvider, drop

from .factories import (
    DEFINITION,
    ExecutionFactory,
    FlowFactory,
    audit,
    lookup,
    reconciliation_case,
    row,
)
from .worker import CHARGES, charged, registry_from, write_catalog

pytestmark = pytest.mark.django_db

QUEUE = "admin:reconciliation_reconciliationcase_changelist"


def _case_url(case: Execution) -> str:
    return reverse("admin:reconciliation_reconciliationcase_change", args=[case.pk])


def _client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _listed(response) -> list[str]:
    return [str(obj.pk) for obj in response.context["cl"].result_list]


def _resolve_post(case: Execution, action: str, **fields: str) -> dict:
    """What the case page's resolution form posts."""
    return {"action": action, "_selected_action": str(case.pk), "post": "yes", **fields}


# --- The queue -------------------------------------------------------------------------------


def test_queue__lists_open_cases_oldest_first(operator, charge_registry):
    newer, older, resolved = reconciliation_case(), reconciliation_case(), reconciliation_case()
    Execution.objects.filter(pk=older.pk).update(created_at=timezone.now() - timedelta(hours=3))
    Execution.objects.filter(pk=newer.pk).update(created_at=timezone.now() - timedelta(hours=1))
    lookup(resolved, happened=False)
    services.execution_resolve_write_not_happened(
        execution_id=resolved.pk, action_id="charge", reason="r", operator=operator
    )
    ExecutionFactory(status=ExecutionStatus.PENDING)  # never in reconciliation

    client = _client(operator)
    assert _listed(client.get(reverse(QUEUE))) == [str(older.pk), str(newer.pk)]
    everything = _listed(client.get(reverse(QUEUE), {"status": "all"}))
    assert sorted(everything) == sorted(str(c.pk) for c in (older, newer, resolved))
    assert _listed(client.get(reverse(QUEUE), {"status": "PENDING"})) == [str(resolved.pk)]


def test_queue__filters_by_flow_capability_and_age(operator):
    other_flow = FlowFactory(key="refunds", definition={**DEFINITION, "key": "refunds"})
    mine, theirs = reconciliation_case(), reconciliation_case()
    Execution.objects.filter(pk=theirs.pk).update(flow=other_flow)
    Execution.objects.filter(pk=mine.pk).update(created_at=timezone.now() - timedelta(days=2))
    ActionExecution.objects.filter(execution=theirs).update(capability="mail.send")

    client = _client(operator)
    by_flow = client.get(reverse(QUEUE), {"flow": "refunds"})
    assert _listed(by_flow) == [str(theirs.pk)]
    by_capability = client.get(reverse(QUEUE), {"capability": "payments.charge@1"})
    assert _listed(by_capability) == [str(mine.pk)]
    assert _listed(client.get(reverse(QUEUE), {"age": "1d-7d"})) == [str(mine.pk)]
    assert _listed(client.get(reverse(QUEUE), {"age": "lt1h"})) == [str(theirs.pk)]


def test_queue__searches_by_request_id_and_external_key(operator):
    one, two = reconciliation_case(), reconciliation_case()
    client = _client(operator)
    assert _listed(client.get(reverse(QUEUE), {"q": str(two.request_id)})) == [str(two.pk)]
    assert _listed(client.get(reverse(QUEUE), {"q": f"{one.pk}:charge"})) == [str(one.pk)]
    assert _listed(client.get(reverse(QUEUE), {"q": "no-such-key"})) == []


def test_blocked_requests__lists_held_requests_with_a_link_to_the_case(operator):
    case = reconciliation_case()
    ExecutionFactory(status=ExecutionStatus.SUCCEEDED, finished_at=timezone.now())
    response = _client(operator).get(reverse("admin:reconciliation_blockedrequest_changelist"))
    assert _listed(response) == [str(case.request_id)]
    assert _case_url(case) in response.content.decode()


# --- The case page ---------------------------------------------------------------------------


def test_case_page__shows_evidence_and_timeline_but_no_raw_detail(operator, charge_registry):
    secret = "sk_live_provider_secret"
    case = reconciliation_case(error_detail="timed out " + "x" * 400 + secret)
    checkpoint = ActionExecution.objects.get(execution=case)

    page = _client(operator).get(_case_url(case)).content.decode()

    for fact in (
        checkpoint.effect,
        "UNKNOWN (uncertain)",
        checkpoint.external_key,
        checkpoint.input_hash[:10],
        "UNKNOWN_OUTCOME: timed out",
        "TRANSITION_ACCEPTED",
        "RECONCILIATION_REQUIRED",
        case.error_code,
    ):
        assert fact in page
    assert secret not in page
    assert 'id="resolve-happened"' in page and 'id="resolve-abandon"' in page
    assert 'id="lookup-charge"' in page  # the route has a lookup_url


def test_case_page__offers_no_lookup_where_the_route_has_none(operator):
    case = reconciliation_case()  # the default catalog is empty: no route, no lookup
    page = _client(operator).get(_case_url(case)).content.decode()
    assert "lookup-charge" not in page
    assert 'id="resolve-abandon"' in page


def test_case_page__a_viewer_sees_the_case_but_no_resolution(viewer, charge_registry):
    case = reconciliation_case()
    response = _client(viewer).get(_case_url(case))
    page = response.content.decode()
    assert response.status_code == 200
    assert f"{case.pk}:charge" in page  # the evidence is there
    assert 'id="no-resolution-permission"' in page
    assert "resolve-happened" not in page and "resolve-abandon" not in page
    assert "lookup-charge" not in page


def test_case_page__warns_that_resolving_a_cancelled_execution_resumes_it(operator):
    case = reconciliation_case()
    page = _client(operator).get(_case_url(case)).content.decode()
    assert "case-cancelled" not in page
    audit(case.request, case, AuditType.EXECUTION_CANCELLED, reason="customer asked")
    page = _client(operator).get(_case_url(case)).content.decode()
    assert 'id="case-cancelled"' in page and "customer asked" in page


def test_case_page__staff_without_view_permission_get_403(make_user):
    case = reconciliation_case()
    nobody = make_user("nina")
    assert _client(nobody).get(_case_url(case)).status_code == 403
    assert _client(nobody).get(reverse(QUEUE)).status_code == 403


def test_case_page__only_the_permitted_resolutions_are_offered(make_user):
    case = reconciliation_case()
    user = make_user("ann", "view_reconciliationcase", "abandon_execution")
    page = _client(user).get(_case_url(case)).content.decode()
    assert 'id="resolve-abandon"' in page
    assert "resolve-happened" not in page and "resolve-not-happened" not in page


def test_lookup__from_the_case_page__is_recorded_and_prefills_the_output(operator, tmp_path):
    with JsonProvider(respond=charged) as provider:
        catalog = write_catalog(tmp_path, provider)
        with registry_from(catalog):
            case = reconciliation_case()
            key = f"{case.pk}:charge"
            provider.plan(CHARGES, drop(apply=True))  # applied, but nobody heard back
            with contextlib.suppress(requests.ConnectionError):
                requests.post(
                    provider.url(CHARGES), json={}, headers={"Idempotency-Key": key}, timeout=5
                )
            client = _client(operator)
            response = client.post(
                reverse(QUEUE),
                _resolve_post(case, "fetch_provider_evidence", action_id="charge"),
                follow=True,
            )
    page = response.content.decode()
    assert "the provider says the write happened" in page
    event = AuditEvent.objects.get(execution=case, type=AuditType.RECONCILIATION_EVIDENCE)
    assert event.payload["happened"] is True and event.payload["outputValid"] is True
    assert event.actor == "olga"
    (form,) = [o.form for o in response.context["resolutions"] if o.resolution.key == "happened"]
    assert json.loads(form.initial["output"]) == {"chargeId": "ch_1", "status": "paid"}
    assert Execution.objects.get(pk=case.pk).status == ExecutionStatus.RECONCILIATION_REQUIRED


# --- Resolving through the admin -------------------------------------------------------------


def test_resolve__from_the_case_page__requeues_and_audits(operator, charge_registry):
    case = reconciliation_case()
    lookup(case, happened=False)
    client = _client(operator)
    response = client.post(
        reverse(QUEUE),
        _resolve_post(case, "resolve_write_not_happened", action_id="charge", reason="No charge."),
    )
    assert response.status_code == 302 and response.url == _case_url(case)
    assert Execution.objects.get(pk=case.pk).status == ExecutionStatus.PENDING
    event = AuditEvent.objects.get(execution=case, type=AuditType.RECONCILIATION_RESOLVED)
    assert (event.actor, event.payload["reason"]) == ("olga", "No charge.")
    page = client.get(response.url).content.decode()
    assert "resolved 1 case(s)" in page and 'id="case-resolutions"' not in page


def test_resolve__write_happened_with_its_output(operator, charge_registry):
    case = reconciliation_case()
    output = {"chargeId": "ch_9", "status": "paid"}
    response = _client(operator).post(
        reverse(QUEUE),
        _resolve_post(
            case,
            "resolve_write_happened",
            action_id="charge",
            output=json.dumps(output),
            reason="Seen at the provider.",
        ),
    )
    assert response.status_code == 302
    checkpoint = ActionExecution.objects.get(execution=case)
    assert (checkpoint.status, checkpoint.output) == (CheckpointStatus.SUCCEEDED, output)


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        ({"reason": "   "}, "This field is required."),
        ({"reason": "ok", "output": "{not json"}, "The output is not valid JSON"),
        ({"reason": "ok", "output": "[1]"}, "must be a JSON object"),
    ],
)
def test_resolve__an_invalid_form_is_shown_again_and_writes_nothing(
    operator, charge_registry, fields, problem
):
    case = reconciliation_case()
    before = row(case.pk)
    data = _resolve_post(case, "resolve_write_happened", action_id="charge", **fields)
    data.setdefault("output", '{"chargeId": "c", "status": "paid"}')
    response = _client(operator).post(reverse(QUEUE), data, follow=True)
    assert response.redirect_chain == [(_case_url(case), 302)]  # the case's own address
    assert problem in response.content.decode()
    assert row(case.pk) == before


def test_resolve__an_output_the_schema_rejects_is_reported_and_writes_nothing(
    operator, charge_registry
):
    case = reconciliation_case()
    before = row(case.pk)
    response = _client(operator).post(
        reverse(QUEUE),
        _resolve_post(
            case, "resolve_write_happened", action_id="charge", output='{"x": 1}', reason="r"
        ),
        follow=True,
    )
    assert "output schema" in response.content.decode()
    assert row(case.pk) == before


def test_resolve__from_the_queue__asks_for_a_reason_first(operator):
    one, two = reconciliation_case(), reconciliation_case()
    client = _client(operator)
    selected = {"action": "abandon_execution", "index": "0", "_selected_action": [one.pk, two.pk]}
    confirm = client.post(reverse(QUEUE), selected)
    assert confirm.status_code == 200 and 'name="reason"' in confirm.content.decode()
    assert Execution.objects.filter(status=ExecutionStatus.FAILED).count() == 0

    done = client.post(
        reverse(QUEUE),
        {
            "action": "abandon_execution",
            "_selected_action": [one.pk, two.pk],
            "post": "yes",
            "reason": "Duplicates of another order.",
        },
    )
    assert done.status_code == 302
    assert Execution.objects.filter(status=ExecutionStatus.FAILED).count() == 2


def test_resolve__a_settled_case_reports_nothing_to_resolve(operator):
    case = reconciliation_case()
    services.execution_abandon(execution_id=case.pk, reason="first", operator=operator)
    before = row(case.pk)
    response = _client(operator).post(
        reverse(QUEUE), _resolve_post(case, "abandon_execution", reason="again"), follow=True
    )
    assert "Nothing to resolve" in response.content.decode()
    assert row(case.pk) == before


# --- Refusals --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "action", ["resolve_write_happened", "resolve_write_not_happened", "abandon_execution"]
)
def test_forged_post__without_the_permission__is_refused_and_changes_nothing(
    viewer, charge_registry, action
):
    case = reconciliation_case()
    before = row(case.pk)
    forged = _resolve_post(
        case,
        action,
        action_id="charge",
        reason="forged",
        output='{"chargeId": "c", "status": "paid"}',
    )
    response = _client(viewer).post(reverse(QUEUE), forged)
    assert response.status_code == 403
    assert row(case.pk) == before
    assert Execution.objects.get(pk=case.pk).status == ExecutionStatus.RECONCILIATION_REQUIRED


def test_forged_post__with_another_resolutions_permission__is_refused(make_user):
    case = reconciliation_case()
    before = row(case.pk)
    user = make_user("ann", "view_reconciliationcase", "abandon_execution")
    forged = _resolve_post(case, "resolve_write_not_happened", action_id="charge", reason="x")
    assert _client(user).post(reverse(QUEUE), forged).status_code == 403
    # Hidden behind a permitted action, picked by index as the changelist's action bar does.
    smuggled = {**forged, "action": ["resolve_write_not_happened", "abandon_execution"]}
    assert _client(user).post(reverse(QUEUE), {**smuggled, "index": "0"}).status_code == 403
    assert row(case.pk) == before


def test_post_to_the_case_page__is_refused(operator):
    case = reconciliation_case()
    before = row(case.pk)
    response = _client(operator).post(_case_url(case), {"reason": "x", "status": "FAILED"})
    assert response.status_code == 403
    assert row(case.pk) == before


def test_post_without_csrf_token__is_refused(operator):
    case = reconciliation_case()
    before = row(case.pk)
    client = Client(enforce_csrf_checks=True)
    client.force_login(operator)
    response = client.post(reverse(QUEUE), _resolve_post(case, "abandon_execution", reason="x"))
    assert response.status_code == 403
    assert row(case.pk) == before


@pytest.mark.parametrize(
    "query",
    [
        {"flow": "²"},
        {"flow": "1" * 4301},
        {"flow": "no-such-flow"},
        {"capability": "x@²"},
        {"capability": "x@" + "1" * 4301},
        {"capability": "payments.charge@" + "9" * 10},
        {"status": "²"},
        {"age": "1" * 4301},
    ],
    ids=lambda q: f"{next(iter(q))}={next(iter(q.values()))[:20]}",
)
@pytest.mark.parametrize(
    "queue",
    [QUEUE, "admin:reconciliation_blockedrequest_changelist"],
    ids=["cases", "blocked"],
)
def test_queue__an_invalid_filter_value_lists_nothing_never_a_500(operator, queue, query):
    reconciliation_case()
    response = _client(operator).get(reverse(queue), query)
    assert response.status_code == 200
    assert _listed(response) == []
