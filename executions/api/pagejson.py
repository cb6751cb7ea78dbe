"""A page's body written as JSON text row by row, from one template per row: the very bytes DRF's
JSONRenderer writes for render.py's dicts (compact, UTF-8, U+2028 and U+2029 escaped), without
building 50 dicts for the encoder to walk, which cost more than the page's statement.

Every text that is not an id or a time is written by `encode_basestring`, the function the
encoder itself uses for a string; a request's `data` by the encoder. A row with an optional
object (waitingFor, throttled) is encoded from its dict. tests/integration/api/test_pagejson.py
holds the two to the same bytes.
"""

import datetime
from json.encoder import c_make_encoder, encode_basestring  # type: ignore[attr-defined]
from typing import Any

from rest_framework.renderers import JSONRenderer
from rest_framework.utils.encoders import JSONEncoder

from ..rows import ExecutionRow, RequestRow
from .render import execution_view, moment


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


# The templates hold the keys in render.py's order; ids and times need no escaping.
_EXECUTION = (
    '{"id":"%s","requestId":"%s","transitionId":%s,"status":%s,"outcome":%s,'
    '"targetState":%s,"errorCode":%s,"attempts":%d,"createdAt":%s,"finishedAt":%s}'
)
_REQUEST = (
    '{"id":"%s","flowKey":%s,"flowVersion":%d,"state":%s,"revision":%d,"data":%s,'
    '"blocked":%s,"createdAt":%s,"updatedAt":%s}'
)


def _text(value: str | None) -> str:
    return "null" if value is None else encode_basestring(value)


def _time(value: datetime.datetime | None, zone: datetime.tzinfo) -> str:
    return "null" if value is None else '"' + moment(value, zone) + '"'  # type: ignore[operator]


def page_body(items: list[str], after: str | None) -> Encoded:
    """`{"results": [...], "next": ...}` of rows already written (`after` is a cursor)."""
    text = '{"results":[' + ",".join(items) + '],"next":'
    text += "null}" if after is None else '"' + after + '"}'
    return Encoded(text.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029").encode())


def execution_item(
    row: ExecutionRow,
    waiting: dict[str, Any] | None,
    zone: datetime.tzinfo,
    throttled: dict[str, Any] | None,
) -> str:
    """execution_view(row, ...) as JSON text."""
    if waiting is not None or throttled is not None:
        return _dumps(execution_view(row, waiting, zone, throttled))
    return _EXECUTION % (
        row.id,
        row.request_id,
        encode_basestring(row.transition_id),
        encode_basestring(row.status),
        _text(row.outcome),
        _text(row.target_state),
        _text(row.error_code),
        row.attempts,
        _time(row.created_at, zone),
        _time(row.finished_at, zone),
    )


def request_item(row: RequestRow, zone: datetime.tzinfo) -> str:
    """request_view(row) as JSON text."""
    return _REQUEST % (
        row.id,
        encode_basestring(row.flow_key),
        row.flow_version,
        encode_basestring(row.state),
        row.revision,
        _dumps(row.data),
        "true" if row.blocked else "false",
        _time(row.created_at, zone),
        _time(row.updated_at, zone),
    )
