"""JSON Pointer (RFC 6901) with the write rules of docs/flow-format.md#updates.

Reading (`resolve`) never raises for an absent path: it returns `MISSING`. Writing (`set_value`)
is narrower than RFC 6902 "add": any object member, missing object parents created as `{}`;
only array positions that already exist; never the root `""`; the token `-` nowhere. Malformed
pointers and impossible writes raise `PointerError`, naming the pointer and the problem. Nothing
here does I/O.
"""

import json
import re
from typing import Any

_INDEX = re.compile(r"0|[1-9][0-9]*")
_BAD_ESCAPE = re.compile(r"~(?![01])")


class _Missing:
    """The value of a path that points at nothing (distinct from JSON null)."""

    _instance = None

    def __new__(cls) -> "_Missing":
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "MISSING"

    def __bool__(self) -> bool:
        return False


MISSING: Any = _Missing()


class PointerError(ValueError):
    """A malformed pointer, or a write the pointer semantics refuse."""

    def __init__(self, pointer: Any, problem: str) -> None:
        self.pointer, self.problem = pointer, problem
        shown = json.dumps(pointer) if isinstance(pointer, str) else repr(pointer)
        super().__init__(f"pointer {shown}: {problem}")


def parse(pointer: str) -> list[str]:
    """Split `pointer` into unescaped reference tokens; `""` (the root) is `[]`."""
    if not isinstance(pointer, str):
        raise PointerError(pointer, "must be a string")
    if pointer == "":
        return []
    if not pointer.startswith("/"):
        raise PointerError(pointer, 'must be empty or start with "/"')
    if _BAD_ESCAPE.search(pointer):
        raise PointerError(pointer, '"~" must be followed by 0 or 1 (~0 is "~", ~1 is "/")')
    return [token.replace("~1", "/").replace("~0", "~") for token in pointer[1:].split("/")]


def escape(token: str) -> str:
    """Escape one reference token (`~` as `~0`, `/` as `~1`)."""
    return token.replace("~", "~0").replace("/", "~1")


def is_index(token: str) -> bool:
    """True when `token` is an array index as RFC 6901 writes one (no sign, no leading zero)."""
    return _INDEX.fullmatch(token) is not None


def resolve(doc: Any, pointer: str) -> Any:
    """Return the value at `pointer` in `doc`, or `MISSING` when there is none."""
    current = doc
    for token in parse(pointer):
        if isinstance(current, dict):
            if token not in current:
                return MISSING
            current = current[token]
        elif isinstance(current, list):
            if not is_index(token) or int(token) >= len(current):
                return MISSING
            current = current[int(token)]
        else:
            return MISSING
    return current


def kind(value: Any) -> str:
    """The JSON type of `value` as a message names it ("a number", "an object", "null")."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return f"a {type(value).__name__}"


def _where(prefix: str) -> str:
    return f'"{prefix}"' if prefix else "the root"


def _array_position(pointer: str, prefix: str, array: list, token: str) -> int:
    if not is_index(token):
        raise PointerError(pointer, f'"{token}" is not an array index at {_where(prefix)}')
    position = int(token)
    if position >= len(array):
        raise PointerError(
            pointer,
            f"index {position} does not exist in the array at {_where(prefix)} "
            f"(length {len(array)}); only existing positions may be set",
        )
    return position


def set_value(doc: Any, pointer: str, value: Any) -> None:
    """Set `value` at `pointer` inside `doc`, in place, creating missing object parents."""
    tokens = parse(pointer)
    if not tokens:
        raise PointerError(pointer, "the root cannot be set")
    if "-" in tokens:
        raise PointerError(pointer, 'the append token "-" is not supported')
    current = doc
    prefix = ""
    for token in tokens[:-1]:
        if isinstance(current, dict):
            if token not in current:
                # Every parent below this one is new, so nothing later in the walk can fail
                # and leave a half-created path behind.
                current[token] = {}
            current = current[token]
        elif isinstance(current, list):
            current = current[_array_position(pointer, prefix, current, token)]
        else:
            raise PointerError(
                pointer, f"cannot write under {_where(prefix)}, which is {kind(current)}"
            )
        prefix += "/" + escape(token)
    last = tokens[-1]
    if isinstance(current, dict):
        current[last] = value
    elif isinstance(current, list):
        current[_array_position(pointer, prefix, current, last)] = value
    else:
        raise PointerError(
            pointer, f"cannot write under {_where(prefix)}, which is {kind(current)}"
        )
