"""The audit and the two-person rule name operators as their identity provider does (issuer and
subject, orquestador/models.py): two Django accounts of one person at the provider cannot approve
each other's replay, and each decision records the provider's names beside the username."""

import pytest

from executions.models import AuditEvent, AuditType, Execution, ExecutionStatus
from orquestador import errors
from orquestador.models import OperatorIdentity
from reconciliation import approvals, services

from .factories import audit, reconciliation_case, row

pytestmark = pytest.mark.django_db

ISSUER = "https://sso.example.com/realms/acme"


@pytest.fixture
def two_person(settings):
    settings.RECONCILIATION_TWO_PERSON = True


def _identify(user, subject: str) -> dict:
    OperatorIdentity.objects.update_or_create(
        user=user, defaults={"issuer": ISSUER, "subject": subject}
    )
    return {"issuer": ISSUER, "subject": subject}


def _case_with_not_found():
    case = reconciliation_case()
    audit(
        case.request,
        case,
        AuditType.RECONCILIATION_EVIDENCE,
        actionId="charge",
        happened=False,
        operator="olga",
    )
    return case


def _propose(case, user):
    return approvals.replay_propose(
        execution_id=case.pk, action_id="charge", reason="no charge there", operator=user
    )


def _approve(case, proposal, user):
    return approvals.replay_approve(
        execution_id=case.pk, proposal_id=proposal.event_id, reason="checked", operator=user
    )


def test_two_accounts_of_one_person__cannot_approve_each_other(
    operator, make_user, two_person, charge_registry
):
    # The provider's account was linked to "olga" when she proposed; it now signs in as
    # "olga-2" (an account made again after the first one's link was removed): one person.
    case = _case_with_not_found()
    _identify(operator, "f3a1-olga")
    proposal = _propose(case, operator)
    OperatorIdentity.objects.filter(user=operator).delete()
    again = make_user("olga-2", "view_reconciliationcase", "resolve_write_not_happened")
    _identify(again, "f3a1-olga")
    before = row(case.pk)

    with pytest.raises(services.ResolutionRefused) as refused:
        _approve(case, proposal, again)

    assert refused.value.code == errors.SELF_APPROVAL
    assert row(case.pk) == before
    assert approvals.is_proposer(proposal, again)


def test_another_person__approves__both_identities_audited(
    operator, make_user, two_person, charge_registry
):
    case = _case_with_not_found()
    olga = _identify(operator, "f3a1-olga")
    petra_user = make_user("petra", "view_reconciliationcase", "resolve_write_not_happened")
    petra = _identify(petra_user, "77c0-petra")

    proposal = _propose(case, operator)
    assert proposal.proposer_identity == olga
    assert not approvals.is_proposer(proposal, petra_user)
    _approve(case, proposal, petra_user)

    assert Execution.objects.get(pk=case.pk).status == ExecutionStatus.PENDING
    proposed = AuditEvent.objects.get(execution=case, type=AuditType.RECONCILIATION_PROPOSED)
    assert proposed.payload["proposerIdentity"] == olga
    resolved = AuditEvent.objects.get(execution=case, type=AuditType.RECONCILIATION_RESOLVED)
    assert resolved.payload["operatorIdentity"] == petra
    approval = resolved.payload["evidence"]["approval"]
    assert approval["proposedByIdentity"] == olga and approval["approvedByIdentity"] == petra


def test_local_accounts__audit_as_before(operator, charge_registry):
    case = reconciliation_case()
    services.execution_abandon(execution_id=case.pk, reason="duplicate order", operator=operator)
    event = AuditEvent.objects.get(execution=case, type=AuditType.RECONCILIATION_RESOLVED)
    assert event.payload["operator"] == "olga" and "operatorIdentity" not in event.payload


def test_an_identity_names_one_account():
    from django.contrib.auth.models import User
    from django.db import IntegrityError, transaction

    first = User.objects.create_user("a")
    second = User.objects.create_user("b")
    OperatorIdentity.objects.create(user=first, issuer=ISSUER, subject="s")
    with pytest.raises(IntegrityError), transaction.atomic():
        OperatorIdentity.objects.create(user=second, issuer=ISSUER, subject="s")
