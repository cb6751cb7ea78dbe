"""Durable cancellation of an execution, which never depends on reaching a worker
(docs/worker-protocol.md#cancellation).

`execution_cancel` is one `operator_write` (operatorwrites.py): the token read under the locks is
bumped, so the holder is fenced out. With no write outstanding the execution ends CANCELLED and
its request is released unchanged; with one SUCCEEDED, RUNNING or UNKNOWN it goes to
RECONCILIATION_REQUIRED, the request blocked, unless all SUCCEEDED and its transition compensates
them: then it is requeued PENDING to compensate. EXECUTION_CANCELLED records actor and reason; a
RUNNING execution's worker hears sql.CANCEL_CHANNEL on commit and its runtime stops the holder.
"""

import uuid
from dataclasses import dataclass

from orquestador import errors
from orquestador.errors import CodedError

from .. import sql
from ..models import AuditType, ExecutionStatus
from .compensation import cancel_compensates
from .operatorwrites import MAX_REASON_CHARS, clean_reason, operator_write

__all__ = [
    "CANCELLABLE_STATUSES",
    "MAX_REASON_CHARS",  # the rule is clean_reason's (operatorwrites.py); re-exported for forms
    "CancelResult",
    "execution_cancel",
]

CANCELLABLE_STATUSES = (
    ExecutionStatus.PENDING,
    ExecutionStatus.RETRY_WAIT,
    ExecutionStatus.RUNNING,
    ExecutionStatus.SUSPENDED,
)


@dataclass(frozen=True)
class CancelResult:
    execution_id: str
    status: str  # CANCELLED, RECONCILIATION_REQUIRED, or PENDING (requeued to compensate)
    fencing_token: int


def _refuse(status: str | None) -> CodedError:
    if status is None:
        return CodedError(errors.NOT_FOUND, "no such execution")
    if status == ExecutionStatus.RECONCILIATION_REQUIRED:
        return CodedError(
            errors.NOT_CANCELLABLE,
            "the execution is in RECONCILIATION_REQUIRED: an operator settles it in the "
            "reconciliation admin",
        )
    return CodedError(errors.NOT_CANCELLABLE, f"the execution is already {status}")


def execution_cancel(
    *,
    execution_id: str | uuid.UUID,
    actor: str,
    reason: str,
    principal: str | None = None,
) -> CancelResult:
    """Cancel an execution durably; refuse (CodedError) one that already ended.

    `actor` is who asked (an API caller's subject, an operator, `command:<user>`); `principal`,
    `sub@tenant` of an API caller, goes into the audit payload as every principal-caused row
    names it (operators are not principals of the request's tenant).

    NOT_FOUND for an unknown execution; NOT_CANCELLABLE when it is no longer PENDING,
    RETRY_WAIT, RUNNING or SUSPENDED; REASON_REQUIRED for a blank or overlong reason.
    """
    reason = clean_reason(reason)
    with operator_write(execution_id, expect=CANCELLABLE_STATUSES, refuse=_refuse) as case:
        case.cursor.execute(sql.WRITES_OUTSTANDING, {"execution_id": case.execution_id})
        uncertain, succeeded, last_write = case.cursor.fetchone()
        guard = {"execution_id": case.execution_id, "status": case.status, "token": case.token}
        detail = f"cancelled by {actor}: {reason}"
        if succeeded and not uncertain and cancel_compensates(execution_id=case.execution_id):
            # Its transition undoes its writes: a worker claims it and compensates.
            statement = sql.EXECUTION_CANCEL_TO_COMPENSATION
            code = errors.CANCELLED_AFTER_WRITE
            params = {**guard, "error_code": code, "error_detail": detail}
            new_status = ExecutionStatus.PENDING
        elif uncertain or succeeded:
            code = errors.UNCERTAIN_WRITE if uncertain else errors.CANCELLED_AFTER_WRITE
            statement = sql.EXECUTION_CANCEL_TO_RECONCILIATION
            params = {**guard, "error_code": code, "error_detail": detail}
            new_status = ExecutionStatus.RECONCILIATION_REQUIRED
        else:
            statement, params = sql.EXECUTION_CANCEL, {**guard, "error_detail": detail}
            new_status = ExecutionStatus.CANCELLED
        (new_token,) = case.fenced(statement, params)
        if case.status == ExecutionStatus.RUNNING:
            # The holder is fenced out now; this tells its worker to stop it now (best effort:
            # a worker that misses it sees its lease lost at the next renewal).
            case.cursor.execute(
                sql.NOTIFY_CANCEL, {"execution_id": str(case.execution_id), "token": new_token}
            )
        if new_status == ExecutionStatus.CANCELLED:
            case.release_request()
        elif new_status == ExecutionStatus.PENDING:
            case.cursor.execute(sql.NOTIFY_WORK, {"execution_id": str(case.execution_id)})
        case.record(
            type=AuditType.EXECUTION_CANCELLED,
            actor=actor,
            payload={
                "reason": reason,
                "previousStatus": case.status,
                "status": new_status,
                **({"principal": principal} if principal else {}),
            },
        )
        if new_status == ExecutionStatus.RECONCILIATION_REQUIRED:
            case.record(
                type=AuditType.RECONCILIATION_REQUIRED,
                actor=actor,
                payload={
                    "actionId": last_write,
                    "errorCode": code,
                    **({"principal": principal} if principal else {}),
                },
            )
    return CancelResult(str(case.execution_id), new_status, new_token)
