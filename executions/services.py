"""The API's writes: create a request, accept a transition on one (docs/api.md).

Invariants and transaction boundaries:
- each service owns its one transaction (ATOMIC_REQUESTS stays off): the request row, the
  execution, the request's counters and the audit event commit together or not at all;
- `transition_accept` locks the request row first (`SELECT ... FOR UPDATE`, with the caller's
  owner and tenant in the WHERE clause) and reads state, revision and `blocked_by` only under that
  lock, so concurrent acceptances on one request are serialised: exactly one wins, the others see
  the block or the new revision;
- an Idempotency-Key is looked up under that same lock, before any other check, so a client's
  retry gets its execution back even after the request has moved on; the unique constraint on
  (request, idempotency_key) is the backstop if two retries ever insert at once;
- idle workers are notified inside the transaction: PostgreSQL delivers the NOTIFY at commit, and
  never for a rolled-back acceptance.
"""

import functools
from typing import Any
from uuid import UUID

from django.db import IntegrityError, connection, transaction
from django.db.models import F
from django.db.models.functions import Now

from executions.flows.canonical import sha256_hex
from executions.flows.publication import find_transition, validate_data
from orquestador import errors, tracing
from orquestador.auth import Principal
from orquestador.errors import CodedError

from . import access, selectors, sql
from .audit import audit_append
from .models import AuditType, Execution, Request

IDEMPOTENCY_CONSTRAINT = "execution_idempotency_uniq"


def request_create(
    *, principal: Principal, flow_key: str, flow_version: int | None, data: dict[str, Any]
) -> Request:
    """Create a request on a published flow, in its initial state, owned by the caller.

    Raises NOT_FOUND for a flow (version) that is not published, and DataError (DATA_INVALID,
    DATA_TOO_LARGE) for data the flow's dataSchema or the size limit refuses.
    """
    flow = selectors.flow_get(key=flow_key, version=flow_version)
    validate_data(flow.definition, data)
    with transaction.atomic():
        request = Request.objects.create(
            flow=flow,
            owner=principal.subject,
            scope=principal.tenant,
            data=data,
            state=flow.definition["initialState"],
        )
        with connection.cursor() as cursor:
            audit_append(
                cursor,
                request_id=request.id,
                execution_id=None,
                type=AuditType.REQUEST_CREATED,
                actor=principal.subject,
                payload={
                    "flowKey": flow.key,
                    "flowVersion": flow.version,
                    "state": request.state,
                    "principal": principal.qualified,
                },
            )
    return request


@tracing.traced("transition accept")
def transition_accept(
    *,
    principal: Principal,
    request_id: str | UUID,
    transition_id: str,
    expected_revision: int,
    idempotency_key: str | None = None,
) -> tuple[Execution, bool]:
    """Accept `transition_id` on the caller's request; return (execution, created).

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
    accept = functools.partial(
        _accept,
        principal=principal,
        request_id=parsed,
        transition_id=transition_id,
        expected_revision=expected_revision,
        idempotency_key=idempotency_key,
        fingerprint=fingerprint,
    )
    try:
        return accept()
    except IntegrityError as exc:
        if idempotency_key is None or _constraint(exc) != IDEMPOTENCY_CONSTRAINT:
            raise
    # Another acceptance with this key committed between our lookup and our insert; it is the
    # one the client meant, and the retry finds it under the lock.
    return accept()


def _accept(
    *,
    principal: Principal,
    request_id: UUID,
    transition_id: str,
    expected_revision: int,
    idempotency_key: str | None,
    fingerprint: str | None,
) -> tuple[Execution, bool]:
    with transaction.atomic():
        request = (
            access.requests_writable(principal)
            .select_related("flow")
            .select_for_update(of=("self",))
            .filter(id=request_id)
            .first()
        )
        if request is None:
            raise CodedError(errors.NOT_FOUND, "no such request")

        if idempotency_key is not None:
            earlier = (
                access.executions_writable(principal)
                .filter(request_id=request.id, idempotency_key=idempotency_key)
                .first()
            )
            if earlier is not None:
                if earlier.idempotency_fingerprint != fingerprint:
                    raise CodedError(
                        errors.IDEMPOTENCY_KEY_REUSED,
                        "this Idempotency-Key was already used on this request with a different "
                        "body; use a new key for a new acceptance",
                    )
                return earlier, False

        transition = find_transition(request.flow.definition, transition_id)
        if transition is None:
            raise CodedError(
                errors.UNKNOWN_TRANSITION,
                f"transition {transition_id!r} is not defined by flow "
                f"{request.flow.key} version {request.flow.version}",
            )
        if request.state not in transition["from"]:
            raise CodedError(
                errors.TRANSITION_NOT_ALLOWED,
                f"transition {transition_id!r} is not allowed from state {request.state!r}",
            )
        if request.blocked_by_id is not None:
            raise CodedError(
                errors.REQUEST_BLOCKED,
                f"the request is held by execution {request.blocked_by_id} until it finishes",
            )
        if expected_revision != request.revision:
            raise CodedError(
                errors.REVISION_CONFLICT,
                f"expectedRevision is {expected_revision} but the request is at revision "
                f"{request.revision}",
            )

        accepted_revision = request.revision + 1
        execution = Execution.objects.create(
            request=request,
            flow_id=request.flow_id,
            transition_id=transition_id,
            accepted_revision=accepted_revision,
            actor_snapshot=principal.snapshot(),
            dispatch_principal=principal.snapshot(),
            idempotency_key=idempotency_key,
            idempotency_fingerprint=fingerprint,
            trace_context=tracing.carrier(),  # continued by every run (docs/operations.md#traces)
        )
        updated = (
            access.requests_writable(principal)
            .filter(id=request.id, version=request.version)
            .update(
                revision=accepted_revision,
                version=F("version") + 1,
                updated_at=Now(),
                blocked_by=execution,
            )
        )
        if updated != 1:  # impossible under the row lock; refuse rather than write half of it
            raise RuntimeError(f"request {request.id} changed under its row lock")
        with connection.cursor() as cursor:
            audit_append(
                cursor,
                request_id=request.id,
                execution_id=execution.id,
                type=AuditType.TRANSITION_ACCEPTED,
                actor=principal.subject,
                payload={
                    "transitionId": transition_id,
                    "fromState": request.state,
                    "acceptedRevision": accepted_revision,
                    "principal": principal.qualified,
                },
            )
            cursor.execute(sql.NOTIFY_WORK, {"execution_id": str(execution.id)})
    return execution, True


def _constraint(exc: IntegrityError) -> str | None:
    diag = getattr(exc.__cause__, "diag", None)
    return getattr(diag, "constraint_name", None)
