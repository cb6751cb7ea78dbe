"""The case page explains itself: why the case is uncertain, what identifies it, what the provider
said, the suggested resolution, a second confirmation against the evidence, errors that keep
what the operator typed, the operator who came second, and the resolved case's summary."""

import pytest
from django.test import Client
from django.urls import reverse

from executions.models import CheckpointStatus, Execution, ExecutionStatus
from reconciliation import services

from .factories import lookup, reconciliation_case, row

pytestmark = pytest.mark.django_db

QUEUE = "admin:reconciliation_reconciliationcase_changelist"
OUTPUT = {"chargeId": "ch_1", "status": "paid"}


def _case_url(case: Execution) -> str:
    return reverse("admin:reconciliation_reconciliationcase_change", args=[case.pk])


def _client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _post(case: Execution, action: str, **fields: str) -> dict:
    return {"action": action, "_selected_action": str(case.pk), "post": "yes", **fields}


def _lookup(case: Execution, *, happened: bool | None, output: dict | None = None) -> None:
    """A provider lookup about the case's first attempt, as checkpoint_record_lookup appends it."""
    lookup(case, happened=happened, output=output)


def _section(page: str, element_id: str) -> str:
    start = page.index(f'id="{element_id}"')
    return page[start : start + 4000]


def test_case_page__says_why_what_and_what_next_at_the_top(operator, charge_registry):
    case = reconciliation_case()
    page = _client(operator).get(_case_url(case)).content.decode()
    top = _section(page, "case-explained")
    assert "Why it needs you:" in top and "is unknown" in top
    assert "read timed out after the request was sent" in top
    assert "customer</b> cus_ada" in top and "amount</b> 42" in top
    assert "not asked yet about attempt 1</span> (sent " in _section(top, "case-evidence")
    assert "Suggested resolution:" in top and "Ask the provider, or check with it directly" in top
    assert 'id="lookup-charge"' in top  # the lookup button sits beside the suggestion
    assert "nothing is pre-selected" in top
    assert page.index('id="case-explained"') < page.index('id="case-checkpoints"')
    assert "— suggested" not in page


def test_case_page__a_crash_in_flight_is_explained(operator, charge_registry):
    case = reconciliation_case(
        checkpoint_status=CheckpointStatus.RUNNING, error_code=None, error_detail=None
    )
    why = _section(_client(operator).get(_case_url(case)).content.decode(), "case-why")
    assert "stopped (its lease ran out) while the call of &#x27;charge&#x27;" in why
    assert "was in flight" in why and "never repeated without an operator" in why


@pytest.mark.parametrize(
    ("happened", "output", "headline", "suggested"),
    [
        (True, OUTPUT, "The write happened: record the provider&#x27;s output.", "happened"),
        (False, None, "The write did not happen: replay it once.", "not-happened"),
        (None, None, "Ask the provider again, or check with it directly.", None),
    ],
)
def test_suggestion__follows_the_provider(
    operator, charge_registry, happened, output, headline, suggested
):
    case = reconciliation_case()
    _lookup(case, happened=happened, output=output)
    page = _client(operator).get(_case_url(case)).content.decode()
    assert headline in _section(page, "case-suggestion")
    if suggested:
        form = _section(page, f"resolve-{suggested}")
        assert "— suggested" in form
        # The suggested resolution is the first form offered.
        assert page.index(f'id="resolve-{suggested}"') < page.index('id="resolve-abandon"')
    else:
        assert "— suggested" not in page
    if happened:
        assert "ch_1" in _section(page, "resolve-happened")  # the provider's output, pre-filled


def test_replay_after_the_provider_said_happened__needs_a_second_confirmation(
    operator, charge_registry
):
    case = reconciliation_case()
    _lookup(case, happened=True, output=OUTPUT)
    client = _client(operator)
    page = client.get(_case_url(case)).content.decode()
    assert "Against the evidence: The provider said this write happened" in page
    before = row(case.pk)
    reason = "Support says the customer was not charged."
    refused = client.post(
        reverse(QUEUE),
        _post(case, "resolve_write_not_happened", action_id="charge", reason=reason),
        follow=True,
    )
    # The case page again, at its own address (post/redirect/get: a reload does not post).
    assert refused.redirect_chain == [(_case_url(case), 302)]
    again = refused.content.decode()
    assert 'id="case-explained"' in again
    assert "Confirm that you choose this all the same" in again
    assert reason in again  # what the operator typed is kept
    assert row(case.pk) == before
    # The refusal is said at the top, where the page opens, with a way to the form.
    told = [str(m) for m in refused.context["messages"]]
    assert len(told) == 1 and told[0].startswith("Not done: “The write did not happen” was refused")
    assert "Against the evidence: The provider said this write happened" in told[0]
    assert "Confirm that you choose this all the same" in told[0]
    assert again.index('class="messagelist"') < again.index('id="case-explained"')
    assert 'href="#resolve-not-happened" id="refusal-form-link"' in again

    confirmed = client.post(
        reverse(QUEUE),
        _post(
            case,
            "resolve_write_not_happened",
            action_id="charge",
            reason=reason,
            confirm_risk="on",
        ),
    )
    assert confirmed.status_code == 302 and confirmed.url == _case_url(case)
    assert Execution.objects.get(pk=case.pk).status == ExecutionStatus.PENDING


def test_happened_after_the_provider_said_not_found__needs_a_second_confirmation(
    operator, charge_registry
):
    case = reconciliation_case()
    _lookup(case, happened=False)
    before = row(case.pk)
    response = _client(operator).post(
        reverse(QUEUE),
        _post(
            case,
            "resolve_write_happened",
            action_id="charge",
            reason="The provider's dashboard shows it.",
            output='{"chargeId": "ch_2", "status": "paid"}',
        ),
        follow=True,
    )
    assert response.redirect_chain == [(_case_url(case), 302)]
    assert "The provider said this write did not happen" in response.content.decode()
    assert row(case.pk) == before


def test_following_the_evidence__needs_no_confirmation(operator, charge_registry):
    case = reconciliation_case()
    _lookup(case, happened=False)
    response = _client(operator).post(
        reverse(QUEUE), _post(case, "resolve_write_not_happened", action_id="charge", reason="r")
    )
    assert response.status_code == 302
    assert Execution.objects.get(pk=case.pk).status == ExecutionStatus.PENDING


@pytest.mark.parametrize(
    ("output", "problem"),
    [('{"x": 1}', "output schema"), ("{not json", "The output is not valid JSON")],
)
def test_a_refused_output__stays_on_the_case_with_what_was_typed(
    operator, charge_registry, output, problem
):
    case = reconciliation_case()
    before = row(case.pk)
    reason = "Typed with care: the provider's support confirmed the charge."
    response = _client(operator).post(
        reverse(QUEUE),
        _post(case, "resolve_write_happened", action_id="charge", reason=reason, output=output),
        follow=True,
    )
    assert response.redirect_chain == [(_case_url(case), 302)]
    page = response.content.decode()
    assert 'id="case-explained"' in page and problem in page
    assert reason.replace("'", "&#x27;") in page
    assert output.replace('"', "&quot;") in page
    assert row(case.pk) == before


def test_the_operator_who_comes_second__stays_on_the_case_and_sees_who_resolved(
    operator, make_user, charge_registry
):
    case = reconciliation_case()
    _lookup(case, happened=False)
    services.execution_resolve_write_not_happened(
        execution_id=case.pk, action_id="charge", reason="first", operator=operator
    )
    second = make_user("sam", "view_reconciliationcase", "abandon_execution")
    response = _client(second).post(
        reverse(QUEUE), _post(case, "abandon_execution", reason="second"), follow=True
    )
    assert response.redirect_chain[-1][0] == _case_url(case)
    page = response.content.decode()
    assert f"case {str(case.pk)[:8]} was already settled by olga at" in page
    assert "WRITE_NOT_HAPPENED" in page


def test_a_resolved_case__shows_who_what_when_why_and_the_live_status(operator, charge_registry):
    case = reconciliation_case()
    _lookup(case, happened=False)
    services.execution_resolve_write_not_happened(
        execution_id=case.pk,
        action_id="charge",
        reason="No charge at the provider.",
        operator=operator,
    )
    page = _client(operator).get(_case_url(case)).content.decode()
    card = _section(page, "case-resolved")
    assert "The write did not happen (one replay)" in card and "olga" in card
    assert "No charge at the provider." in card
    assert "PENDING since" in card and "none has yet" in card
    assert 'http-equiv="refresh"' in page  # it keeps itself current while the execution runs
    assert 'id="case-resolutions"' not in page


def test_an_abandoned_case__shows_no_uncertain_checkpoint(operator, charge_registry):
    case = reconciliation_case()
    services.execution_abandon(execution_id=case.pk, reason="gone", operator=operator)
    page = _client(operator).get(_case_url(case)).content.decode()
    assert "(uncertain)" not in page and "Abandoned" in _section(page, "case-resolved")
    assert 'http-equiv="refresh"' not in page  # FAILED is final


def test_a_reader_without_resolution_permissions__sees_no_resolution_control(
    viewer, charge_registry
):
    case = reconciliation_case()
    page = _client(viewer).get(_case_url(case)).content.decode()
    assert "Suggested resolution:" in page  # the explanation is for everyone who may read it
    assert 'id="no-resolution-permission"' in page
    assert 'name="reason"' not in page and "lookup-charge" not in page


def test_a_refused_form__says_which_field_and_why_at_the_top(operator, charge_registry):
    case = reconciliation_case()
    response = _client(operator).post(
        reverse(QUEUE), _post(case, "abandon_execution", reason="   "), follow=True
    )
    assert response.redirect_chain == [(_case_url(case), 302)]
    told = [str(m) for m in response.context["messages"]]
    assert told == [
        "Not done: “Abandon” was refused and nothing was written. Reason: This field is "
        'required. <a href="#resolve-abandon" id="refusal-form-link">Go to the form</a> (it '
        "keeps what you typed)."
    ]


def test_a_refusal_by_the_service__is_said_once_at_the_top(operator, charge_registry):
    case = reconciliation_case()
    response = _client(operator).post(
        reverse(QUEUE),
        _post(case, "resolve_write_happened", action_id="charge", reason="r", output='{"x": 1}'),
        follow=True,
    )
    assert response.redirect_chain == [(_case_url(case), 302)]
    told = [str(m) for m in response.context["messages"]]
    assert len(told) == 1 and "output schema" in told[0], told


def test_replay_offered__the_first_screen_says_what_a_replay_does_at_the_provider(
    operator, viewer, make_user, charge_registry
):
    case = reconciliation_case()
    top = _section(_client(operator).get(_case_url(case)).content.decode(), "case-explained")
    risk = _section(top, "case-replay-risk")
    assert "A replay calls payments.charge again with the same Idempotency-Key" in risk
    assert f"({case.pk}:charge)" in risk
    assert "a provider that does not deduplicate applies the write a second time" in risk
    assert "a double charge" in risk
    # Where no replay is offered (a reader, an operator who may only abandon), it is not said.
    assert 'id="case-replay-risk"' not in _client(viewer).get(_case_url(case)).content.decode()
    abandoner = make_user("abe", "view_reconciliationcase", "abandon_execution")
    assert 'id="case-replay-risk"' not in _client(abandoner).get(_case_url(case)).content.decode()


def test_after_a_lost_replay__the_page_speaks_of_the_new_attempt_and_suggests_no_replay(
    operator, charge_registry
):
    # The provider said "not found" about attempt 1; the replay (attempt 2) was lost too.
    case = reconciliation_case(attempt=2)
    earlier = lookup(case, happened=False, attempt=1)
    client = _client(operator)

    page = client.get(_case_url(case)).content.decode()

    top = _section(page, "case-explained")
    assert "at attempt 2" in _section(top, "case-why") and "is unknown" in top
    evidence = _section(top, "case-evidence")
    assert "not asked yet about attempt 2</span>" in evidence
    assert "was about attempt 1, given before this attempt was sent" in evidence
    assert "the write did not happen" not in evidence  # the old answer is not this one's
    suggestion = _section(page, "case-suggestion")
    assert "Ask the provider about attempt 2, or check with it directly." in suggestion
    assert "nothing is pre-selected" in suggestion
    assert 'value="Ask the provider about attempt 2"' in suggestion
    assert "— suggested" not in page
    risk = _section(page, "risk-not-happened")
    assert risk.startswith('id="risk-not-happened">Without evidence: No answer from the provider')
    lookups = _section(page, f"lookup-row-{earlier.pk}")
    assert "1 (an earlier attempt: no evidence about the current one)" in lookups
    queue = client.get(reverse(QUEUE)).content.decode()
    assert ">not asked<" in queue and ">not found<" not in queue

    # Replaying on the answer about attempt 1 is refused on the page, nothing written.
    before = row(case.pk)
    refused = client.post(
        reverse(QUEUE),
        _post(case, "resolve_write_not_happened", action_id="charge", reason="It said not found."),
        follow=True,
    )
    assert refused.redirect_chain == [(_case_url(case), 302)]
    assert 'id="case-explained"' in refused.content.decode()
    told = [str(m) for m in refused.context["messages"]]
    assert len(told) == 1 and told[0].startswith("Not done: “The write did not happen” was refused")
    assert "Without evidence" in told[0] and "Confirm that you choose this all the same" in told[0]
    assert row(case.pk) == before

    # Once the provider answers about attempt 2, the evidence and the suggestion follow it.
    lookup(case, happened=True, output=OUTPUT, attempt=2)
    page = client.get(_case_url(case)).content.decode()
    assert "— about attempt 2, asked by olga" in _section(page, "case-evidence")
    assert "The write happened: record the provider" in _section(page, "case-suggestion")
    assert "— suggested" in _section(page, "resolve-happened")
