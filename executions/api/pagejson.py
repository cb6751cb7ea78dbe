"""A page's body, and an acceptance's or a read's, written as JSON text row by row: one f-string
per row, generated for the fields executions/api/shapes.py declares (`_writer`), giving the very
bytes DRF's JSONRenderer writes for render.py's dicts (compact, UTF-8, U+2028 and U+2029 escaped)
without building the dicts (why: docs/adr/0021-an-entrance-as-fast-as-the-engine.md).

Texts that are not ids or times go through `encode_basestring`, the encoder's own; a request's
`data` through the encoder; times as the rows hold them or by `render.moment` in another zone; a
row's optional objects (waitingFor, throttled) after its fields. The two are held to the
same bytes by tests/integration/api/test_pagejson.py.
"""

import datetime
from collections.abc import Callable
from json.encoder import c_make_encoder, encode_basestring  # type: ignore[attr-defined]
from typing import Any, cast

from rest_framework.renderers import JSONRenderer
from rest_framework.utils.encoders import JSONEncoder

from ..sql.rows import ExecutionRow, RequestRow, json_value
from .render import UTC_ZONES, From, moment, view
from .shapes import EXECUTION_VIEW, REQUEST_VIEW, Kind, Shape


class Encoded(bytes):
    """A body already written as JSON: PageRenderer sends it as it is."""


class PageRenderer(JSONRenderer):
    """JSONRenderer, except that an Encoded body is sent as it is."""

    def render(
        self,
        data: Any,
        accepted_media_type: str | None = None,
        renderer_context: Any = None,
    ) -> bytes:
        if isinstance(data, Encoded):
            return data
        return super().render(data, accepted_media_type, renderer_context)


# What JSONRenderer writes with the project's settings (compact, not ASCII-only, no NaN), by one
# encoder made once: json.dumps makes a new one per call, which cost more than a row. Without
# the check for circular values: what it encodes was decoded from JSON or built from a row.
_ENCODER = JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))
# What JSONEncoder.encode itself runs (the C accelerator), less its set-up on every call.
_encode = (
    c_make_encoder(None, _ENCODER.default, encode_basestring, None, ":", ",", False, False, False)
    if c_make_encoder is not None
    else None
)


def _dumps(value: Any) -> str:
    return "".join(_encode(value, 0)) if _encode is not None else _ENCODER.encode(value)


def page_body(items: list[str], after: str | None) -> Encoded:
    """`{"results": [...], "next": ...}` of rows already written (`after` is a cursor)."""
    text = '{"results":[' + ",".join(items) + '],"next":'
    return encoded(text + ("null}" if after is None else '"' + after + '"}'))


def encoded(text: str) -> Encoded:
    """JSON text as JSONRenderer sends it: UTF-8, with U+2028 and U+2029 escaped."""
    return Encoded(text.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029").encode())


def _zoned(value: str, zone: datetime.tzinfo) -> str:
    """A row's time (the API's text, in UTC) as the answer writes it in `zone`."""
    return moment(value, zone) or ""  # text in, text out


# How each kind of a row's value is written as JSON text: a Python expression of the row's
# column `{v}`, and whether it goes between quotes as it is (an id, or a time as the row holds
# it: texts with nothing to escape).
_KIND_TEXTS: dict[Kind, tuple[str, bool]] = {
    Kind.ID: ("{v}", True),
    Kind.TEXT: ("encode_basestring({v})", False),
    Kind.INTEGER: ("{v}", False),
    Kind.BOOLEAN: ('"true" if {v} else "false"', False),
    Kind.TIME: ("{v}", True),
    Kind.JSON: ("_dumps(json_value({v}))", False),
}
_ZONED_TIME = "_zoned({v}, zone)"  # a time in a zone other than UTC


def _writer(shape: Shape, row_type: type[tuple], *, zoned: bool = False) -> Callable[..., str]:
    """The function writing a row of `row_type` as `shape`'s JSON text (without its nested
    objects), with its times in UTC as the row holds them, or, `zoned`, in its second argument's
    zone.

    Written as source and compiled once, as dataclasses and namedtuple make their methods: the row
    unpacked once into locals (ten attribute reads had cost a fifth of a row) and one f-string (a
    call per field, or the `%` operator with a template, cost several times as much)."""
    local = {column: "_" + column for column in row_type._fields}  # type: ignore[attr-defined]
    items = []
    for field in shape.fields:
        if not field.key.isidentifier():  # written as it is, between quotes
            raise ValueError(f"{field.key!r}: a view's keys are identifiers")
        column = local[field.column]
        template, quoted = _KIND_TEXTS[field.kind]
        if zoned and field.kind is Kind.TIME:
            template = _ZONED_TIME
        expression = template.format(v=column)
        if not field.null:
            text = f'"{{{expression}}}"' if quoted else f"{{{expression}}}"
        else:
            some = f"'\"' + {expression} + '\"'" if quoted else expression
            text = f'{{"null" if {column} is None else {some}}}'
        items.append(f'"{field.key}":{text}')
    source = (
        f"def write(row{', zone' if zoned else ''}):\n"
        f"    {', '.join(local.values())} = row\n"
        f"    return f'''{{{{{','.join(items)}}}}}'''\n"
    )
    namespace = {
        "encode_basestring": encode_basestring,
        "_dumps": _dumps,
        "json_value": json_value,
        "_zoned": _zoned,
    }
    name = f"<{row_type.__name__} as JSON text{' in a zone' if zoned else ''}>"
    exec(compile(source, name, "exec"), namespace)  # noqa: S102 (static text from shapes.py)
    return cast(Callable[..., str], namespace["write"])


_execution_text = _writer(EXECUTION_VIEW, ExecutionRow)
_execution_text_in = _writer(EXECUTION_VIEW, ExecutionRow, zoned=True)
_request_text = _writer(REQUEST_VIEW, RequestRow)
_request_text_in = _writer(REQUEST_VIEW, RequestRow, zoned=True)


def _with_nested(text: str, shape: Shape, zone: datetime.tzinfo, found: dict[str, Any]) -> str:
    """`text` (an object's JSON) with each of `shape`'s nested objects `found` by key that is not
    None, encoded from its dict (render.view), in the shape's order."""
    parts = [text[:-1]]
    for extra in shape.nested:
        value = found.get(extra.key)
        if value is not None:
            parts.append(f',"{extra.key}":{_dumps(view(extra.shape, value, zone, From.DICT))}')
    return "".join(parts) + "}"


def execution_item(
    row: ExecutionRow,
    waiting: dict[str, Any] | None,
    zone: datetime.tzinfo,
    throttled: dict[str, Any] | None,
) -> str:
    """execution_view(row, ...) as JSON text."""
    text = _execution_text(row) if zone in UTC_ZONES else _execution_text_in(row, zone)
    if waiting is None and throttled is None:
        return text
    return _with_nested(text, EXECUTION_VIEW, zone, {"waitingFor": waiting, "throttled": throttled})


def execution_items(
    rows: list[ExecutionRow],
    zone: datetime.tzinfo,
    waiting: dict[str, dict[str, Any]],
    throttled: dict[str, dict[str, Any]],
) -> list[str]:
    """execution_item of each row, with what each waits for or is throttled on by its id."""
    if waiting or throttled or zone not in UTC_ZONES:
        return [
            execution_item(row, waiting.get(row.id), zone, throttled.get(row.id)) for row in rows
        ]
    return list(map(_execution_text, rows))


def request_item(row: RequestRow, zone: datetime.tzinfo) -> str:
    """request_view(row) as JSON text."""
    if zone not in UTC_ZONES:
        return _request_text_in(row, zone)
    return _request_text(row)


def request_items(rows: list[RequestRow], zone: datetime.tzinfo) -> list[str]:
    """request_item of each row."""
    if zone not in UTC_ZONES:
        return [_request_text_in(row, zone) for row in rows]
    return list(map(_request_text, rows))
