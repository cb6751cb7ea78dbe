"""The two-person rule against real PostgreSQL: a replay is proposed by one operator and applied
only on a second one's approval, through the same fenced write; the proposer never approves their
own; a proposal the case has moved under is stale; two approvals at once apply one replay."""

import pytest
from django.core.exceptions import PermissionDenied

from executions.models import (
    ActionExecution,
    AuditEvent,
    AuditType,
    CheckpointStatus,
    Execution,
    ExecutionStatus,
)
from orquestador import errors
from reconciliation import approvals, services

from .factories import audit, reconciliation_case, row
from .test_fencing import _race

pytestmark = pytest.mark.django_db


@pytest.fixture
def two_person(settings):
    settings.RECONCILIATION_TWO_PERSON = True


@pytest.fixture
def second(make_user):
    """Another operator who may approve replays."""
    return make_user("petra", "view_reconciliationcase", "resolve_write_not_happened")


def _propose(execution, user, reason="the provider has no record of it"):
    return approvals.replay_propose(
        execution_id=execution.pk, action_id="charge", reason=reason, operator=user
    )


def _approve(execution, proposal, user, reason="checked with the provider's support desk"):
    return approvals.replay_approve(
        execution_id=execution.pk, proposal_id=proposal.event_id, reason=reason, operator=user
    )


def _not_found(execution):
    audit(
        execution.request,
        execution,
        AuditType.RECONCILIATION_EVIDENCE,
        actionId="charge",
        happened=False,
        operator="olga",
    )


def test_two_person__a_single_operator_cannot_replay(operator, two_person, charge_registry):
    case = reconciliation_case()
    before = row(case.pk)

    with pytest.raises(services.ResolutionRefused) as refused:
        services.execution_resolve_write_not_happened(
            execution_id=case.pk, action_id="charge", reason="r", operator=operator
        )

    assert refused.value.code == errors.APPROVAL_REQUIRED
    assert row(case.pk) == before


def test_two_person__proposal_then_approval_by_another__replays_with_both_names(
    operator, second, two_person, charge_registry
):
    case = reconciliation_case()
    _not_found(case)

    proposal = _propose(case, operator)
    assert Execution.objects.get(pk=case.pk).status == ExecutionStatus.RECONCILIATION_REQUIRED
    assert approvals.pending_proposal(execution_id=case.pk) == proposal
    assert proposal.stale is None and proposal.lookup == "not found"

    resolved = _approve(case, proposal, second)

    assert resolved.resolution == services.Resolution.WRITE_NOT_HAPPENED
    execution = Execution.objects.get(pk=case.pk)
    assert execution.status == ExecutionStatus.PENDING
    checkpoint = ActionExecution.objects.get(execution=case)
    assert checkpoint.status == CheckpointStatus.FAILED
    assert checkpoint.error_code == errors.REPLAY_AUTHORIZED
    assert "olga (proposed) and petra (approved)" in checkpoint.error_detail
    proposed = AuditEvent.objects.get(execution=case, type=AuditType.RECONCILIATION_PROPOSED)
    assert proposed.actor == "olga"
    assert proposed.payload["reason"] == "the provider has no record of it"
    event = AuditEvent.objects.get(execution=case, type=AuditType.RECONCILIATION_RESOLVED)
    assert event.actor == "petra" and event.payload["operator"] == "petra"
    assert event.payload["evidence"]["approval"] == {
        "proposalId": proposal.event_id,
        "proposedBy": "olga",
        "proposedAt": proposal.at.isoformat(),
        "proposalReason": "the provider has no record of it",
        "approvedBy": "petra",
    }
    assert approvals.pending_proposal(execution_id=case.pk) is None


def test_two_person__the_proposer_cannot_approve_their_own(operator, two_person, charge_registry):
    case = reconciliation_case()
    proposal = _propose(case, operator)
    before = row(case.pk)

    with pytest.raises(services.ResolutionRefused) as refused:
        _approve(case, proposal, operator)

    assert refused.value.code == errors.SELF_APPROVAL
    assert row(case.pk) == before


def test_two_person__without_the_permission_nobody_proposes_approves_or_rejects(
    operator, viewer, two_person, charge_registry
):
    case = reconciliation_case()
    with pytest.raises(PermissionDenied):
        _propose(case, viewer)
    proposal = _propose(case, operator)
    before = row(case.pk)

    with pytest.raises(PermissionDenied):
        _approve(case, proposal, viewer)
    with pytest.raises(PermissionDenied):
        approvals.replay_reject(
            execution_id=case.pk, proposal_id=proposal.event_id, reason="no", operator=viewer
        )

    assert row(case.pk) == before


def test_two_person__a_rejected_proposal_cannot_be_approved(
    operator, second, make_user, two_person, charge_registry
):
    third = make_user("quinn", "resolve_write_not_happened")
    case = reconciliation_case()
    proposal = _propose(case, operator)

    rejected = approvals.replay_reject(
        execution_id=case.pk,
        proposal_id=proposal.event_id,
        reason="the provider's dashboard shows the charge",
        operator=second,
    )

    assert rejected.type == AuditType.RECONCILIATION_REJECTED and rejected.actor == "petra"
    assert rejected.payload["proposedBy"] == "olga" and rejected.payload["withdrawn"] is False
    assert rejected.payload["reason"] == "the provider's dashboard shows the charge"
    assert approvals.pending_proposal(execution_id=case.pk) is None
    with pytest.raises(services.ResolutionRefused) as refused:
        _approve(case, proposal, third)
    assert refused.value.code == errors.PROPOSAL_STALE
    assert Execution.objects.get(pk=case.pk).status == ExecutionStatus.RECONCILIATION_REQUIRED


def test_two_person__one_proposal_at_a_time(operator, second, two_person, charge_registry):
    case = reconciliation_case()
    _propose(case, operator)

    with pytest.raises(services.ResolutionRefused) as refused:
        _propose(case, second)

    assert refused.value.code == errors.PROPOSAL_PENDING
    assert "olga" in refused.value.detail


def test_two_person__new_evidence_makes_the_proposal_stale(
    operator, second, two_person, charge_registry
):
    case = reconciliation_case()
    _not_found(case)
    proposal = _propose(case, operator)
    # The provider is asked again, and now says the write happened.
    audit(
        case.request,
        case,
        AuditType.RECONCILIATION_EVIDENCE,
        actionId="charge",
        happened=True,
        operator="system:prober",
    )
    before = row(case.pk)

    with pytest.raises(services.ResolutionRefused) as refused:
        _approve(case, proposal, second)

    assert refused.value.code == errors.PROPOSAL_STALE
    assert "not found then, happened now" in refused.value.detail
    assert row(case.pk) == before
    stale = approvals.pending_proposal(execution_id=case.pk)
    assert stale.event_id == proposal.event_id and stale.stale
    # A stale proposal does not block a new one.
    assert _propose(case, second).stale is None


def test_two_person__a_case_resolved_otherwise_leaves_nothing_to_approve(
    operator, second, two_person, charge_registry
):
    case = reconciliation_case()
    proposal = _propose(case, operator)
    services.execution_abandon(execution_id=case.pk, reason="given up", operator=operator)

    with pytest.raises(services.ResolutionRefused) as refused:
        _approve(case, proposal, second)

    assert refused.value.code == errors.NOT_IN_RECONCILIATION


def test_two_person__rule_off__nothing_to_propose(operator, charge_registry):
    case = reconciliation_case()
    with pytest.raises(services.ResolutionRefused) as refused:
        _propose(case, operator)
    assert refused.value.code == errors.NO_APPROVAL_NEEDED
    assert not AuditEvent.objects.filter(
        execution=case, type=AuditType.RECONCILIATION_PROPOSED
    ).exists()


@pytest.mark.django_db(transaction=True)
def test_two_person__two_approvals_at_once__one_replay_applies(
    operator, second, make_user, two_person, charge_registry
):
    third = make_user("quinn", "resolve_write_not_happened")
    case = reconciliation_case()
    _not_found(case)
    proposal = _propose(case, operator)

    results = _race(
        lambda: _approve(case, proposal, second, reason="approved by petra"),
        lambda: _approve(case, proposal, third, reason="approved by quinn"),
    )

    landed = [r for r in results if isinstance(r, services.Resolved)]
    refused = [r for r in results if isinstance(r, services.ResolutionRefused)]
    assert len(landed) == 1 and len(refused) == 1, results
    assert refused[0].code == errors.NOT_IN_RECONCILIATION
    events = AuditEvent.objects.filter(execution=case, type=AuditType.RECONCILIATION_RESOLVED)
    assert events.count() == 1
    assert Execution.objects.get(pk=case.pk).fencing_token == case.fencing_token + 1


def test_two_person__approving_a_replay_with_no_answer_about_its_attempt__needs_the_confirmation(
    operator, second, two_person, charge_registry
):
    # The provider said "not found" about attempt 1; the replay (attempt 2) was lost too.
    case = reconciliation_case(attempt=2)
    _not_found(case)  # recorded before lookups named their attempt: about attempt 1
    proposal = _propose(case, operator)
    assert proposal.lookup == "not asked"  # nothing about attempt 2
    before = row(case.pk)

    with pytest.raises(services.ResolutionRefused) as refused:
        _approve(case, proposal, second)

    assert refused.value.code == errors.RISK_NOT_CONFIRMED
    assert row(case.pk) == before
    approvals.replay_approve(
        execution_id=case.pk,
        proposal_id=proposal.event_id,
        reason="the provider's support confirmed by phone: no charge under this key",
        operator=second,
        confirm_risk=True,
    )
    assert Execution.objects.get(pk=case.pk).status == ExecutionStatus.PENDING
