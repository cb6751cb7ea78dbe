"""The two-person rule (RECONCILIATION.md#two-person-rule): a replay of a NON_IDEMPOTENT_WRITE is
proposed by one operator and applied only when a second one approves it.

Invariants: under the rule the one-person service refuses such a replay (APPROVAL_REQUIRED), and
`replay_approve` applies it through the same operator_write and services.replay; propose, approve
and reject are each one operator_write, so of two approvals the second finds the case resolved;
the proposal (the latest RECONCILIATION_PROPOSED not followed by REJECTED or RESOLVED) holds only
while token, checkpoint, attempt and the provider's latest answer are as proposed (else
PROPOSAL_STALE); the approver holds the permission and is not the proposer (nor an account with
the proposer's issuer and subject at the identity provider), checked here."""

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from executions.models import ActionExecution, AuditEvent, AuditType, Execution, ExecutionStatus
from executions.queue.operatorwrites import LockedExecution, clean_reason
from orquestador import errors
from orquestador.models import identity_of

from . import permissions
from .evidence import checkpoint_evidence, is_uncertain
from .explain import lookup_status
from .selectors import latest_lookup
from .services import (
    Operator,
    Resolution,
    ResolutionRefused,
    Resolved,
    identity_payload,
    needs_two_people,
    open_case,
    replay,
    require,
    two_person_rule,
    uncertain_checkpoint,
)

# The events that open or close a proposal: the latest one says whether one is pending.
DECISIONS = (
    AuditType.RECONCILIATION_PROPOSED,
    AuditType.RECONCILIATION_REJECTED,
    AuditType.RECONCILIATION_RESOLVED,
)


@dataclass(frozen=True)
class Proposal:
    """A replay proposed under the two-person rule, as its RECONCILIATION_PROPOSED event says."""

    event_id: int
    execution_id: uuid.UUID
    action_id: str
    proposer: str
    proposer_identity: (
        dict[str, str] | None
    )  # the provider's {issuer, subject}, if it signed them in
    reason: str
    at: datetime
    fencing_token: int  # the execution's token when proposed
    attempt: int  # the uncertain checkpoint's attempt when proposed
    lookup: str  # the provider's latest answer when proposed (explain.lookup_status)
    stale: str | None  # why it no longer holds, or None while it does

    @classmethod
    def of(cls, event: AuditEvent, *, stale: str | None) -> "Proposal":
        payload = event.payload
        if event.execution_id is None:  # proposals are read by execution: never
            raise ValueError(f"audit event {event.pk} is no execution's, so no proposal")
        return cls(
            event_id=event.pk,
            execution_id=event.execution_id,
            action_id=payload["actionId"],
            proposer=payload["proposer"],
            proposer_identity=payload.get("proposerIdentity"),
            reason=payload["reason"],
            at=event.created_at,
            fencing_token=payload["fencingToken"],
            attempt=payload["attempt"],
            lookup=payload["lookupStatus"],
            stale=stale,
        )


def is_proposer(proposal: Proposal, operator: Operator) -> bool:
    """Whether `operator` is the person who proposed: the same Django user, or another account
    the identity provider signed in as the same (issuer, subject)."""
    if proposal.proposer == operator.get_username():
        return True
    identity = identity_of(operator)
    return identity is not None and identity == proposal.proposer_identity


def _named(key: str, value: dict[str, str] | None) -> dict[str, Any]:
    return {key: value} if value else {}


def _latest_decision(execution_id: uuid.UUID | str) -> AuditEvent | None:
    return (
        AuditEvent.objects.filter(execution_id=execution_id, type__in=DECISIONS)
        .order_by("-id")
        .first()
    )


def _staleness(
    payload: dict[str, Any], *, token: int, status: str, checkpoint: ActionExecution | None
) -> str | None:
    """Why a proposal no longer holds for the case as it is now, or None."""
    if status != ExecutionStatus.RECONCILIATION_REQUIRED:
        return f"the case is no longer open (the execution is {status})"
    if token != payload["fencingToken"]:
        return "the case was written to since it was proposed (its fencing token moved)"
    if checkpoint is None or not is_uncertain(checkpoint):
        return f"action {payload['actionId']} is no longer uncertain"
    if checkpoint.attempt != payload["attempt"]:
        return f"action {payload['actionId']} is at another attempt"
    now = lookup_status(latest_lookup(checkpoint=checkpoint))
    if now != payload["lookupStatus"]:
        return (
            f"the provider's answer changed since it was proposed ({payload['lookupStatus']} "
            f"then, {now} now)"
        )
    return None


def _proposal(execution_id: uuid.UUID | str, *, token: int, status: str) -> Proposal | None:
    """The latest proposal still awaiting a decision, judged against the case as given."""
    event = _latest_decision(execution_id)
    if event is None or event.type != AuditType.RECONCILIATION_PROPOSED:
        return None
    checkpoint = ActionExecution.objects.filter(
        execution_id=execution_id, action_id=event.payload["actionId"]
    ).first()
    stale = _staleness(event.payload, token=token, status=status, checkpoint=checkpoint)
    return Proposal.of(event, stale=stale)


def pending_proposal(*, execution_id: uuid.UUID | str) -> Proposal | None:
    """The case's proposal still awaiting a decision (maybe stale), or None. Read-only, no lock."""
    execution = Execution.objects.filter(pk=execution_id).only("fencing_token", "status").first()
    if execution is None:
        return None
    return _proposal(execution.pk, token=execution.fencing_token, status=execution.status)


def _locked_proposal(case: LockedExecution) -> Proposal | None:
    """The pending proposal, read under the case's locks."""
    return _proposal(case.execution_id, token=case.token, status=case.status)


def _checked(operator: Operator, reason: str, *, rule_on: bool = True) -> tuple[str, str]:
    """The checks every decision starts with: the permission, the rule on (unless a rejection),
    a written reason. Returns the cleaned reason and the operator's username."""
    require(operator, permissions.RESOLVE_WRITE_NOT_HAPPENED)
    if rule_on and not two_person_rule():
        raise ResolutionRefused(
            errors.NO_APPROVAL_NEEDED,
            "The two-person rule is off (RECONCILIATION_TWO_PERSON): resolve the case directly.",
        )
    return clean_reason(reason, refused=ResolutionRefused), operator.get_username()


def replay_propose(
    *, execution_id: uuid.UUID | str, action_id: str, reason: str, operator: Operator
) -> Proposal:
    """Propose that the uncertain write did not happen and be replayed once; apply nothing.

    Refused while another proposal holds (PROPOSAL_PENDING): it is approved or rejected first.
    """
    reason, username = _checked(operator, reason)
    with open_case(execution_id) as case:
        checkpoint = uncertain_checkpoint(case.execution_id, action_id)
        if not needs_two_people(checkpoint):
            raise ResolutionRefused(
                errors.NO_APPROVAL_NEEDED,
                f"Action {action_id!r} is not a non-idempotent write: resolve it directly.",
            )
        pending = _locked_proposal(case)
        if pending is not None and pending.stale is None:
            raise ResolutionRefused(
                errors.PROPOSAL_PENDING,
                f"{pending.proposer} already proposed a replay of {pending.action_id}; approve or "
                "reject that proposal first.",
            )
        lookup = latest_lookup(checkpoint=checkpoint)
        event_id = case.record(
            type=AuditType.RECONCILIATION_PROPOSED,
            actor=username,
            payload={
                "resolution": Resolution.WRITE_NOT_HAPPENED.value,
                "actionId": action_id,
                "reason": reason,
                "proposer": username,
                **identity_payload(operator, "proposerIdentity"),
                "fencingToken": case.token,
                "attempt": checkpoint.attempt,
                "lookupStatus": lookup_status(lookup),
                "evidence": {"checkpoint": checkpoint_evidence(checkpoint), "lookup": lookup},
            },
        )
    return Proposal.of(AuditEvent.objects.get(pk=event_id), stale=None)


def _the_proposal(case: LockedExecution, proposal_id: int) -> Proposal:
    proposal = _locked_proposal(case)
    if proposal is None or proposal.event_id != proposal_id:
        raise ResolutionRefused(
            errors.PROPOSAL_STALE,
            "That proposal is no longer pending (it was rejected, withdrawn or replaced); "
            "nothing was written.",
        )
    return proposal


def replay_approve(
    *,
    execution_id: uuid.UUID | str,
    proposal_id: int,
    reason: str,
    operator: Operator,
    confirm_risk: bool = False,
) -> Resolved:
    """Approve another operator's proposal: the replay is applied, with both names audited.

    Like any replay (services.replay), refused without the provider's "not found" about the
    attempt it repeats unless the approver confirms the risk."""
    reason, username = _checked(operator, reason)
    with open_case(execution_id) as case:
        proposal = _the_proposal(case, proposal_id)
        if is_proposer(proposal, operator):
            raise ResolutionRefused(
                errors.SELF_APPROVAL,
                "You proposed this replay: a second operator must approve it.",
            )
        if proposal.stale:
            raise ResolutionRefused(
                errors.PROPOSAL_STALE,
                f"The proposal no longer holds: {proposal.stale}. Nothing was written; propose "
                "again if the replay is still right.",
            )
        checkpoint = uncertain_checkpoint(case.execution_id, proposal.action_id)
        return replay(
            case,
            checkpoint,
            reason=reason,
            operator=operator,
            confirm_risk=confirm_risk,
            approval={
                "proposalId": proposal.event_id,
                "proposedBy": proposal.proposer,
                "proposedAt": proposal.at.isoformat(),
                "proposalReason": proposal.reason,
                "approvedBy": username,
                **_named("proposedByIdentity", proposal.proposer_identity),
                **identity_payload(operator, "approvedByIdentity"),
            },
        )


def replay_reject(
    *, execution_id: uuid.UUID | str, proposal_id: int, reason: str, operator: Operator
) -> AuditEvent:
    """Reject a proposal (or withdraw one's own) with a reason; the case stays open."""
    reason, username = _checked(operator, reason, rule_on=False)
    with open_case(execution_id) as case:
        proposal = _the_proposal(case, proposal_id)
        event_id = case.record(
            type=AuditType.RECONCILIATION_REJECTED,
            actor=username,
            payload={
                "proposalId": proposal.event_id,
                "actionId": proposal.action_id,
                "proposedBy": proposal.proposer,
                "reason": reason,
                "operator": username,
                **identity_payload(operator),
                "withdrawn": is_proposer(proposal, operator),
            },
        )
    return AuditEvent.objects.get(pk=event_id)
