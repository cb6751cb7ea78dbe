"""The API's writes: create a request, accept a transition on one (docs/api.md).

Invariants and transaction boundaries:
- each service owns its one transaction (ATOMIC_REQUESTS stays off): the request row and its
  REQUEST_CREATED event commit together or not at all;
- `transition_accept` lives in executions/api/acceptance.py: the request read with the caller's
  owner and tenant in the WHERE clause, then one statement that writes the acceptance (the request's
  counters and block, the execution, TRANSITION_ACCEPTED, the NOTIFY) only if the request is still
  as it was read, so concurrent acceptances on one request still have exactly one winner.
"""

from typing import Any

from django.db import connection, transaction

from executions.flows.publication import validate_data
from orquestador.auth import Principal

from ..models import AuditType, Request
from ..queue.audit import audit_append
from . import selectors
from .acceptance import transition_accept

__all__ = ["request_create", "transition_accept"]


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
