"""What the busiest endpoints answer, built as plain dicts: the very JSON their serializers write,
both derived from the fields executions/api/shapes.py declares, without a serializer's per-call
field machinery, which cost more than the database on a page of 50. An execution's and a
request's from the fixed reads' named rows (executions/sql/rows.py), a step's from its model
instance. The acceptance, the reads by id and the pages send the same JSON written as text from
the rows (pagejson.py), which these dicts are the reference of.

tests/integration/api/test_render.py holds each function to its serializer's output, field by
field and in the same order, for every status, with and without the optional fields.
"""

import datetime
import enum
import functools
import operator
import zoneinfo
from collections.abc import Callable
from typing import Any, cast

from django.utils import timezone

from ..models import ActionExecution
from ..sql.rows import ExecutionRow, RequestRow, json_value
from .shapes import ACTION_VIEW, EXECUTION_VIEW, REQUEST_VIEW, Field, Kind, Shape

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


# How each kind of value is written for JSONRenderer (value, zone); None: as it is.
_KIND_VALUES: dict[Kind, Callable[[Any, datetime.tzinfo], Any] | None] = {
    Kind.ID: lambda value, zone: str(value),
    Kind.TEXT: None,
    Kind.INTEGER: None,
    Kind.BOOLEAN: None,
    Kind.TIME: moment,
    Kind.JSON: lambda value, zone: json_value(value),
}


class From(enum.Enum):
    """What a view is written from, which says how its fields are read."""

    ROW = "row"  # a named row (executions/sql/rows.py): by column
    DICT = "dict"  # a nested object's dict: by key
    INSTANCE = "instance"  # a model instance: as its serializer reads it


def _getter(field: Field, origin: From) -> Callable[[Any], Any]:
    if origin is From.DICT:
        return operator.itemgetter(field.column)
    if origin is From.INSTANCE and callable(field.source):
        return field.source
    name = field.source if origin is From.INSTANCE and field.source else field.column
    return operator.attrgetter(cast(str, name))


@functools.cache
def _plan(shape: Shape, origin: From) -> tuple[tuple[str, Callable, Callable | None], ...]:
    """Each field's key, getter and writer, found once per shape and origin."""
    return tuple(
        (field.key, _getter(field, origin), _KIND_VALUES[field.kind]) for field in shape.fields
    )


def view(
    shape: Shape,
    thing: Any,
    zone: datetime.tzinfo,
    origin: From = From.ROW,
    nested: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """`shape`'s view of `thing`, read as `origin` says, with each of its nested objects given in
    `nested` (by key) that is not None."""
    written: dict[str, Any] = {}
    for key, get, write in _plan(shape, origin):
        value = get(thing)
        written[key] = value if value is None or write is None else write(value, zone)
    for extra in shape.nested:
        found = None if nested is None else nested.get(extra.key)
        if found is not None:
            written[extra.key] = view(extra.shape, found, zone, From.DICT)
    return written


def execution_view(
    execution: ExecutionRow,
    waiting: dict[str, Any] | None = None,
    zone: datetime.tzinfo | None = None,
    throttled: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """ExecutionViewSerializer's answer; `waiting` is what a SUSPENDED execution waits for,
    `throttled` what a route limit holds back (executions/queue/limits.py's `throttled_each`)."""
    zone = zone or timezone.get_current_timezone()
    return view(
        EXECUTION_VIEW, execution, zone, nested={"waitingFor": waiting, "throttled": throttled}
    )


def request_view(request: RequestRow, zone: datetime.tzinfo | None = None) -> dict[str, Any]:
    """RequestViewSerializer's answer."""
    return view(REQUEST_VIEW, request, zone or timezone.get_current_timezone())


def action_view(checkpoint: ActionExecution) -> dict[str, Any]:
    """ExecutionActionSerializer's answer."""
    return view(ACTION_VIEW, checkpoint, timezone.get_current_timezone(), From.INSTANCE)
