"""The lists' cursors: where the next page starts, opaque to clients and tamper-evident
(docs/api.md, docs/adr/0015-lists-by-keyset-on-their-own-indexes.md).

A cursor is the last row's position (created_at, id) and an HMAC-SHA256, keyed from SECRET_KEY,
over that position, the list, the caller (tenant, subject, access mode) and the filters, in
base64url: anything else is INVALID_CURSOR; `limit` is not in it. The HMAC is Django's
`salted_hmac` byte for byte, its key derived once per SECRET_KEY (why:
docs/adr/0021-an-entrance-as-fast-as-the-engine.md). The id travels as text.
"""

import base64
import binascii
import datetime
import functools
import hashlib
import hmac
import struct
from dataclasses import dataclass
from json.encoder import c_make_encoder, encode_basestring_ascii  # type: ignore[attr-defined]
from typing import Any

from django.conf import settings

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

    created_at: datetime.datetime  # aware
    id: str  # the row's id as text: lowercase hexadecimal, hyphenated


# What json.dumps(..., sort_keys=True, separators=(",", ":"), default=str) writes: the encoder's
# own C function, made once (JSONEncoder.encode makes it again on every call). Without the check
# for circular values: a message is a list of texts and the parsed filters.
_message = c_make_encoder(None, str, encode_basestring_ascii, None, ":", ",", True, False, True)


@functools.lru_cache(maxsize=2)
def _key(secret: str) -> bytes:
    """salted_hmac(_SALT, ..., secret, algorithm="sha256")'s key."""
    return hashlib.sha256(_SALT.encode() + secret.encode()).digest()


def _mac(list_name: str, principal: Principal, filters: dict[str, Any], body: bytes) -> bytes:
    caller = [principal.tenant, principal.subject, principal.has(REQUESTS_READ_TENANT)]
    message = "".join(_message([list_name, caller, filters], 0)).encode()
    return hmac.digest(_key(settings.SECRET_KEY), message + body, "sha256")[:MAC_BYTES]


def _id_text(raw: bytes) -> str:
    text = raw.hex()
    return f"{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"


def cursor_make(
    *, list_name: str, principal: Principal, filters: dict[str, Any], position: Position
) -> str:
    """The cursor of the page after `position`, for this list, caller and filters."""
    micros = (position.created_at - _EPOCH) // datetime.timedelta(microseconds=1)
    body = _LAYOUT.pack(VERSION, micros, bytes.fromhex(position.id.replace("-", "")))
    raw = body + _mac(list_name, principal, filters, body)
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def cursor_open(
    *, list_name: str, principal: Principal, filters: dict[str, Any], cursor: str
) -> Position:
    """The position `cursor` carries, or INVALID_CURSOR when it was not made by
    `cursor_make` for this list, caller and filters."""
    if len(cursor) != CURSOR_CHARS or not cursor.isascii():
        raise _refused()
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
    except (binascii.Error, ValueError):
        raise _refused() from None
    # The one spelling of these bytes: base64 ignores stray characters and the last
    # character's spare bits, and a changed cursor must not pass for the same one.
    if base64.urlsafe_b64encode(raw).rstrip(b"=").decode() != cursor:
        raise _refused()
    body, mac = raw[: _LAYOUT.size], raw[_LAYOUT.size :]
    if len(raw) != CURSOR_BYTES or not hmac.compare_digest(
        mac, _mac(list_name, principal, filters, body)
    ):
        raise _refused()
    version, micros, id_bytes = _LAYOUT.unpack(body)
    if version != VERSION:
        raise _refused()
    try:
        created_at = _EPOCH + datetime.timedelta(microseconds=micros)
    except OverflowError:  # only a cursor we made passes the HMAC; this is defence in depth
        raise _refused() from None
    return Position(created_at=created_at, id=_id_text(id_bytes))


def _refused() -> CodedError:
    return CodedError(
        errors.INVALID_CURSOR,
        "cursor: not one this list gave with these filters to this caller; send the filters "
        "of the first page again with its `next`, or start without a cursor",
    )
