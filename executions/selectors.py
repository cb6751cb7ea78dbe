"""Reads for the API: one request, one execution, the published flows.

Requests and executions are read through `executions.access`, so the caller's owner and tenant
are in the query; anything outside them raises NOT_FOUND exactly like a missing row.
"""

from django.db.models import QuerySet

from executions.flows.publication import flow_latest
from orquestador import errors
from orquestador.auth import Principal
from orquestador.errors import CodedError

from . import access
from .models import Execution, Flow, Request


def request_get(*, principal: Principal, request_id: str) -> Request:
    """The request `request_id` as `principal` may read it, with its flow; NOT_FOUND otherwise."""
    return access.visible_one(
        access.requests_readable(principal).select_related("flow"), request_id, what="request"
    )


def execution_get(*, principal: Principal, execution_id: str) -> Execution:
    """The execution `execution_id` as `principal` may read it; NOT_FOUND otherwise."""
    return access.visible_one(access.executions_readable(principal), execution_id, what="execution")


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
