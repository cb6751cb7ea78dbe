"""An operator's writes on a case: record provider evidence, and the three resolutions.

Invariants (SPEC §7, RECONCILIATION.md):
- every service checks the operator's permission itself, so no caller writes without one;
- a resolution is one transaction: lock the request, then the execution (one lock order
  everywhere), require RECONCILIATION_REQUIRED, write with the token read under the lock and bump
  it, so a worker still holding an earlier lease is fenced out of every later write; then append
  RECONCILIATION_RESOLVED {resolution, actionId, reason, evidence, operator}. Any failure rolls
  all of it back;
- "write happened" and "write did not happen" settle one uncertain checkpoint (RUNNING or
  UNKNOWN) and requeue the execution (PENDING, due now, announced to idle workers); "abandon" ends
  it FAILED and releases the request without touching its data, state or revision;
- a provider lookup runs outside any transaction (an adapter call never holds one) and is then
  appended as RECONCILIATION_EVIDENCE; it changes nothing else.
"""

import enum
import uuid
from dataclasses import dataclass
from typing import Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.core.exceptions import PermissionDenied
from django.db import connection, transaction
from psycopg.types.json import Jsonb

from actions.lookup import lookup_by_key
from actions.registry import IntegrationUnavailable, resolve
from executions import sql
from executions.models import (
    ActionExecution,
    AuditEvent,
    AuditType,
    CheckpointStatus,
    Execution,
    ExecutionStatus,
)
from orquestador import errors

from . import permissions
from .evidence import checkpoint_evidence, is_uncertain, lookup_evidence, output_errors
from .selectors import latest_lookup

MAX_REASON_CHARS = 2000  # characters of an operator's written reason


class Resolution(enum.StrEnum):
    WRITE_HAPPENED = "WRITE_HAPPENED"
    WRITE_NOT_HAPPENED = "WRITE_NOT_HAPPENED"
    ABANDONED = "ABANDONED"


class ResolutionRefused(Exception):
    """The resolution was not applied, and nothing was written. `code` is in orquestador.errors."""

    def __init__(self, code: str, message: str) -> None:
        self.code, self.message = code, message
        super().__init__(f"{code}: {message}")


class ResolutionFenced(ResolutionRefused):
    """The execution's status or token moved under the lock: someone else resolved it first."""


@dataclass(frozen=True)
class Resolved:
    execution_id: uuid.UUID
    resolution: Resolution
    action_id: str | None
    fencing_token: int  # the token after the resolution
    audit_event_id: int


Operator = AbstractBaseUser | AnonymousUser


def _require(operator: Operator, permission: str) -> None:
    if not operator.is_authenticated or not operator.has_perm(permission):
        raise PermissionDenied(f"{permission} is required")


def _clean_reason(reason: str) -> str:
    text = (reason or "").strip()
    if not text:
        raise ResolutionRefused(errors.REASON_REQUIRED, "A written reason is required.")
    if len(text) > MAX_REASON_CHARS:
        raise ResolutionRefused(
            errors.REASON_REQUIRED, f"The reason is longer than {MAX_REASON_CHARS} characters."
        )
    return text


def _username(operator: Operator) -> str:
    return operator.get_username()


@dataclass(frozen=True)
class _Locked:
    request_id: uuid.UUID
    token: int
    error_code: str | None


def _lock(execution_id: uuid.UUID | str) -> _Locked:
    """Lock the request, then the execution, of an open case."""
    with connection.cursor() as cursor:
        cursor.execute(sql.EXECUTION_REQUEST_OF, {"execution_id": execution_id})
        row = cursor.fetchone()
        if row is None:
            raise ResolutionRefused(errors.NOT_FOUND, f"Execution {execution_id} does not exist.")
        cursor.execute(sql.REQUEST_LOCK, {"request_id": row[0]})
        cursor.execute(sql.EXECUTION_LOCK, {"execution_id": execution_id})
        request_id, status, token = cursor.fetchone()
    if status != ExecutionStatus.RECONCILIATION_REQUIRED:
        raise ResolutionRefused(
            errors.NOT_IN_RECONCILIATION,
            f"Nothing to resolve: the execution is {status}, not RECONCILIATION_REQUIRED "
            "(already resolved, or never in reconciliation).",
        )
    error_code = Execution.objects.values_list("error_code", flat=True).get(pk=execution_id)
    return _Locked(request_id=request_id, token=token, error_code=error_code)


def _uncertain_checkpoint(execution_id: uuid.UUID | str, action_id: str) -> ActionExecution:
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


def _fenced(statement: str, params: dict[str, Any]) -> int:
    with connection.cursor() as cursor:
        cursor.execute(statement, params)
        row = cursor.fetchone()
    if row is None:
        raise ResolutionFenced(
            errors.NOT_IN_RECONCILIATION, "The execution changed under the lock; nothing written."
        )
    return row[0]


def _settle_checkpoint(
    *,
    checkpoint: ActionExecution,
    status: str,
    output: dict[str, Any] | None,
    error_code: str | None,
    error_detail: str | None,
    token: int,
) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            sql.RECONCILE_SETTLE_CHECKPOINT,
            {
                "status": status,
                "output": None if output is None else Jsonb(output),
                "error_code": error_code,
                "error_detail": error_detail,
                "token": token,
                "execution_id": checkpoint.execution_id,
                "action_id": checkpoint.action_id,
            },
        )
        if cursor.fetchone() is None:
            raise ResolutionFenced(
                errors.NO_UNCERTAIN_CHECKPOINT, "The checkpoint changed under the lock."
            )


def _requeue(execution_id: uuid.UUID | str, token: int) -> int:
    new_token = _fenced(sql.RECONCILE_REQUEUE, {"execution_id": execution_id, "token": token})
    with connection.cursor() as cursor:
        cursor.execute(sql.NOTIFY_WORK, {"execution_id": str(execution_id)})
    return new_token


def _record(
    *,
    request_id: uuid.UUID,
    execution_id: uuid.UUID | str,
    resolution: Resolution,
    action_id: str | None,
    reason: str,
    evidence: dict[str, Any],
    operator: Operator,
) -> AuditEvent:
    username = _username(operator)
    return AuditEvent.objects.create(
        request_id=request_id,
        execution_id=execution_id,
        type=AuditType.RECONCILIATION_RESOLVED,
        actor=username,
        payload={
            "resolution": resolution.value,
            "actionId": action_id,
            "reason": reason,
            "evidence": evidence,
            "operator": username,
        },
    )


def execution_resolve_write_happened(
    *,
    execution_id: uuid.UUID | str,
    action_id: str,
    output: dict[str, Any],
    reason: str,
    operator: Operator,
) -> Resolved:
    """Record that the uncertain write happened, with its output, and requeue the execution.

    The output must validate against the capability's current output schema; the worker then
    reuses the SUCCEEDED checkpoint without calling the provider again.
    """
    _require(operator, permissions.RESOLVE_WRITE_HAPPENED)
    reason = _clean_reason(reason)
    with transaction.atomic():
        locked = _lock(execution_id)
        checkpoint = _uncertain_checkpoint(execution_id, action_id)
        problems = output_errors(output, _output_schema(checkpoint))
        if problems:
            raise ResolutionRefused(
                errors.OUTPUT_INVALID,
                "The output does not match the capability's output schema: " + "; ".join(problems),
            )
        evidence = {
            "checkpoint": checkpoint_evidence(checkpoint),
            "lookup": latest_lookup(execution_id=execution_id, action_id=action_id),
            "recordedOutput": output,
        }
        _settle_checkpoint(
            checkpoint=checkpoint,
            status=CheckpointStatus.SUCCEEDED,
            output=output,
            error_code=None,
            error_detail=None,
            token=locked.token + 1,
        )
        new_token = _requeue(execution_id, locked.token)
        event = _record(
            request_id=locked.request_id,
            execution_id=execution_id,
            resolution=Resolution.WRITE_HAPPENED,
            action_id=action_id,
            reason=reason,
            evidence=evidence,
            operator=operator,
        )
    return Resolved(
        uuid.UUID(str(execution_id)), Resolution.WRITE_HAPPENED, action_id, new_token, event.pk
    )


def execution_resolve_write_not_happened(
    *, execution_id: uuid.UUID | str, action_id: str, reason: str, operator: Operator
) -> Resolved:
    """Record that the uncertain write did not happen, authorise one replay, requeue.

    The checkpoint becomes FAILED with REPLAY_AUTHORIZED; the worker replays that one action once,
    with the same external key (so a provider that deduplicates by key still can).
    """
    _require(operator, permissions.RESOLVE_WRITE_NOT_HAPPENED)
    reason = _clean_reason(reason)
    with transaction.atomic():
        locked = _lock(execution_id)
        checkpoint = _uncertain_checkpoint(execution_id, action_id)
        evidence = {
            "checkpoint": checkpoint_evidence(checkpoint),
            "lookup": latest_lookup(execution_id=execution_id, action_id=action_id),
        }
        _settle_checkpoint(
            checkpoint=checkpoint,
            status=CheckpointStatus.FAILED,
            output=None,
            error_code=errors.REPLAY_AUTHORIZED,
            error_detail=f"an operator ({_username(operator)}) established that the write did "
            "not happen and authorised one replay with the same external key",
            token=locked.token + 1,
        )
        new_token = _requeue(execution_id, locked.token)
        event = _record(
            request_id=locked.request_id,
            execution_id=execution_id,
            resolution=Resolution.WRITE_NOT_HAPPENED,
            action_id=action_id,
            reason=reason,
            evidence=evidence,
            operator=operator,
        )
    return Resolved(
        uuid.UUID(str(execution_id)), Resolution.WRITE_NOT_HAPPENED, action_id, new_token, event.pk
    )


def execution_abandon(
    *, execution_id: uuid.UUID | str, reason: str, operator: Operator
) -> Resolved:
    """End the execution FAILED (RECONCILIATION_ABANDONED) and release its request.

    The request keeps its data, state and revision; the checkpoints stay as they were, as the
    record of what was left uncertain.
    """
    _require(operator, permissions.ABANDON_EXECUTION)
    reason = _clean_reason(reason)
    with transaction.atomic():
        locked = _lock(execution_id)
        uncertain = [
            checkpoint
            for checkpoint in ActionExecution.objects.filter(execution_id=execution_id).order_by(
                "sequence", "id"
            )
            if is_uncertain(checkpoint)
        ]
        previous = locked.error_code
        new_token = _fenced(
            sql.RECONCILE_ABANDON,
            {
                "execution_id": execution_id,
                "token": locked.token,
                "error_code": errors.RECONCILIATION_ABANDONED,
                "error_detail": f"abandoned in reconciliation by {_username(operator)} "
                f"(was {previous or 'no error code'})",
            },
        )
        with connection.cursor() as cursor:
            cursor.execute(
                sql.REQUEST_RELEASE,
                {"request_id": locked.request_id, "execution_id": execution_id},
            )
        action_id = uncertain[0].action_id if len(uncertain) == 1 else None
        evidence = {
            "previousErrorCode": previous,
            "uncertain": [checkpoint_evidence(checkpoint) for checkpoint in uncertain],
            "lookups": [
                lookup
                for checkpoint in uncertain
                if (
                    lookup := latest_lookup(
                        execution_id=execution_id, action_id=checkpoint.action_id
                    )
                )
            ],
        }
        event = _record(
            request_id=locked.request_id,
            execution_id=execution_id,
            resolution=Resolution.ABANDONED,
            action_id=action_id,
            reason=reason,
            evidence=evidence,
            operator=operator,
        )
    return Resolved(
        uuid.UUID(str(execution_id)), Resolution.ABANDONED, action_id, new_token, event.pk
    )


def checkpoint_record_lookup(
    *, execution_id: uuid.UUID | str, action_id: str, operator: Operator
) -> AuditEvent:
    """Ask the provider whether an uncertain write happened; append its answer as evidence.

    Raises ResolutionRefused (INTEGRATION_UNAVAILABLE) when the route has no lookup. The call runs
    outside any transaction; only the audit append is written.
    """
    _require(operator, permissions.FETCH_PROVIDER_EVIDENCE)
    execution = Execution.objects.filter(pk=execution_id).first()
    if execution is None or execution.status != ExecutionStatus.RECONCILIATION_REQUIRED:
        raise ResolutionRefused(
            errors.NOT_IN_RECONCILIATION, "Evidence is gathered for open cases only."
        )
    checkpoint = _uncertain_checkpoint(execution_id, action_id)
    try:
        result = lookup_by_key(
            checkpoint.capability, checkpoint.capability_version, checkpoint.external_key
        )
    except IntegrationUnavailable as exc:
        raise ResolutionRefused(
            errors.INTEGRATION_UNAVAILABLE,
            f"{checkpoint.capability}@{checkpoint.capability_version} has no provider lookup "
            f"({exc.reason}); gather the evidence with the provider directly.",
        ) from exc
    # Resolvable: lookup_by_key just resolved the same capability.
    schema = resolve(checkpoint.capability, checkpoint.capability_version).contract.output_schema
    username = _username(operator)
    return AuditEvent.objects.create(
        request_id=execution.request_id,
        execution_id=execution.pk,
        type=AuditType.RECONCILIATION_EVIDENCE,
        actor=username,
        payload={**lookup_evidence(result, checkpoint, schema), "operator": username},
    )
