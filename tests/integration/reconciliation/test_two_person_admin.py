"""The two-person rule in the admin: the case page offers a proposal instead of a replay, shows the
pending proposal (who, when, why) at the top, gives approve/reject to a second permitted operator
only, keeps what was typed on refusal, and a forged post changes nothing."""

import pytest
from django.test import Client
from django.urls import reverse

from executions.models import AuditEvent, AuditType, Execution, ExecutionStatus
from reconciliation import approvals

from .factories import reconciliation_case, row
from .test_case_page import OUTPUT, QUEUE, _case_url, _lookup, _post

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def two_person(settings):
    settings.RECONCILIATION_TWO_PERSON = True


@pytest.fixture
def second(make_user):
    return make_user("petra", "view_reconciliationcase", "resolve_write_not_happened")


def _client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _proposal_url(case) -> str:
    return reverse("admin:reconciliation_reconciliationcase_proposal", args=[case.pk])


def _propose(client, case, **fields):
    return client.post(
        _proposal_url(case),
        {"decision": "propose", "action_id": "charge", "reason": "no record at the provider"}
        | fields,
    )


def test_case_page__offers_a_proposal_not_a_replay(operator, charge_registry):
    case = reconciliation_case()
    _lookup(case, happened=False)
    client = _client(operator)

    page = client.get(_case_url(case)).content.decode()
    assert 'id="two-person-note"' in page
    assert f'action="{_proposal_url(case)}"' in page
    assert "Propose the replay" in page
    queue = client.get(reverse(QUEUE)).content.decode()
    assert 'value="resolve_write_not_happened"' not in queue  # no bulk replay in the menu

    response = _propose(client, case)
    assert response.status_code == 302 and response.url == _case_url(case)
    assert Execution.objects.get(pk=case.pk).status == ExecutionStatus.RECONCILIATION_REQUIRED
    page = client.get(_case_url(case)).content.decode()
    top = page[page.index('id="case-explained"') : page.index('id="case-suggestion"')]
    assert 'id="case-proposal"' in top  # prominently, above the suggestion
    assert "olga" in top and "no record at the provider" in top and "UTC" in top
    assert 'id="proposal-yours"' in page
    assert 'id="approve-proposal"' not in page  # never offered to the proposer
    assert 'id="withdraw-proposal"' in page
    assert 'id="resolve-not-happened"' not in page  # one proposal at a time


def test_the_proposer_posting_approval__is_refused_and_changes_nothing(operator, charge_registry):
    case = reconciliation_case()
    _lookup(case, happened=False)
    client = _client(operator)
    _propose(client, case)
    proposal = approvals.pending_proposal(execution_id=case.pk)
    before = row(case.pk)

    response = client.post(
        _proposal_url(case),
        {"decision": "approve", "proposal": proposal.event_id, "reason": "I approve myself"},
        follow=True,
    )

    # The case again, at its own address, with the refusal and the text kept.
    assert response.redirect_chain == [(_case_url(case), 302)]
    page = response.content.decode()
    assert "a second operator must approve it" in page
    assert "I approve myself" in page
    assert row(case.pk) == before


def test_a_second_operator__approves_and_the_replay_is_applied(operator, second, charge_registry):
    case = reconciliation_case()
    _lookup(case, happened=False)
    _propose(_client(operator), case)
    proposal = approvals.pending_proposal(execution_id=case.pk)
    client = _client(second)

    page = client.get(_case_url(case)).content.decode()
    assert 'id="approve-proposal"' in page and 'id="reject-proposal"' in page

    response = client.post(
        _proposal_url(case),
        {"decision": "approve", "proposal": proposal.event_id, "reason": "support confirms"},
    )

    assert response.status_code == 302 and response.url == _case_url(case)
    assert Execution.objects.get(pk=case.pk).status == ExecutionStatus.PENDING
    page = client.get(_case_url(case)).content.decode()
    assert "olga (proposed), petra (approved)" in page


def test_approving_against_the_evidence__needs_the_confirmation(operator, second, charge_registry):
    case = reconciliation_case()
    _lookup(case, happened=False)
    _propose(_client(operator), case)
    proposal = approvals.pending_proposal(execution_id=case.pk)
    # Then the provider is asked and says the write happened: the proposal is stale.
    _lookup(case, happened=True, output=OUTPUT)
    client = _client(second)
    page = client.get(_case_url(case)).content.decode()
    assert 'id="proposal-stale"' in page and 'id="approve-proposal"' not in page

    # Proposed again on the new evidence (against it, so confirmed), then approved.
    response = _propose(_client(operator), case, confirm_risk="on")
    assert response.status_code == 302
    proposal = approvals.pending_proposal(execution_id=case.pk)
    assert proposal.stale is None
    before = row(case.pk)
    refused = client.post(
        _proposal_url(case),
        {"decision": "approve", "proposal": proposal.event_id, "reason": "ok"},
        follow=True,
    )
    assert refused.redirect_chain == [(_case_url(case), 302)]
    assert "Confirm that you choose this all the same" in refused.content.decode()
    assert row(case.pk) == before

    confirmed = client.post(
        _proposal_url(case),
        {
            "decision": "approve",
            "proposal": proposal.event_id,
            "reason": "ok",
            "confirm_risk": "on",
        },
    )
    assert confirmed.status_code == 302
    assert Execution.objects.get(pk=case.pk).status == ExecutionStatus.PENDING


def test_a_second_operator__rejects_with_a_reason(operator, second, charge_registry):
    case = reconciliation_case()
    _lookup(case, happened=False)
    _propose(_client(operator), case)
    proposal = approvals.pending_proposal(execution_id=case.pk)

    response = _client(second).post(
        _proposal_url(case),
        {"decision": "reject", "proposal": proposal.event_id, "reason": "it shows as paid"},
    )

    assert response.status_code == 302
    event = AuditEvent.objects.get(execution=case, type=AuditType.RECONCILIATION_REJECTED)
    assert event.actor == "petra" and event.payload["reason"] == "it shows as paid"
    page = _client(operator).get(_case_url(case)).content.decode()
    assert 'id="case-proposal"' not in page and 'id="resolve-not-happened"' in page


def test_without_the_permission__no_control_and_a_forged_post_is_refused(
    operator, viewer, charge_registry
):
    case = reconciliation_case()
    _lookup(case, happened=False)
    _propose(_client(operator), case)
    proposal = approvals.pending_proposal(execution_id=case.pk)
    client = _client(viewer)

    page = client.get(_case_url(case)).content.decode()
    assert 'id="case-proposal"' in page and 'id="proposal-waiting"' in page
    assert 'id="decide-proposal"' not in page and 'name="reason"' not in page

    before = row(case.pk)
    for decision in ("approve", "reject", "propose"):
        response = client.post(
            _proposal_url(case),
            {"decision": decision, "proposal": proposal.event_id, "reason": "forged"},
        )
        assert response.status_code == 403
    assert row(case.pk) == before


def test_the_one_person_replay__is_refused_under_the_rule(operator, charge_registry):
    case = reconciliation_case()
    before = row(case.pk)

    response = _client(operator).post(
        reverse(QUEUE),
        _post(case, "resolve_write_not_happened", action_id="charge", reason="alone"),
        follow=True,
    )

    assert response.redirect_chain == [(_case_url(case), 302)]
    assert "two-person rule is on" in response.content.decode()
    assert row(case.pk) == before


def test_the_queue__marks_a_case_whose_replay_awaits_approval(operator, charge_registry):
    waiting, other = reconciliation_case(), reconciliation_case()
    _lookup(waiting, happened=False)
    _propose(_client(operator), waiting)
    page = _client(operator).get(reverse(QUEUE)).content.decode()
    assert page.count("replay proposed") == 1
    marked = page.index("replay proposed")
    assert page.rfind(str(waiting.pk)[:8], 0, marked) > page.rfind(str(other.pk)[:8], 0, marked)


def test_rule_turned_off__a_leftover_proposal_is_not_offered(
    operator, second, settings, charge_registry
):
    case = reconciliation_case()
    _lookup(case, happened=False)
    _propose(_client(operator), case)
    settings.RECONCILIATION_TWO_PERSON = False
    page = _client(second).get(_case_url(case)).content.decode()
    assert 'id="case-proposal"' not in page and 'id="approve-proposal"' not in page
