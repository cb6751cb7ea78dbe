"""The one strict JSON reader: bounded, and only JSON that PostgreSQL can store as it was sent.

Refused, with a reason that reads after a subject ("the body …", "the flow definition …"): text
over `max_bytes`, bytes that are not UTF-8, text that is not JSON, NaN and infinities (and numbers
such as 1e400 that would become one), integers longer than MAX_INTEGER_DIGITS (Python refuses
to convert longer ones), duplicate object keys (which would silently drop a value),
nesting deeper than MAX_DEPTH, and strings holding NUL or an unpaired surrogate (jsonb and UTF-8
cannot hold them, and would otherwise fail deep inside the database). Request bodies, flow
definitions, providers' answers and operators' typed outputs all come through `loads`.
"""

import json
import math
import re
from typing import Any

MAX_DEPTH = 100  # levels of nested arrays and objects
MAX_INTEGER_DIGITS = 4300  # digits of one JSON integer (Python's int-string conversion limit)
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


class JSONRefused(ValueError):
    """The text is not strict JSON; `reason` completes a sentence about it ("the body …")."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for name, value in pairs:
        if name in result:
            raise JSONRefused(f"repeats the key {name[:100]!r} in one object")
        result[name] = value
    return result


def _no_constants(name: str) -> None:
    raise JSONRefused(f"is not valid JSON: {name} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise JSONRefused(f"has a number too large to represent: {text[:40]}")
    return value


def _bounded_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INTEGER_DIGITS:
        raise JSONRefused(f"has an integer longer than {MAX_INTEGER_DIGITS} digits: {text[:20]}...")
    return int(text)


# What makes json.loads strict: no duplicate keys, no NaN or Infinity, numbers within bounds.
_STRICT_HOOKS: dict[str, Any] = {
    "object_pairs_hook": _no_duplicates,
    "parse_constant": _no_constants,
    "parse_float": _finite_float,
    "parse_int": _bounded_int,
}
# Built once: json.loads with hooks builds a decoder (and its scanner) at every call.
_DECODER = json.JSONDecoder(**_STRICT_HOOKS)
_BOM = "\ufeff"


def loads(raw: bytes | str, *, max_bytes: int | None = None) -> Any:
    """Parse strict JSON text, or raise JSONRefused saying what is wrong with it."""
    if max_bytes is not None and len(raw) > max_bytes:
        raise JSONRefused(f"is larger than {max_bytes} bytes")
    if isinstance(raw, bytes):
        try:
            raw = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise JSONRefused("is not UTF-8 text") from exc
    try:
        if raw.startswith(_BOM):  # as json.loads refuses it
            raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", raw, 0)
        value = _DECODER.decode(raw)
    except json.JSONDecodeError as exc:
        raise JSONRefused(
            f"is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from exc
    except RecursionError as exc:
        raise JSONRefused(f"nests more than {MAX_DEPTH} levels deep") from exc
    _check_storable(value)
    return value


def _check_storable(value: Any) -> None:
    """Walk the value without recursion: depth, and strings jsonb cannot store."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            if depth >= MAX_DEPTH:
                raise JSONRefused(f"nests more than {MAX_DEPTH} levels deep")
            for name, inner in item.items():
                _check_text(name)
                stack.append((inner, depth + 1))
        elif isinstance(item, list):
            if depth >= MAX_DEPTH:
                raise JSONRefused(f"nests more than {MAX_DEPTH} levels deep")
            stack.extend((inner, depth + 1) for inner in item)
        elif isinstance(item, str):
            _check_text(item)


def _check_text(text: str) -> None:
    if _UNSTORABLE.search(text):
        raise JSONRefused(
            "holds a string with a NUL character (\\u0000) or an unpaired surrogate, "
            "which cannot be stored"
        )
