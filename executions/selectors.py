"""Reads for the API: one request, one execution, an execution's steps, the lists of requests
and executions, the published flows.

Requests and executions are read through `executions.access`, so the caller's owner and tenant
are in the query; anything outside them raises NOT_FOUND exactly like a missing row, and a list
holds only what the caller may read.

Lists are newest first, (created_at, id) descending, paged by keyset: a page is the rows before a
position, read by one index walk that starts there (the indexes are the models' `*_list_idx`),
never an OFFSET that would read every row before it.
"""

import datetime
import json
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from django.db import connection
from django.db.models import BooleanField, QuerySet
from django.db.models.expressions import RawSQL

from executions.flows.publication import flow_latest
from orquestador import errors
from orquestador.auth import Principal
from orquestador.errors import CodedError

from . import access, sql
from .cursors import Position
from .models import ActionExecution, Execution, Flow, Request

Row = TypeVar("Row", Request, Execution)  # what a list holds

# The columns a request's or an execution's view shows (executions/api/render.py), the only ones
# its reads load: not a flow's definition per request, nor an execution's snapshots.
REQUEST_VIEW_FIELDS = (
    "id",
    "flow__key",
    "flow__version",
    "state",
    "revision",
    "data",
    "blocked_by",
    "created_at",
    "updated_at",
)
EXECUTION_VIEW_FIELDS = (
    "id",
    "request",
    "transition_id",
    "status",
    "result",
    "error_code",
    "attempts",
    "created_at",
    "finished_at",
    "next_attempt_at",  # a SUSPENDED one's deadline
)


@dataclass(frozen=True)
class Page(Generic[Row]):
    rows: list[Row]
    last: Position | None  # the position of the last row, when more rows follow it


def request_get(*, principal: Principal, request_id: str) -> Request:
    """The request `request_id` as `principal` may read it, with its flow; NOT_FOUND otherwise."""
    return access.visible_one(
        access.requests_readable(principal).select_related("flow").only(*REQUEST_VIEW_FIELDS),
        request_id,
        what="request",
    )


def execution_get(*, principal: Principal, execution_id: str) -> Execution:
    """The execution `execution_id` as `principal` may read it, with its view's columns only;
    NOT_FOUND otherwise. One fixed statement (executions/sql/reads.py)."""
    parsed = access.parse_id(execution_id)
    row = None
    if parsed is not None:
        statement = sql.EXECUTION_VIEW.format(
            access=access.request_filter_sql(principal, alias="r")
        )
        with connection.cursor() as cursor:
            cursor.execute(
                statement, {"execution_id": parsed, **access.request_filter_params(principal)}
            )
            row = cursor.fetchone()
    if row is None:
        raise CodedError(errors.NOT_FOUND, "no such execution")
    values = list(row)
    result = sql.EXECUTION_VIEW_COLUMNS.index("result")
    if isinstance(values[result], str):  # Django's connections read jsonb as text
        values[result] = json.loads(values[result])
    return Execution.from_db(connection.alias, sql.EXECUTION_VIEW_COLUMNS, values)


def execution_get_writable(*, principal: Principal, execution_id: str) -> Execution:
    """The execution `execution_id` if `principal` owns its request; NOT_FOUND otherwise."""
    return access.visible_one(access.executions_writable(principal), execution_id, what="execution")


def flow_get(*, key: str, version: int | None) -> Flow:
    """The published flow `key` at `version`, or its highest version; NOT_FOUND otherwise."""
    if version is None:
        found = flow_latest(key=key)
    else:
        found = Flow.objects.filter(key=key, version=version).first()
    if found is None:
        which = f"flow {key!r}" if version is None else f"flow {key!r} version {version}"
        raise CodedError(errors.NOT_FOUND, f"{which} is not published")
    return found


def flow_list() -> QuerySet[Flow]:
    """Every published flow version, by key then version."""
    return Flow.objects.order_by("key", "version")


def execution_actions(*, principal: Principal, execution_id: str) -> list[ActionExecution]:
    """The steps of the execution `execution_id` as `principal` may read it, in the order they
    ran; NOT_FOUND otherwise. Two statements: the execution (access), then its checkpoints."""
    found = access.visible_one(
        access.executions_readable(principal).only("id"), execution_id, what="execution"
    )
    return list(
        ActionExecution.objects.filter(execution_id=found.id)
        .only(
            "action_id",
            "capability",
            "capability_version",
            "effect",
            "status",
            "attempt",
            "started_at",
            "finished_at",
            "error_code",
        )
        .order_by("sequence", "id")
    )


def _page(rows: QuerySet[Row], *, position: Position | None, limit: int) -> Page[Row]:
    """The `limit` rows of `rows` before `position` (all when None), newest first."""
    if position is not None:
        table = rows.model._meta.db_table
        # A row comparison, which PostgreSQL walks as one index range; an OR of the two
        # conditions would not be.
        before = RawSQL(  # noqa: S611 (the model's own table; the values are parameters)
            f'("{table}"."created_at", "{table}"."id") < (%s, %s)',
            (position.created_at, position.id),
            output_field=BooleanField(),
        )
        rows = rows.filter(before)
    found = list(rows.order_by("-created_at", "-id")[: limit + 1])
    if len(found) <= limit:
        return Page(rows=found, last=None)
    last = found[limit - 1]
    return Page(rows=found[:limit], last=Position(created_at=last.created_at, id=last.pk))


def _when(value: Any) -> datetime.datetime:
    return datetime.datetime.fromisoformat(value)


def request_list(
    *, principal: Principal, filters: dict[str, Any], limit: int, position: Position | None
) -> Page[Request]:
    """A page of the requests `principal` may read, matching `filters` (the query's names:
    flowKey, state, blocked, createdAfter, createdBefore, updatedAfter), with their flows.

    flowKey is resolved to its versions' ids first (one statement on the small flow table), so
    the page's own statement walks request_flow_list_idx by equality."""
    rows = access.requests_readable(principal).select_related("flow").only(*REQUEST_VIEW_FIELDS)
    if "flowKey" in filters:
        flow_ids = list(Flow.objects.filter(key=filters["flowKey"]).values_list("id", flat=True))
        if not flow_ids:
            return Page(rows=[], last=None)
        rows = rows.filter(flow_id__in=flow_ids)
    if "state" in filters:
        rows = rows.filter(state=filters["state"])
    if "blocked" in filters:
        rows = rows.filter(blocked_by__isnull=not filters["blocked"])
    if "createdAfter" in filters:
        rows = rows.filter(created_at__gt=_when(filters["createdAfter"]))
    if "createdBefore" in filters:
        rows = rows.filter(created_at__lt=_when(filters["createdBefore"]))
    if "updatedAfter" in filters:
        rows = rows.filter(updated_at__gt=_when(filters["updatedAfter"]))
    return _page(rows, position=position, limit=limit)


def execution_list(
    *, principal: Principal, filters: dict[str, Any], limit: int, position: Position | None
) -> Page[Execution]:
    """A page of the executions `principal` may read, matching `filters` (the query's names:
    status, requestId, transitionId, errorCode, createdAfter, createdBefore, finishedAfter)."""
    rows = access.executions_listable(principal).only(*EXECUTION_VIEW_FIELDS)
    for name, column in (
        ("status", "status"),
        ("requestId", "request_id"),
        ("transitionId", "transition_id"),
        ("errorCode", "error_code"),
    ):
        if name in filters:
            rows = rows.filter(**{column: filters[name]})
    if "createdAfter" in filters:
        rows = rows.filter(created_at__gt=_when(filters["createdAfter"]))
    if "createdBefore" in filters:
        rows = rows.filter(created_at__lt=_when(filters["createdBefore"]))
    if "finishedAfter" in filters:
        rows = rows.filter(finished_at__gt=_when(filters["finishedAfter"]))
    return _page(rows, position=position, limit=limit)
