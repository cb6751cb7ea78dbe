"""Reads for the API: one request, one execution, an execution's steps, the lists of requests
and executions, the published flows.

Requests and executions are read through `executions.access`, so the caller's owner and tenant
are in the query: anything outside them is NOT_FOUND like a missing row. The reads served most
are fixed statements (executions/sql/reads.py) answering named rows (executions/sql/rows.py).
Lists are newest first, (created_at, id) descending, paged by keyset along the models'
`*_list_idx`, never by OFFSET (docs/adr/0015-lists-by-keyset-on-their-own-indexes.md).
"""

import datetime
import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from django.db.models import QuerySet

from executions.flows.publication import flow_latest
from orquestador import errors
from orquestador.auth import Principal
from orquestador.errors import CodedError
from orquestador.postgresql import read_rows

from .. import access, sql
from ..flows.cache import flow_names
from ..models import ActionExecution, Execution, Flow
from ..sql.rows import ExecutionRow, RequestRow, instant
from .cursors import Position

Row = TypeVar("Row", RequestRow, ExecutionRow)  # what a list holds


@dataclass(frozen=True)
class Page(Generic[Row]):
    rows: list[Row]
    last: Position | None  # the position of the last row, when more rows follow it


def _request_rows(found: list[tuple]) -> list[RequestRow]:
    """A request statement's rows, each flow id replaced by the flow's key and version (made
    without RequestRow's Python frame, which cost as much again). Unpacked by position on this
    hot path, into locals named as the statement names its columns (test_rows.py holds them)."""
    names = flow_names({row[1] for row in found})  # each row's flow_id
    rows = []
    for id_, flow_id, state, revision, data, blocked, created_at, updated_at in found:
        key, version = names[flow_id]
        row = (id_, key, version, state, revision, data, blocked, created_at, updated_at)
        rows.append(tuple.__new__(RequestRow, row))
    return rows


# ExecutionRow._make without its Python frame (the statements give exactly its columns): on a
# page, 50 calls of it had cost a third of what sending the statement and reading it did.
_execution_row = functools.partial(tuple.__new__, ExecutionRow)


def _execution_rows(found: list[tuple]) -> list[ExecutionRow]:
    return list(map(_execution_row, found))


def request_get(*, principal: Principal, request_id: str) -> RequestRow:
    """The request `request_id` as `principal` may read it, with its flow's key and version;
    NOT_FOUND otherwise. One fixed statement (executions/sql/reads.py)."""
    parsed = access.parse_id(request_id)
    rows = []
    if parsed is not None:
        statement = sql.REQUEST_VIEW.format(
            access=access.request_filter_sql(principal, alias="r", keyed=True)
        )
        params = {"request_id": parsed, **access.request_filter_params(principal)}
        # Prepared: a read by id is planned on its keys whatever the values.
        rows = read_rows(statement, params, prepare=True)
    if not rows:
        raise CodedError(errors.NOT_FOUND, "no such request")
    return _request_rows(rows)[0]


def execution_get(*, principal: Principal, execution_id: str) -> ExecutionRow:
    """The execution `execution_id` as `principal` may read it, with its view's columns only;
    NOT_FOUND otherwise. One fixed statement (executions/sql/reads.py)."""
    parsed = access.parse_id(execution_id)
    rows = []
    if parsed is not None:
        statement = sql.EXECUTION_VIEW.format(
            access=access.request_filter_sql(principal, alias="r", keyed=True)
        )
        params = {"execution_id": parsed, **access.request_filter_params(principal)}
        rows = read_rows(statement, params, prepare=True)
    if not rows:
        raise CodedError(errors.NOT_FOUND, "no such execution")
    return _execution_row(rows[0])


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


@functools.cache
def _page_statement(template: str, access_sql: str, conditions: tuple[str, ...]) -> str:
    """A list's statement for one access mode and set of filters, after its planner setting
    (sql.PAGE_PLANNING): composed once per process from the static text in
    executions/sql/reads.py, never from values."""
    return sql.PAGE_PLANNING + template.format(conditions=" AND ".join((access_sql, *conditions)))


def _page(
    template: str,
    conditions: dict[str, str],
    names: list[str],
    params: dict[str, Any],
    *,
    principal: Principal,
    alias: str,
    position: Position | None,
    limit: int,
    build: Callable[[list[tuple]], list[Row]],
) -> Page[Row]:
    """The `limit` rows before `position` (all when None), newest first, of the list `template`
    filtered by `conditions[name]` for each of `names`."""
    if position is not None:
        names.append("position")
        params["position_at"], params["position_id"] = position.created_at, position.id
    statement = _page_statement(
        template,
        access.request_filter_sql(principal, alias=alias),
        tuple(conditions[name] for name in names),
    )
    params.update(access.request_filter_params(principal), limit=limit + 1)
    # Not prepared: planned with its values (a generic plan knows neither its LIMIT nor its ranges).
    found = read_rows(statement, params)
    rows = build(found[:limit])
    if len(found) <= limit:
        return Page(rows=rows, last=None)
    last = rows[-1]
    return Page(rows=rows, last=Position(created_at=instant(last.created_at), id=last.id))


def _when(value: Any) -> datetime.datetime:
    return datetime.datetime.fromisoformat(value)


_TIMES = ("createdAfter", "createdBefore", "updatedAfter", "finishedAfter")


def _filtered(filters: dict[str, Any], names: tuple[str, ...]) -> tuple[list[str], dict]:
    """The conditions named by `filters` among `names`, and their parameters by the same names."""
    present = [name for name in names if name in filters]
    params = {name: _when(filters[name]) if name in _TIMES else filters[name] for name in present}
    return present, params


def request_list(
    *, principal: Principal, filters: dict[str, Any], limit: int, position: Position | None
) -> Page[RequestRow]:
    """A page of the requests `principal` may read, matching `filters` (the query's names:
    flowKey, state, blocked, createdAfter, createdBefore, updatedAfter), with their flows.

    flowKey is resolved to its versions' ids first (one statement on the small flow table), so
    the page's own statement walks request_flow_list_idx by equality. With updatedAfter, the
    page's ids are picked first (`sql.REQUEST_PAGE_BY_TIME`, see there why)."""
    names, params = _filtered(filters, ("state", "createdAfter", "createdBefore", "updatedAfter"))
    if "blocked" in filters:
        names.append("blocked=true" if filters["blocked"] else "blocked=false")
    if "flowKey" in filters:
        flow_ids = [
            flow_id
            for (flow_id,) in read_rows(sql.FLOW_VERSION_IDS, {"flow_key": filters["flowKey"]})
        ]
        if not flow_ids:
            return Page(rows=[], last=None)
        if len(flow_ids) == 1:
            names.append("flowKey=one")
            params["flow_id"] = flow_ids[0]
        else:
            names.append("flowKey=any")
            params["flow_ids"] = flow_ids
    return _page(
        sql.REQUEST_PAGE_BY_TIME if "updatedAfter" in names else sql.REQUEST_PAGE,
        sql.REQUEST_PAGE_FILTERS,
        names,
        params,
        principal=principal,
        alias="r",
        position=position,
        limit=limit,
        build=_request_rows,
    )


def execution_list(
    *, principal: Principal, filters: dict[str, Any], limit: int, position: Position | None
) -> Page[ExecutionRow]:
    """A page of the executions `principal` may read, matching `filters` (the query's names:
    status, requestId, transitionId, errorCode, createdAfter, createdBefore, finishedAfter), by
    the access copies each execution carries (`access.executions_listable`); with
    finishedAfter, its ids picked first as a request list's with updatedAfter."""
    names, params = _filtered(
        filters,
        (
            "status",
            "requestId",
            "transitionId",
            "errorCode",
            "createdAfter",
            "createdBefore",
            "finishedAfter",
        ),
    )
    return _page(
        sql.EXECUTION_PAGE_BY_TIME if "finishedAfter" in names else sql.EXECUTION_PAGE,
        sql.EXECUTION_PAGE_FILTERS,
        names,
        params,
        principal=principal,
        alias="e",
        position=position,
        limit=limit,
        build=_execution_rows,
    )
