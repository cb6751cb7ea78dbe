"""An operator's writes on a case: record provider evidence, and the three resolutions
(RECONCILIATION.md#the-resolutions).

Invariants: every service checks the operator's permission itself; a resolution is one
`operator_write` (request, then execution locked; still RECONCILIATION_REQUIRED; the token bumped)
appending RECONCILIATION_RESOLVED, all rolled back on any failure; the evidence is the latest
lookup about the checkpoint's current attempt, and a choice it does not support (explain.risk) is
refused unless the operator confirmed the risk; a lookup runs outside any transaction.
"""

import enum
import uuid
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol

from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.db import connection, transaction
from psycopg.types.json import Jsonb

from actions.blocking import run_blocking
from actions.lookup import lookup_by_key
from actions.registry import IntegrationUnavailable, resolve
from executions import sql
from executions.models import (
    ActionExecution,
    AuditEvent,
    AuditType,
    CheckpointStatus,
    Effect,
    Execution,
    ExecutionStatus,
)
from executions.queue.audit import audit_append
from executions.queue.operatorwrites import (
    MAX_REASON_CHARS,
    LockedExecution,
    clean_reason,
    operator_write,
)
from executions.queue.outputs import output_errors
from orquestador import errors
from orquestador.errors import CodedError
from orquestador.models import identity_of

from . import explain, permissions
from .evidence import checkpoint_evidence, is_uncertain, lookup_evidence
from .selectors import latest_lookup

__all__ = [
    "MAX_REASON_CHARS",
    "Operator",
    "Resolution",
    "ResolutionRefused",
    "Resolved",
    "checkpoint_record_lookup",
    "execution_abandon",
    "execution_resolve_write_happened",
    "execution_resolve_write_not_happened",
]


class Resolution(enum.StrEnum):
    WRITE_HAPPENED = "WRITE_HAPPENED"
    WRITE_NOT_HAPPENED = "WRITE_NOT_HAPPENED"
    ABANDONED = "ABANDONED"
    COMPENSATE = "COMPENSATE"  # reconciliation/compensate.py


class ResolutionRefused(CodedError):
    """The resolution was not applied, and nothing was written. `code` is in orquestador.errors."""


@dataclass(frozen=True)
class Resolved:
    execution_id: uuid.UUID
    resolution: Resolution
    action_id: str | None
    fencing_token: int  # the token after the resolution
    audit_event_id: int


class Operator(Protocol):
    """Who resolves: an admin's `request.user`, or the prober's SystemOperator (probes.py)."""

    @property
    def is_authenticated(self) -> bool: ...

    def has_perm(self, perm: str, /) -> bool: ...

    def get_username(self) -> str: ...


def identity_payload(operator: Operator, key: str = "operatorIdentity") -> dict[str, Any]:
    """{key: {issuer, subject}} for an operator the identity provider signed in, else nothing: the
    audit names the person as the provider knows them (orquestador/models.py)."""
    identity = identity_of(operator)
    return {key: identity} if identity else {}


def require(operator: Operator, permission: str) -> None:
    if not operator.is_authenticated or not operator.has_perm(permission):
        raise PermissionDenied(f"{permission} is required")


def _refuse(status: str | None) -> ResolutionRefused:
    if status is None:
        return ResolutionRefused(errors.NOT_FOUND, "The execution does not exist.")
    return ResolutionRefused(
        errors.NOT_IN_RECONCILIATION,
        f"Nothing to resolve: the execution is {status}, not RECONCILIATION_REQUIRED "
        "(already resolved, or never in reconciliation).",
    )


def open_case(execution_id: uuid.UUID | str) -> AbstractContextManager[LockedExecution]:
    """The operator_write of a resolution: the case must still be RECONCILIATION_REQUIRED."""
    return operator_write(
        execution_id, expect=(ExecutionStatus.RECONCILIATION_REQUIRED,), refuse=_refuse
    )


def uncertain_checkpoint(execution_id: uuid.UUID | str, action_id: str) -> ActionExecution:
    checkpoint = ActionExecution.objects.filter(
        execution_id=execution_id, action_id=action_id
    ).first()
    if checkpoint is None or not is_uncertain(checkpoint):
        raise ResolutionRefused(
            errors.NO_UNCERTAIN_CHECKPOINT,
            f"Action {action_id!r} has no RUNNING or UNKNOWN checkpoint to settle.",
        )
    return checkpoint


def _output_schema(checkpoint: ActionExecution) -> dict[str, Any]:
    try:
        binding = resolve(checkpoint.capability, checkpoint.capability_version)
    except IntegrationUnavailable as exc:
        raise ResolutionRefused(
            errors.INTEGRATION_UNAVAILABLE,
            f"{checkpoint.capability}@{checkpoint.capability_version} is no longer configured "
            f"({exc.reason}); its output cannot be validated, so it cannot be recorded. Restore "
            "its contract, or abandon the execution.",
        ) from exc
    return binding.contract.output_schema


def _confirmed(resolution: str, lookup: dict[str, Any] | None, confirm_risk: bool) -> None:
    """Refuse a choice the evidence about this attempt does not support, unless its risk, named
    as the case page names it, was confirmed."""
    risk = explain.risk(resolution, lookup)
    if risk and not confirm_risk:
        raise ResolutionRefused(
            errors.RISK_NOT_CONFIRMED,
            f"{risk} Nothing was written: ask the provider, or confirm that you choose this all "
            "the same.",
        )


def _record(
    case: LockedExecution,
    *,
    resolution: Resolution,
    action_id: str | None,
    reason: str,
    evidence: dict[str, Any],
    operator: Operator,
    fencing_token: int,
) -> Resolved:
    """Append RECONCILIATION_RESOLVED for the resolution just written under `case`."""
    username = operator.get_username()
    event_id = case.record(
        type=AuditType.RECONCILIATION_RESOLVED,
        actor=username,
        payload={
            "resolution": resolution.value,
            "actionId": action_id,
            "reason": reason,
            "evidence": evidence,
            "operator": username,
            **identity_payload(operator),
        },
    )
    return Resolved(case.execution_id, resolution, action_id, fencing_token, event_id)


def _settle_and_requeue(
    case: LockedExecution,
    checkpoint: ActionExecution,
    *,
    resolution: Resolution,
    status: str,
    output: dict[str, Any] | None,
    error_code: str | None,
    error_detail: str | None,
    reason: str,
    evidence: dict[str, Any],
    operator: Operator,
) -> Resolved:
    """The tail both settling resolutions share: settle the checkpoint, requeue, record."""
    case.cursor.execute(
        sql.RECONCILE_SETTLE_CHECKPOINT,
        {
            "status": status,
            # psycopg adapts Jsonb; the stubs' parameter types know only plain values.
            "output": None if output is None else Jsonb(output),  # type: ignore[dict-item]
            "error_code": error_code,
            "error_detail": error_detail,
            "token": case.token + 1,  # the token the requeue is about to give the execution
            "execution_id": case.execution_id,
            "action_id": checkpoint.action_id,
        },
    )
    if case.cursor.fetchone() is None:  # the execution lock keeps checkpoints still
        raise ResolutionRefused(
            errors.NO_UNCERTAIN_CHECKPOINT, "The checkpoint changed under the lock."
        )
    return _record(
        case,
        resolution=resolution,
        action_id=checkpoint.action_id,
        reason=reason,
        evidence=evidence,
        operator=operator,
        fencing_token=case.requeue(),
    )


def execution_resolve_write_happened(
    *,
    execution_id: uuid.UUID | str,
    action_id: str,
    output: dict[str, Any],
    reason: str,
    operator: Operator,
    confirm_risk: bool = False,
) -> Resolved:
    """Record that the uncertain write happened, with its output, and requeue the execution.

    The output must validate against the capability's current output schema; the worker then
    reuses the SUCCEEDED checkpoint without calling the provider again. Against the provider's
    "not found" about this attempt it is refused unless `confirm_risk`.
    """
    require(operator, permissions.RESOLVE_WRITE_HAPPENED)
    reason = clean_reason(reason, refused=ResolutionRefused)
    with open_case(execution_id) as case:
        checkpoint = uncertain_checkpoint(case.execution_id, action_id)
        problems = output_errors(output, _output_schema(checkpoint))
        if problems:
            raise ResolutionRefused(
                errors.OUTPUT_INVALID,
                "The output does not match the capability's output schema: " + "; ".join(problems),
            )
        lookup = latest_lookup(checkpoint=checkpoint)
        _confirmed(explain.WRITE_HAPPENED, lookup, confirm_risk)
        return _settle_and_requeue(
            case,
            checkpoint,
            resolution=Resolution.WRITE_HAPPENED,
            status=CheckpointStatus.SUCCEEDED,
            output=output,
            error_code=None,
            error_detail=None,
            reason=reason,
            evidence={
                "checkpoint": checkpoint_evidence(checkpoint),
                "lookup": lookup,
                "recordedOutput": output,
            },
            operator=operator,
        )


def two_person_rule() -> bool:
    """Whether replaying a non-idempotent write needs two operators (RECONCILIATION_TWO_PERSON)."""
    return bool(getattr(settings, "RECONCILIATION_TWO_PERSON", False))


def needs_two_people(checkpoint: ActionExecution) -> bool:
    """Whether replaying this checkpoint's write waits for a proposal and an approval."""
    return two_person_rule() and checkpoint.effect == Effect.NON_IDEMPOTENT_WRITE


def replay(
    case: LockedExecution,
    checkpoint: ActionExecution,
    *,
    reason: str,
    operator: Operator,
    confirm_risk: bool,
    approval: dict[str, Any] | None = None,
) -> Resolved:
    """Settle `checkpoint` FAILED with REPLAY_AUTHORIZED under `case`, requeue, record.

    Refused (RISK_NOT_CONFIRMED) unless the provider said "not found" about this very attempt,
    or `confirm_risk`: an answer about an earlier attempt, given before this one was sent, says
    nothing about it, and replaying a write that happened repeats it. `approval` (the two-person
    rule's proposer and approver, approvals.py) joins the evidence.
    """
    lookup = latest_lookup(checkpoint=checkpoint)
    _confirmed(explain.WRITE_NOT_HAPPENED, lookup, confirm_risk)
    who = operator.get_username()
    if approval:
        who = f"{approval['proposedBy']} (proposed) and {approval['approvedBy']} (approved)"
    return _settle_and_requeue(
        case,
        checkpoint,
        resolution=Resolution.WRITE_NOT_HAPPENED,
        status=CheckpointStatus.FAILED,
        output=None,
        error_code=errors.REPLAY_AUTHORIZED,
        error_detail=f"operators ({who}) established that the write did not happen and "
        "authorised one replay with the same external key"
        if approval
        else f"an operator ({who}) established that the write did not happen and authorised "
        "one replay with the same external key",
        reason=reason,
        evidence={
            "checkpoint": checkpoint_evidence(checkpoint),
            "lookup": lookup,
            **({"approval": approval} if approval else {}),
        },
        operator=operator,
    )


def execution_resolve_write_not_happened(
    *,
    execution_id: uuid.UUID | str,
    action_id: str,
    reason: str,
    operator: Operator,
    confirm_risk: bool = False,
) -> Resolved:
    """Record that the uncertain write did not happen, authorise one replay, requeue.

    The checkpoint becomes FAILED with REPLAY_AUTHORIZED; the worker replays that one action once,
    with the same external key (so a provider that deduplicates by key still can). Without the
    provider's "not found" about the attempt it repeats, it is refused unless `confirm_risk`
    (`replay`). Under the two-person rule a non-idempotent write is refused here
    (APPROVAL_REQUIRED): it is proposed and approved through approvals.py instead.
    """
    require(operator, permissions.RESOLVE_WRITE_NOT_HAPPENED)
    reason = clean_reason(reason, refused=ResolutionRefused)
    with open_case(execution_id) as case:
        checkpoint = uncertain_checkpoint(case.execution_id, action_id)
        if needs_two_people(checkpoint):
            raise ResolutionRefused(
                errors.APPROVAL_REQUIRED,
                "The two-person rule is on: replaying a non-idempotent write is proposed by one "
                "operator and approved by another.",
            )
        return replay(case, checkpoint, reason=reason, operator=operator, confirm_risk=confirm_risk)


def execution_abandon(
    *, execution_id: uuid.UUID | str, reason: str, operator: Operator
) -> Resolved:
    """End the execution FAILED (RECONCILIATION_ABANDONED) and release its request.

    The request keeps its data, state and revision; the checkpoints stay as they were, as the
    record of what was left uncertain.
    """
    require(operator, permissions.ABANDON_EXECUTION)
    reason = clean_reason(reason, refused=ResolutionRefused)
    with open_case(execution_id) as case:
        uncertain = [
            checkpoint
            for checkpoint in ActionExecution.objects.filter(
                execution_id=case.execution_id
            ).order_by("sequence", "id")
            if is_uncertain(checkpoint)
        ]
        previous = Execution.objects.values_list("error_code", flat=True).get(pk=case.execution_id)
        (new_token,) = case.fenced(
            sql.RECONCILE_ABANDON,
            {
                "execution_id": case.execution_id,
                "token": case.token,
                "error_code": errors.RECONCILIATION_ABANDONED,
                "error_detail": f"abandoned in reconciliation by {operator.get_username()} "
                f"(was {previous or 'no error code'})",
            },
        )
        case.release_request()
        lookups = (latest_lookup(checkpoint=checkpoint) for checkpoint in uncertain)
        return _record(
            case,
            resolution=Resolution.ABANDONED,
            action_id=uncertain[0].action_id if len(uncertain) == 1 else None,
            reason=reason,
            evidence={
                "previousErrorCode": previous,
                "uncertain": [checkpoint_evidence(checkpoint) for checkpoint in uncertain],
                "lookups": [lookup for lookup in lookups if lookup],
            },
            operator=operator,
            fencing_token=new_token,
        )


def checkpoint_record_lookup(
    *, execution_id: uuid.UUID | str, action_id: str, operator: Operator
) -> AuditEvent:
    """Ask the provider whether an uncertain write happened; append its answer as evidence.

    Raises ResolutionRefused (INTEGRATION_UNAVAILABLE) when the route has no lookup. The call runs
    outside any transaction; only the audit append is written.
    """
    require(operator, permissions.FETCH_PROVIDER_EVIDENCE)
    execution = Execution.objects.filter(pk=execution_id).first()
    if execution is None or execution.status != ExecutionStatus.RECONCILIATION_REQUIRED:
        raise ResolutionRefused(
            errors.NOT_IN_RECONCILIATION, "Evidence is gathered for open cases only."
        )
    checkpoint = uncertain_checkpoint(execution_id, action_id)
    try:
        result = run_blocking(
            lookup_by_key(
                checkpoint.capability, checkpoint.capability_version, checkpoint.external_key
            )
        )
    except IntegrationUnavailable as exc:
        raise ResolutionRefused(
            errors.INTEGRATION_UNAVAILABLE,
            f"{checkpoint.capability}@{checkpoint.capability_version} has no provider lookup "
            f"({exc.reason}); gather the evidence with the provider directly.",
        ) from exc
    # Resolvable: lookup_by_key just resolved the same capability.
    schema = resolve(checkpoint.capability, checkpoint.capability_version).contract.output_schema
    username = operator.get_username()
    with transaction.atomic(), connection.cursor() as cursor:
        event_id = audit_append(
            cursor,
            request_id=execution.request_id,
            execution_id=execution.pk,
            type=AuditType.RECONCILIATION_EVIDENCE,
            actor=username,
            payload={
                **lookup_evidence(result, checkpoint, schema),
                "operator": username,
                **identity_payload(operator),
            },
        )
    return AuditEvent.objects.get(pk=event_id)
