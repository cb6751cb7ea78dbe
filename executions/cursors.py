"""The lists' cursors: where the next page starts, opaque to clients and tamper-evident.

A cursor is the last row's position (created_at, id) and an HMAC-SHA256, keyed from SECRET_KEY,
over that position, the list it was made for, the caller (tenant, subject, access mode) and the
filters, in base64url. So a cursor only opens the next page of the list it came from: one changed
by a byte, made for another caller, or sent with other filters fails the HMAC and is
INVALID_CURSOR. `limit` is not in it, so the page size may change from page to page.
"""

import base64
import binascii
import datetime
import json
import struct
import uuid
from dataclasses import dataclass
from typing import Any

from django.utils.crypto import constant_time_compare, salted_hmac

from orquestador import errors
from orquestador.auth import REQUESTS_READ_TENANT, Principal
from orquestador.errors import CodedError

VERSION = 1
MAC_BYTES = 16  # of the HMAC-SHA256, kept in the cursor
_LAYOUT = struct.Struct(">Bq16s")  # version, created_at in microseconds since the epoch, id
CURSOR_BYTES = _LAYOUT.size + MAC_BYTES
CURSOR_CHARS = len(base64.urlsafe_b64encode(b"\0" * CURSOR_BYTES).rstrip(b"="))
_SALT = "orquestador.lists.cursor"
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


@dataclass(frozen=True)
class Position:
    """A row's place in a list, newest first: the next page holds the rows before it."""

    created_at: datetime.datetime
    id: uuid.UUID


def _mac(list_name: str, principal: Principal, filters: dict[str, Any], body: bytes) -> bytes:
    caller = [principal.tenant, principal.subject, principal.has(REQUESTS_READ_TENANT)]
    message = json.dumps(
        [list_name, caller, filters], sort_keys=True, separators=(",", ":"), default=str
    ).encode()
    return salted_hmac(_SALT, message + body, algorithm="sha256").digest()[:MAC_BYTES]


def cursor_make(
    *, list_name: str, principal: Principal, filters: dict[str, Any], position: Position
) -> str:
    """The cursor of the page after `position`, for this list, caller and filters."""
    micros = (position.created_at - _EPOCH) // datetime.timedelta(microseconds=1)
    body = _LAYOUT.pack(VERSION, micros, position.id.bytes)
    raw = body + _mac(list_name, principal, filters, body)
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def cursor_open(
    *, list_name: str, principal: Principal, filters: dict[str, Any], cursor: str
) -> Position:
    """The position `cursor` carries, or INVALID_CURSOR when it was not made by
    `cursor_make` for this list, caller and filters."""
    refused = CodedError(
        errors.INVALID_CURSOR,
        "cursor: not one this list gave with these filters to this caller; send the filters "
        "of the first page again with its `next`, or start without a cursor",
    )
    if len(cursor) != CURSOR_CHARS or not cursor.isascii():
        raise refused
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
    except (binascii.Error, ValueError):
        raise refused from None
    # The one spelling of these bytes: base64 ignores stray characters and the last
    # character's spare bits, and a changed cursor must not pass for the same one.
    if base64.urlsafe_b64encode(raw).rstrip(b"=").decode() != cursor:
        raise refused
    body, mac = raw[: _LAYOUT.size], raw[_LAYOUT.size :]
    if len(raw) != CURSOR_BYTES or not constant_time_compare(
        mac, _mac(list_name, principal, filters, body)
    ):
        raise refused
    version, micros, id_bytes = _LAYOUT.unpack(body)
    if version != VERSION:
        raise refused
    try:
        created_at = _EPOCH + datetime.timedelta(microseconds=micros)
    except OverflowError:  # only a cursor we made passes the HMAC; this is defence in depth
        raise refused from None
    return Position(created_at=created_at, id=uuid.UUID(bytes=id_bytes))
