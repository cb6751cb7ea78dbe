"""What the busiest endpoints answer, built as plain dicts: the very JSON their serializers
describe (serializers.py stays the shape's one description, for the schema and the docs), without
a serializer's per-call field machinery, which cost more than the database on a page of 50. They
take the fixed reads' named rows (executions/sql/rows.py); an execution's model instance too. The
acceptance, the reads by id and the pages send the same JSON written as text from the rows
(pagejson.py), which these dicts are the reference of.

tests/integration/api/test_render.py holds each function to its serializer's output, field by
field and in the same order, for every status, with and without the optional fields.
"""

import datetime
import zoneinfo
from typing import Any

from django.utils import timezone

from ..flows.compensations import compensated_action
from ..models import ActionExecution, Execution
from ..sql.rows import ExecutionRow, RequestRow, json_value

UTC_ZONES = (datetime.UTC, zoneinfo.ZoneInfo("UTC"))


def moment(
    value: datetime.datetime | str | None, zone: datetime.tzinfo | None = None
) -> str | None:
    """A time as DRF's DateTimeField writes it: ISO 8601 in the current zone (or `zone`, the
    current one read once for a page), UTC as Z. `value` is aware, naive in UTC, or the API's
    text in UTC as the fixed reads give it (executions/sql/rows.py), which is already the answer in
    UTC."""
    if not value:
        return None
    zone = zone or timezone.get_current_timezone()
    if isinstance(value, str):
        if zone in UTC_ZONES:
            return value
        value = datetime.datetime.fromisoformat(value)
    elif value.tzinfo is None:
        if zone in UTC_ZONES:
            return value.isoformat() + "Z"  # what the aware one's "+00:00" becomes
        value = value.replace(tzinfo=datetime.UTC)
    text = value.astimezone(zone).isoformat()
    return text[:-6] + "Z" if text.endswith("+00:00") else text


def execution_view(
    execution: Execution | ExecutionRow,
    waiting: dict[str, Any] | None = None,
    zone: datetime.tzinfo | None = None,
    throttled: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """ExecutionViewSerializer's answer; `waiting` is what a SUSPENDED execution waits for,
    `throttled` what a route limit holds back (executions/queue/limits.py's `throttled_each`)."""
    zone = zone or timezone.get_current_timezone()
    result = execution.result or {}
    view: dict[str, Any] = {
        "id": str(execution.id),
        "requestId": str(execution.request_id),
        "transitionId": execution.transition_id,
        "status": execution.status,
        "outcome": result.get("outcome"),
        "targetState": result.get("targetState"),
        "errorCode": execution.error_code,
        "attempts": execution.attempts,
        "createdAt": moment(execution.created_at, zone),
        "finishedAt": moment(execution.finished_at, zone),
    }
    if waiting is not None:
        view["waitingFor"] = {
            "actionId": waiting["actionId"],
            "event": waiting["event"],
            "deadline": moment(waiting["deadline"], zone),
        }
    if throttled is not None:
        view["throttled"] = {
            "actionId": throttled["actionId"],
            "capability": throttled["capability"],
            "until": moment(throttled["until"], zone),
        }
    return view


def request_view(request: RequestRow, zone: datetime.tzinfo | None = None) -> dict[str, Any]:
    """RequestViewSerializer's answer."""
    zone = zone or timezone.get_current_timezone()
    return {
        "id": str(request.id),
        "flowKey": request.flow_key,
        "flowVersion": request.flow_version,
        "state": request.state,
        "revision": request.revision,
        "data": json_value(request.data),
        "blocked": request.blocked,
        "createdAt": moment(request.created_at, zone),
        "updatedAt": moment(request.updated_at, zone),
    }


def action_view(checkpoint: ActionExecution) -> dict[str, Any]:
    """ExecutionActionSerializer's answer."""
    return {
        "actionId": checkpoint.action_id,
        "capability": checkpoint.capability,
        "version": checkpoint.capability_version,
        "effect": checkpoint.effect,
        "status": checkpoint.status,
        "attempts": checkpoint.attempt,
        "startedAt": moment(checkpoint.started_at),
        "finishedAt": moment(checkpoint.finished_at),
        "errorCode": checkpoint.error_code,
        "compensates": compensated_action(checkpoint.action_id),
    }
