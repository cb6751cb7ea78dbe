"""A page's body, and an acceptance's or a read's, written as JSON text row by row, one f-string
per row: the very bytes DRF's JSONRenderer writes for render.py's dicts (compact, UTF-8, U+2028
and U+2029 escaped), without building the dicts for the encoder to walk (why:
docs/adr/0021-an-entrance-as-fast-as-the-engine.md).

Every text that is not an id or a time goes through `encode_basestring`, the encoder's own; a
request's `data` through the encoder; times as the rows hold them (executions/sql/rows.py) or by
`render.moment` in another zone; a row with an optional object (waitingFor, throttled) from its
dict. tests/integration/api/test_pagejson.py holds the two to the same bytes.
"""

import datetime
from json.encoder import c_make_encoder, encode_basestring  # type: ignore[attr-defined]
from typing import Any

from rest_framework.renderers import JSONRenderer
from rest_framework.utils.encoders import JSONEncoder

from ..sql.rows import ExecutionRow, RequestRow, json_value
from .render import UTC_ZONES, execution_view, moment


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


def execution_item(
    row: ExecutionRow,
    waiting: dict[str, Any] | None,
    zone: datetime.tzinfo,
    throttled: dict[str, Any] | None,
) -> str:
    """execution_view(row, ...) as JSON text."""
    if waiting is not None or throttled is not None:
        return _dumps(execution_view(row, waiting, zone, throttled))
    if zone not in UTC_ZONES:
        finished = None if row.finished_at is None else _zoned(row.finished_at, zone)
        row = row._replace(created_at=_zoned(row.created_at, zone), finished_at=finished)
    return _execution_text(row)


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


def _execution_text(row: ExecutionRow) -> str:
    # The row unpacked once (ten attribute reads cost a fifth of a row), its times already as
    # the answer writes them.
    id_, request_id, transition, status, attempts, _, outcome, target, error, created, finished = (
        row
    )
    finished_text = "null" if finished is None else '"' + finished + '"'
    return (
        f'{{"id":"{id_}","requestId":"{request_id}",'
        f'"transitionId":{encode_basestring(transition)},"status":{encode_basestring(status)},'
        f'"outcome":{"null" if outcome is None else encode_basestring(outcome)},'
        f'"targetState":{"null" if target is None else encode_basestring(target)},'
        f'"errorCode":{"null" if error is None else encode_basestring(error)},'
        f'"attempts":{attempts},"createdAt":"{created}","finishedAt":{finished_text}}}'
    )


def request_item(row: RequestRow, zone: datetime.tzinfo) -> str:
    """request_view(row) as JSON text."""
    if zone not in UTC_ZONES:
        row = row._replace(
            created_at=_zoned(row.created_at, zone), updated_at=_zoned(row.updated_at, zone)
        )
    return _request_text(row)


def request_items(rows: list[RequestRow], zone: datetime.tzinfo) -> list[str]:
    """request_item of each row."""
    if zone not in UTC_ZONES:
        return [request_item(row, zone) for row in rows]
    return list(map(_request_text, rows))


def _request_text(row: RequestRow) -> str:
    id_, key, version, state, revision, data, blocked, created, updated = row
    return (
        f'{{"id":"{id_}","flowKey":{encode_basestring(key)},"flowVersion":{version},'
        f'"state":{encode_basestring(state)},"revision":{revision},'
        f'"data":{_dumps(json_value(data))},'
        f'"blocked":{"true" if blocked else "false"},'
        f'"createdAt":"{created}","updatedAt":"{updated}"}}'
    )
