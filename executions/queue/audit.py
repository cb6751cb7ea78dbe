"""The one way an audit event is appended (docs/worker-protocol.md#data-model: the audit trail is
append-only).

Every writer — the API's services, the worker's finalisation, cancellation and the operators'
resolutions — appends through `audit_append`, inside the transaction of the change it records, so
the event commits with that change or not at all. It takes an open cursor, a psycopg one (the
worker's own connection) or Django's (services), and returns the event's id.
"""

import uuid
from collections.abc import Callable
from typing import Any, Concatenate, ParamSpec, Protocol

from psycopg.types.json import Jsonb

from .. import sql
from .steps import Query

Params = ParamSpec("Params")


class Cursor(Protocol):
    def execute(self, query: str, params: dict[str, Any]) -> Any: ...

    def fetchone(self) -> Any: ...


def audit_query(
    *,
    request_id: uuid.UUID | str,
    execution_id: uuid.UUID | str | None,
    type: str,
    actor: str,
    payload: dict[str, Any],
) -> Query:
    """The append as a step of a plan (executions/queue/steps.py), for the worker's writes."""
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


def _on_cursor(query: Callable[Params, Query]) -> Callable[Concatenate[Cursor, Params], int]:
    """`query`'s statement run on an open cursor, taking the same parameters after it; returns
    the first column of the row it answers."""

    def run(cursor: Cursor, /, *args: Params.args, **kwargs: Params.kwargs) -> int:
        step = query(*args, **kwargs)
        cursor.execute(step.statement, step.params)
        return cursor.fetchone()[0]

    return run


# Append one event in the caller's transaction, on its cursor; returns the event's id.
audit_append = _on_cursor(audit_query)
