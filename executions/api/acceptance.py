"""Accepting a transition on a request (docs/api.md): two statements, no explicit transaction
(why: docs/adr/0021-an-entrance-as-fast-as-the-engine.md).

Invariants: the read (ACCEPT_READ) has the caller's owner and tenant in its WHERE clause, and
every check is made on what it found, in the documented order; the write (ACCEPT_WRITE) is one
statement, so the request's revision, version and block, the PENDING execution,
TRANSITION_ACCEPTED and the NOTIFY (delivered at commit) commit together, and only if the request
still has the state and revision checked and nothing blocks it; of concurrent acceptances one
wins, the others read again; the unique (request, idempotency_key) is the backstop.
"""

import contextlib
import uuid
from typing import Any
from uuid import UUID

from django.db import IntegrityError, connection, transaction
from psycopg.types.json import Jsonb

from executions.flows.canonical import sha256_hex
from executions.flows.publication import find_transition
from orquestador import errors, tracing
from orquestador.auth import Principal
from orquestador.errors import CodedError
from orquestador.postgresql import read_rows, write_rows

from .. import access, sql
from ..flows.cache import flow_definition
from ..sql.rows import AcceptReadRow, ExecutionRow
from .selectors import execution_get

IDEMPOTENCY_CONSTRAINT = "execution_idempotency_uniq"
# Reads and writes one acceptance may take: a write that matched nothing means the request changed
# since its read, and the next read refuses for what changed (a revision never comes back), so a
# third round is never needed; the bound only keeps a broken invariant from looping.
MAX_ROUNDS = 3


@tracing.traced("transition accept")
def transition_accept(
    *,
    principal: Principal,
    request_id: str | UUID,
    transition_id: str,
    expected_revision: int,
    idempotency_key: str | None = None,
) -> tuple[ExecutionRow, bool]:
    """Accept `transition_id` on the caller's request; return (execution, created), the execution
    as its view shows it (executions/sql/rows.py).

    `created` is False when `idempotency_key` names an earlier acceptance of the same body on this
    request: that execution is returned as it is now. Refusals, as CodedError: NOT_FOUND,
    IDEMPOTENCY_KEY_REUSED, UNKNOWN_TRANSITION, TRANSITION_NOT_ALLOWED, REQUEST_BLOCKED,
    REVISION_CONFLICT.
    """
    parsed = access.parse_id(request_id)
    if parsed is None:
        raise CodedError(errors.NOT_FOUND, "no such request")
    fingerprint = None
    if idempotency_key is not None:
        fingerprint = sha256_hex(
            {"transitionId": transition_id, "expectedRevision": expected_revision}
        )
    for _ in range(MAX_ROUNDS):
        found = _read(principal, parsed, idempotency_key)
        if found is None:
            raise CodedError(errors.NOT_FOUND, "no such request")
        if found.earlier_id is not None:
            if found.earlier_fingerprint != fingerprint:
                raise CodedError(
                    errors.IDEMPOTENCY_KEY_REUSED,
                    "this Idempotency-Key was already used on this request with a different "
                    "body; use a new key for a new acceptance",
                )
            return execution_get(principal=principal, execution_id=str(found.earlier_id)), False
        definition = flow_definition(flow_id=found.flow_id, checksum=found.flow_checksum)
        transition = find_transition(definition, transition_id)
        if transition is None:
            raise CodedError(
                errors.UNKNOWN_TRANSITION,
                f"transition {transition_id!r} is not defined by flow "
                f"{found.flow_key} version {found.flow_version}",
            )
        if found.state not in transition["from"]:
            raise CodedError(
                errors.TRANSITION_NOT_ALLOWED,
                f"transition {transition_id!r} is not allowed from state {found.state!r}",
            )
        if found.blocked_by_id is not None:
            raise CodedError(
                errors.REQUEST_BLOCKED,
                f"the request is held by execution {found.blocked_by_id} until it finishes",
            )
        if expected_revision != found.revision:
            raise CodedError(
                errors.REVISION_CONFLICT,
                f"expectedRevision is {expected_revision} but the request is at revision "
                f"{found.revision}",
            )
        try:
            written = _write(
                principal,
                request_id=parsed,
                state=found.state,
                transition_id=transition_id,
                expected_revision=expected_revision,
                idempotency_key=idempotency_key,
                fingerprint=fingerprint,
            )
        except IntegrityError as exc:
            if idempotency_key is None or _constraint(exc) != IDEMPOTENCY_CONSTRAINT:
                raise
            continue  # another acceptance with this key committed first: the next read finds it
        if written is not None:
            return written, True
    raise CodedError(
        errors.REVISION_CONFLICT, "the request kept changing while the transition was accepted"
    )


def _read(
    principal: Principal, request_id: UUID, idempotency_key: str | None
) -> AcceptReadRow | None:
    """The caller's request as the acceptance decides on it; None when there is none."""
    rows = read_rows(
        sql.ACCEPT_READ,
        {
            "request_id": request_id,
            "scope": principal.tenant,
            "owner": principal.subject,
            "idempotency_key": idempotency_key,
        },
        prepare=True,
    )
    return AcceptReadRow._make(rows[0]) if rows else None


def _write(
    principal: Principal,
    *,
    request_id: UUID,
    state: str,
    transition_id: str,
    expected_revision: int,
    idempotency_key: str | None,
    fingerprint: str | None,
) -> ExecutionRow | None:
    """The acceptance written, as the execution it created; None when the request changed."""
    execution_id = uuid.uuid4()
    actor = principal.snapshot()
    payload = {
        "transitionId": transition_id,
        "fromState": state,
        "acceptedRevision": expected_revision + 1,
        "principal": principal.qualified,
    }
    # Alone, the statement is its own transaction. Inside a caller's transaction it runs in a
    # savepoint, so a key's unique violation leaves that transaction usable for the next read.
    nested = transaction.atomic() if connection.in_atomic_block else contextlib.nullcontext()
    # Continued by every run of the execution (docs/operations.md#traces).
    trace_context = tracing.carrier()
    params: dict[str, Any] = {
        "execution_id": execution_id,
        "request_id": request_id,
        "scope": principal.tenant,
        "owner": principal.subject,
        "state": state,
        "expected_revision": expected_revision,
        "transition_id": transition_id,
        "actor": Jsonb(actor),
        "idempotency_key": idempotency_key,
        "fingerprint": fingerprint,
        "subject": principal.subject,
        "payload": Jsonb(payload),
        "trace_context": None if trace_context is None else Jsonb(trace_context),
    }
    with nested:
        rows = write_rows(sql.ACCEPT_WRITE, params, prepare=True)
    return ExecutionRow._make(rows[0]) if rows else None


def _constraint(exc: IntegrityError) -> str | None:
    diag = getattr(exc.__cause__, "diag", None)
    return getattr(diag, "constraint_name", None)
