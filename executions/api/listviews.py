"""The API's lists: requests and executions, newest first, a page at a time, and an execution's
steps. Like every view, no business rules: parse the query, open the cursor, call one selector,
write the page with the cursor of the next one (as JSON text: pagejson.py)."""

from collections.abc import Callable, Sequence

from django.utils.timezone import get_current_timezone as current_zone
from drf_spectacular.utils import OpenApiParameter
from rest_framework.request import Request as DrfRequest
from rest_framework.response import Response

from ..models import ExecutionStatus
from ..queue.limits import throttled_each
from ..queue.waits import waiting_for_each
from . import selectors
from .base import READ, ApiView, caller, error_response, operation, path_id
from .cursors import Position, cursor_make, cursor_open
from .listquery import Param, list_query, openapi_parameters
from .pagejson import execution_items, page_body, request_items
from .render import action_view
from .serializers import (
    ExecutionActionListSerializer,
    ExecutionPageSerializer,
    RequestPageSerializer,
)

REQUEST_FILTERS = (
    Param("flowKey", "text", "Only requests on this flow (any version)."),
    Param("state", "text", "Only requests in this state."),
    Param("blocked", "boolean", "Only requests an execution holds (true) or none holds (false)."),
    Param("createdAfter", "after", "Only requests created after this time (strictly)."),
    Param("createdBefore", "before", "Only requests created before this time (strictly)."),
    Param("updatedAfter", "after", "Only requests changed after this time (strictly)."),
)
EXECUTION_FILTERS = (
    Param(
        "status", "choice", "Only executions in this status.", choices=tuple(ExecutionStatus.values)
    ),
    Param("requestId", "uuid", "Only the executions of this request."),
    Param("transitionId", "text", "Only executions of this transition."),
    Param("errorCode", "text", "Only executions that ended with this errorCode.", max_length=64),
    Param("createdAfter", "after", "Only executions accepted after this time (strictly)."),
    Param("createdBefore", "before", "Only executions accepted before this time (strictly)."),
    Param("finishedAfter", "after", "Only executions finished after this time (strictly)."),
)
INVALID_QUERY = error_response(
    "INVALID_QUERY: an unknown parameter, one given twice or empty, or a value outside its type "
    "or enumeration (the detail names it); INVALID_CURSOR: a cursor this list did not give "
    "with these filters to this caller."
)


def _page(
    request: DrfRequest,
    *,
    list_name: str,
    params: Sequence[Param],
    select: Callable[..., selectors.Page],
    render: Callable[[list], list[str]],
) -> Response:
    principal = caller(request)
    query = list_query(dict(request.query_params.lists()), params)
    position: Position | None = None
    if query.cursor is not None:
        position = cursor_open(
            list_name=list_name, principal=principal, filters=query.filters, cursor=query.cursor
        )
    page = select(principal=principal, filters=query.filters, limit=query.limit, position=position)
    after: str | None = None
    if page.last is not None:
        after = cursor_make(
            list_name=list_name, principal=principal, filters=query.filters, position=page.last
        )
    return Response(page_body(render(page.rows), after))


def _list_operation(
    operation_id: str, summary: str, description: str, params: Sequence[Param], page: type
) -> Callable:
    parameters: list[OpenApiParameter] = openapi_parameters(params)
    return operation(
        operation_id,
        summary,
        description + " Needs requests:read (the caller's own) or requests:read:tenant (the "
        "whole tenant's). Newest first; `next` is the cursor of the next page, null on the last.",
        parameters=parameters,
        responses={200: page, 400: INVALID_QUERY},
    )


request_list_operation = _list_operation(
    "requests_list",
    "List requests",
    "The requests the caller may read, filtered.",
    REQUEST_FILTERS,
    RequestPageSerializer,
)


def _requests(rows: list) -> list[str]:
    return request_items(rows, current_zone())  # the zone read once for the page


def request_list_answer(request: DrfRequest) -> Response:
    """GET /api/v1/requests (RequestCollectionView's GET)."""
    return _page(
        request,
        list_name="requests",
        params=REQUEST_FILTERS,
        select=selectors.request_list,
        render=_requests,
    )


def _executions(rows: list) -> list[str]:
    # Each reads only for the rows that can wait (SUSPENDED) or be throttled (PENDING, claimed
    # before, or RUNNING), and answers only those that do: a page of neither writes every row
    # from its text.
    waiting, throttled = waiting_for_each(rows), throttled_each(rows)
    return execution_items(rows, current_zone(), waiting, throttled)


class ExecutionCollectionView(ApiView):
    required_permissions = {"GET": READ}

    @_list_operation(
        "executions_list",
        "List executions",
        "The executions of the requests the caller may read, filtered.",
        EXECUTION_FILTERS,
        ExecutionPageSerializer,
    )
    def get(self, request: DrfRequest) -> Response:
        return _page(
            request,
            list_name="executions",
            params=EXECUTION_FILTERS,
            select=selectors.execution_list,
            render=_executions,
        )


class ExecutionActionsView(ApiView):
    required_permissions = {"GET": READ}

    @operation(
        "executions_actions_list",
        "List an execution's steps",
        "Each action the execution started, in the order it ran, with its status and attempts: "
        "what a client shows as progress (never inputs, outputs, external keys or provider "
        "answers). A compensation step's actionId is `<actionId>:compensate`, and it names the "
        "action it undoes in `compensates`. Needs requests:read or requests:read:tenant.",
        parameters=[path_id("execution_id", "execution")],
        responses={
            200: ExecutionActionListSerializer,
            404: error_response("NOT_FOUND: no such execution, or not one the caller may read."),
        },
    )
    def get(self, request: DrfRequest, execution_id: str) -> Response:
        steps = selectors.execution_actions(principal=caller(request), execution_id=execution_id)
        return Response({"results": [action_view(step) for step in steps]})
