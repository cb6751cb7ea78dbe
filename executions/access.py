"""Who may see and change which requests and executions, as SQL filters (docs/api.md).

Invariants:
- every query for a request or an execution on behalf of a caller starts from one of the
  querysets below, or for a raw statement from `request_filter_sql`, so the caller's tenant, and
  the owner unless the caller may read the whole tenant, are in its WHERE clause: nothing is
  fetched first and checked afterwards;
- writes always need both owner and tenant; `requests:read:tenant` widens reads only;
- a resource outside the filter is indistinguishable from a missing one (the caller gets 404).
"""

import uuid
from typing import TypeVar

from django.db.models import Model, Q, QuerySet

from orquestador import errors
from orquestador.auth import REQUESTS_READ_TENANT, Principal
from orquestador.errors import CodedError

from .models import Execution, Request

Row = TypeVar("Row", bound=Model)


def _request_filter(principal: Principal, *, prefix: str = "", whole_tenant: bool) -> Q:
    condition = Q(**{f"{prefix}scope": principal.tenant})
    if not whole_tenant:
        condition &= Q(**{f"{prefix}owner": principal.subject})
    return condition


def request_filter_sql(principal: Principal, *, alias: str, keyed: bool = False) -> str:
    """The read filter of `requests_readable` for a raw statement, on the request `alias`: its
    parameters are %(scope)s and %(owner)s (`request_filter_params`). `keyed`, for a statement
    that finds its row by its key: the same test with IS NOT DISTINCT FROM, `=` for these NOT
    NULL columns but no index condition, so that no plan made on stale statistics walks a list
    index (scope its first column, id its last) for the key (docs/adr/0021)."""
    equals = "IS NOT DISTINCT FROM" if keyed else "="
    if principal.has(REQUESTS_READ_TENANT):
        return f"{alias}.scope {equals} %(scope)s"
    return f"{alias}.scope {equals} %(scope)s AND {alias}.owner {equals} %(owner)s"


def request_filter_params(principal: Principal) -> dict[str, str]:
    return {"scope": principal.tenant, "owner": principal.subject}


def requests_readable(principal: Principal) -> QuerySet[Request]:
    """The requests `principal` may read: its own, or its tenant's with requests:read:tenant."""
    whole_tenant = principal.has(REQUESTS_READ_TENANT)
    return Request.objects.filter(_request_filter(principal, whole_tenant=whole_tenant))


def requests_writable(principal: Principal) -> QuerySet[Request]:
    """The requests `principal` may change: its own, in its tenant."""
    return Request.objects.filter(_request_filter(principal, whole_tenant=False))


def executions_readable(principal: Principal) -> QuerySet[Execution]:
    """The executions of the requests `principal` may read (a join on the request)."""
    whole_tenant = principal.has(REQUESTS_READ_TENANT)
    return Execution.objects.filter(
        _request_filter(principal, prefix="request__", whole_tenant=whole_tenant)
    )


def executions_listable(principal: Principal) -> QuerySet[Execution]:
    """The same executions as `executions_readable`, by the copies of their request's scope and
    owner that each execution carries (kept by the database, see Execution.scope): no join, so
    a list walks one index of the execution table in either access mode."""
    whole_tenant = principal.has(REQUESTS_READ_TENANT)
    return Execution.objects.filter(_request_filter(principal, whole_tenant=whole_tenant))


def executions_writable(principal: Principal) -> QuerySet[Execution]:
    """The executions of the requests `principal` may change."""
    return Execution.objects.filter(
        _request_filter(principal, prefix="request__", whole_tenant=False)
    )


def executions_resumable(principal: Principal) -> QuerySet[Execution]:
    """The executions `principal` may send events to: every one of its tenant's."""
    return Execution.objects.filter(
        _request_filter(principal, prefix="request__", whole_tenant=True)
    )


def parse_id(value: str | uuid.UUID) -> uuid.UUID | None:
    """The UUID in a path segment, or None when it is not one (which callers answer as 404)."""
    try:
        return uuid.UUID(str(value))
    except ValueError:
        return None


def visible_one(rows: QuerySet[Row], value: str, *, what: str) -> Row:
    """The row of `rows` (one of the querysets above) whose id is `value`: a malformed id, a
    missing row and one outside the caller's filter are the same NOT_FOUND ("no such <what>")."""
    parsed = parse_id(value)
    found = None if parsed is None else rows.filter(id=parsed).first()
    if found is None:
        raise CodedError(errors.NOT_FOUND, f"no such {what}")
    return found
