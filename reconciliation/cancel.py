"""Durable cancellation of an execution (SPEC §8), which never depends on reaching a worker.

Invariants and transaction boundary (`execution_cancel` owns one transaction):
- lock the request, then the execution (the lock order of finalisation), and write with the
  token read under the lock, bumping it: whoever holds the lease is fenced out of every later
  write, and its heartbeat sees the lease lost and stops that run;
- with no write outstanding, the execution ends CANCELLED and its request is released (data,
  state and revision unchanged); with a write SUCCEEDED, RUNNING or UNKNOWN it cannot simply
  stop: it becomes RECONCILIATION_REQUIRED (UNCERTAIN_WRITE, or CANCELLED_AFTER_WRITE) and the
  request stays blocked for an operator;
- EXECUTION_CANCELLED is appended either way, with the actor and the written reason.
"""

import uuid
from dataclasses import dataclass

from django.db import connection, transaction
from django.db.backends.utils import CursorWrapper
from psycopg.types.json import Jsonb

from executions import sql
from executions.models import AuditType, ExecutionStatus
from orquestador import errors
from orquestador.errors import CodedError

CANCELLABLE_STATUSES = (
    ExecutionStatus.PENDING,
    ExecutionStatus.RETRY_WAIT,
    ExecutionStatus.RUNNING,
    ExecutionStatus.SUSPENDED,
)
MAX_REASON_CHARS = 2000  # characters of a cancellation reason


@dataclass(frozen=True)
class CancelResult:
    execution_id: str
    status: str  # CANCELLED or RECONCILIATION_REQUIRED
    fencing_token: int


def _audit(
    cursor: CursorWrapper,
    *,
    request_id: uuid.UUID,
    execution_id: uuid.UUID,
    type: str,
    actor: str,
    payload: dict,
) -> None:
    cursor.execute(
        sql.AUDIT_APPEND,
        {
            "request_id": request_id,
            "execution_id": execution_id,
            "type": type,
            "actor": actor,
            "payload": Jsonb(payload),
        },
    )


def execution_cancel(*, execution_id: str | uuid.UUID, actor: str, reason: str) -> CancelResult:
    """Cancel an execution durably; refuse (CodedError) one that already ended.

    NOT_FOUND for an unknown execution; NOT_CANCELLABLE when it is no longer PENDING,
    RETRY_WAIT, RUNNING or SUSPENDED; REASON_REQUIRED for a blank or overlong reason.
    """
    reason = (reason or "").strip()
    if not reason or len(reason) > MAX_REASON_CHARS:
        raise CodedError(
            errors.REASON_REQUIRED,
            f"a cancellation needs a written reason of at most {MAX_REASON_CHARS} characters",
        )
    try:
        execution_id = uuid.UUID(str(execution_id))
    except ValueError:
        raise CodedError(errors.NOT_FOUND, "no such execution") from None
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(sql.EXECUTION_REQUEST_OF, {"execution_id": execution_id})
        row = cursor.fetchone()
        if row is None:
            raise CodedError(errors.NOT_FOUND, "no such execution")
        request_id = row[0]
        cursor.execute(sql.REQUEST_LOCK, {"request_id": request_id})
        cursor.execute(sql.EXECUTION_LOCK, {"execution_id": execution_id})
        _, status, token = cursor.fetchone()
        if status == ExecutionStatus.RECONCILIATION_REQUIRED:
            raise CodedError(
                errors.NOT_CANCELLABLE,
                "the execution is in RECONCILIATION_REQUIRED: an operator settles it in the "
                "reconciliation admin",
            )
        if status not in CANCELLABLE_STATUSES:
            raise CodedError(errors.NOT_CANCELLABLE, f"the execution is already {status}")
        cursor.execute(sql.WRITES_OUTSTANDING, {"execution_id": execution_id})
        uncertain, succeeded, last_write = cursor.fetchone()
        guard = {"execution_id": execution_id, "status": status, "token": token}
        if uncertain or succeeded:
            code = errors.UNCERTAIN_WRITE if uncertain else errors.CANCELLED_AFTER_WRITE
            cursor.execute(
                sql.EXECUTION_CANCEL_TO_RECONCILIATION,
                {**guard, "error_code": code, "error_detail": f"cancelled by {actor}: {reason}"},
            )
            new_status = ExecutionStatus.RECONCILIATION_REQUIRED
        else:
            cursor.execute(
                sql.EXECUTION_CANCEL,
                {**guard, "error_detail": f"cancelled by {actor}: {reason}"},
            )
            new_status = ExecutionStatus.CANCELLED
        written = cursor.fetchone()
        if written is None:  # impossible under the row lock; refuse rather than half-write
            raise RuntimeError(f"execution {execution_id} changed under its row lock")
        new_token = written[0]
        ids = {"request_id": request_id, "execution_id": execution_id}
        if new_status == ExecutionStatus.CANCELLED:
            cursor.execute(sql.REQUEST_RELEASE, ids)
        _audit(
            cursor,
            **ids,
            type=AuditType.EXECUTION_CANCELLED,
            actor=actor,
            payload={"reason": reason, "previousStatus": status, "status": new_status},
        )
        if new_status == ExecutionStatus.RECONCILIATION_REQUIRED:
            _audit(
                cursor,
                **ids,
                type=AuditType.RECONCILIATION_REQUIRED,
                actor=actor,
                payload={"actionId": last_write, "errorCode": code},
            )
    return CancelResult(str(execution_id), new_status, new_token)
