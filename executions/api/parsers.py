"""Request bodies: bounded, strict JSON that PostgreSQL can store as it was sent.

Refused with INVALID_BODY, saying why: bodies over MAX_BODY_BYTES (whatever their size: the
declared length is checked before anything is read), text that is not UTF-8 JSON, NaN and
infinities (and numbers such as 1e400 that would become one), integers longer than
MAX_INTEGER_DIGITS (Python refuses to convert longer ones), duplicate object keys
(which would silently drop a value), nesting deeper than MAX_DEPTH, and strings holding NUL or an
unpaired surrogate (jsonb and UTF-8 cannot hold them, and would otherwise fail deep inside the
database).
"""

import json
import math
import re
from typing import Any

from rest_framework.parsers import JSONParser

from orquestador import errors
from orquestador.errors import CodedError

MAX_BODY_BYTES = 1024 * 1024  # bytes; request data alone is limited to 256 KiB, compact
MAX_DEPTH = 100  # levels of nested arrays and objects
MAX_INTEGER_DIGITS = 4300  # digits of one JSON integer (Python's int-string conversion limit)
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def _invalid(detail: str) -> CodedError:
    return CodedError(errors.INVALID_BODY, detail)


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for name, value in pairs:
        if name in result:
            raise _invalid(f"the body repeats the key {name[:100]!r} in one object")
        result[name] = value
    return result


def _no_constants(name: str) -> None:
    raise _invalid(f"the body is not valid JSON: {name} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise _invalid(f"the body has a number too large to represent: {text[:40]}")
    return value


def _bounded_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INTEGER_DIGITS:
        raise _invalid(
            f"the body has an integer longer than {MAX_INTEGER_DIGITS} digits: {text[:20]}..."
        )
    return int(text)


def check_declared_length(content_length: str | None) -> None:
    """Refuse a body whose declared Content-Length is over MAX_BODY_BYTES, before reading it."""
    if content_length and content_length.strip().isdigit():
        if int(content_length) > MAX_BODY_BYTES:
            raise _invalid(f"the body is larger than {MAX_BODY_BYTES} bytes")


def loads(raw: bytes) -> Any:
    """Parse a request body, or raise CodedError(INVALID_BODY) saying what is wrong with it."""
    if len(raw) > MAX_BODY_BYTES:
        raise _invalid(f"the body is larger than {MAX_BODY_BYTES} bytes")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _invalid("the body is not UTF-8 text") from exc
    try:
        value = json.loads(
            text,
            object_pairs_hook=_no_duplicates,
            parse_constant=_no_constants,
            parse_float=_finite_float,
            parse_int=_bounded_int,
        )
    except json.JSONDecodeError as exc:
        raise _invalid(
            f"the body is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from exc
    except RecursionError as exc:
        raise _invalid(f"the body nests more than {MAX_DEPTH} levels deep") from exc
    _check_storable(value)
    return value


def _check_storable(value: Any) -> None:
    """Walk the value without recursion: depth, and strings jsonb cannot store."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            if depth >= MAX_DEPTH:
                raise _invalid(f"the body nests more than {MAX_DEPTH} levels deep")
            for name, inner in item.items():
                _check_text(name)
                stack.append((inner, depth + 1))
        elif isinstance(item, list):
            if depth >= MAX_DEPTH:
                raise _invalid(f"the body nests more than {MAX_DEPTH} levels deep")
            stack.extend((inner, depth + 1) for inner in item)
        elif isinstance(item, str):
            _check_text(item)


def _check_text(text: str) -> None:
    if _UNSTORABLE.search(text):
        raise _invalid(
            "the body holds a string with a NUL character (\\u0000) or an unpaired surrogate, "
            "which cannot be stored"
        )


class StrictJSONParser(JSONParser):
    """DRF's JSON parser, bounded and strict (see the module docstring)."""

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        if stream is None:
            return None
        return loads(stream.read(MAX_BODY_BYTES + 1))
