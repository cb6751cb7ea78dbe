"""The skeleton of every operator write: cancellation and the three resolutions
(RECONCILIATION.md#the-resolutions).

Each is one transaction, `operator_write`: lock the request, then the execution (one lock order
everywhere), check the status the write expects, let the caller settle, requeue or end it and
record the audit event, all with the token read under the lock and bumped by the write, so a
worker holding an earlier lease is fenced out. Any refusal or failure rolls all of it back. The
reason rule (written, at most MAX_REASON_CHARS) is `clean_reason`, for every writer. It lives in
executions because cancellation is an execution write; reconciliation's resolutions build on it.
"""

import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from django.db import connection, transaction
from django.db.backends.utils import CursorWrapper

from orquestador import errors
from orquestador.errors import CodedError

from .. import sql
from .audit import audit_append

MAX_REASON_CHARS = 2000  # characters of an operator's written reason
# What "only spaces" means for a reason. Spelled out rather than str.strip()'s or a regular
# expression's idea of white space, which differ (U+001C is space to Python, not to JSON Schema).
REASON_SPACES = " \t\n\r\f\v"

# Builds the refusal of a write: called with None when the execution does not exist, else with
# the status it was found in when that is not a status the write expects.
Refuse = Callable[[str | None], CodedError]


def clean_reason(reason: str | None, *, refused: type[CodedError] = CodedError) -> str:
    """The reason, stripped; refuse (REASON_REQUIRED) a blank or overlong one."""
    text = (reason or "").strip(REASON_SPACES)
    if not text:
        raise refused(errors.REASON_REQUIRED, "A written reason is required.")
    if len(text) > MAX_REASON_CHARS:
        raise refused(
            errors.REASON_REQUIRED, f"The reason is longer than {MAX_REASON_CHARS} characters."
        )
    return text


@dataclass(frozen=True)
class LockedExecution:
    """An execution and its request under their row locks, inside the write's transaction."""

    cursor: CursorWrapper
    execution_id: uuid.UUID
    request_id: uuid.UUID
    status: str
    token: int  # as read under the lock; every write guards on it
    refuse: Refuse

    def fenced(self, statement: str, params: dict[str, Any]) -> tuple:
        """Run a write guarded on the status and token read under the lock; return its row.

        No row means the execution moved under the lock, which its row lock forbids: refused
        as though it had already been resolved, and the transaction rolls back.
        """
        self.cursor.execute(statement, params)
        row = self.cursor.fetchone()
        if row is None:
            raise self.refuse(self.status)
        return row

    def requeue(self) -> int:
        """Back to PENDING, due now, under a new token; wake idle workers. Returns the token."""
        (token,) = self.fenced(
            sql.RECONCILE_REQUEUE, {"execution_id": self.execution_id, "token": self.token}
        )
        self.cursor.execute(sql.NOTIFY_WORK, {"execution_id": str(self.execution_id)})
        return token

    def release_request(self) -> None:
        """Unblock the request (its data, state and revision as they are)."""
        self.cursor.execute(
            sql.REQUEST_RELEASE, {"request_id": self.request_id, "execution_id": self.execution_id}
        )

    def record(self, *, type: str, actor: str, payload: dict[str, Any]) -> int:
        """Append the write's audit event; return its id."""
        return audit_append(
            self.cursor,
            request_id=self.request_id,
            execution_id=self.execution_id,
            type=type,
            actor=actor,
            payload=payload,
        )


@contextmanager
def operator_write(
    execution_id: uuid.UUID | str, *, expect: tuple[str, ...], refuse: Refuse
) -> Iterator[LockedExecution]:
    """One transaction over an execution locked after its request, in one of `expect` statuses."""
    try:
        execution_id = uuid.UUID(str(execution_id))
    except ValueError:
        raise refuse(None) from None
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(sql.EXECUTION_REQUEST_OF, {"execution_id": execution_id})
        row = cursor.fetchone()
        if row is None:
            raise refuse(None)
        cursor.execute(sql.REQUEST_LOCK, {"request_id": row[0]})
        cursor.execute(sql.EXECUTION_LOCK, {"execution_id": execution_id})
        request_id, status, token = cursor.fetchone()
        if status not in expect:
            raise refuse(status)
        yield LockedExecution(cursor, execution_id, request_id, status, token, refuse)
