"""The one way an audit event is appended (docs/worker-protocol.md#data-model: the audit trail is
append-only).

Every writer — the API's services, the worker's finalisation, cancellation and the operators'
resolutions — appends through `audit_append`, inside the transaction of the change it records, so
the event commits with that change or not at all. It takes an open cursor, a psycopg one (the
worker's own connection) or Django's (services), and returns the event's id.
"""

import uuid
from typing import Any, Protocol

from psycopg.types.json import Jsonb

from . import sql
from .steps import Query


class Cursor(Protocol):
    def execute(self, query: str, params: dict[str, Any]) -> Any: ...

    def fetchone(self) -> Any: ...


def audit_append(
    cursor: Cursor,
    *,
    request_id: uuid.UUID | str,
    execution_id: uuid.UUID | str | None,
    type: str,
    actor: str,
    payload: dict[str, Any],
) -> int:
    """Append one event in the caller's transaction; return its id."""
    query = audit_query(
        request_id=request_id, execution_id=execution_id, type=type, actor=actor, payload=payload
    )
    cursor.execute(query.statement, query.params)
    return cursor.fetchone()[0]


def audit_query(
    *,
    request_id: uuid.UUID | str,
    execution_id: uuid.UUID | str | None,
    type: str,
    actor: str,
    payload: dict[str, Any],
) -> Query:
    """The same append as a step of a plan (executions/steps.py), for the worker's writes."""
    return Query(
        sql.AUDIT_APPEND,
        {
            "request_id": request_id,
            "execution_id": execution_id,
            "type": type,
            "actor": actor,
            "payload": Jsonb(payload),
        },
        fetch="one",
    )
