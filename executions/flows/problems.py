"""Problems found in a flow definition, and the checks every level of a definition shares.

A problem is a location written as jsonschema writes JSON paths (`$.transitions[0].id`,
`$.states['odd key']`) and a message. `ProblemList` collects them and checks the shapes that
recur at every level: an object with known keys, a name, a version. Pure: no database, no I/O.
"""

import re
from dataclasses import dataclass
from typing import Any

from .pointer import kind

MAX_NAME_LENGTH = 100  # characters: keys, ids and states fit the model's columns
MAX_VERSION = 2**31 - 1  # PostgreSQL integer
MAX_DETAIL = 300  # characters of a schema error message shown back

IDENTIFIER = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")
IDENTIFIER_RULE = "an identifier (letters, digits, '_', '.' and '-', not starting with '.' or '-')"
_PLAIN_MEMBER = re.compile(r"[A-Za-z][A-Za-z0-9_]*")


@dataclass(frozen=True)
class FlowProblem:
    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


def member(path: str, name: str) -> str:
    """The location of member `name` under `path`, written as jsonschema writes JSON paths."""
    if _PLAIN_MEMBER.fullmatch(name):
        return f"{path}.{name}"
    return "{}['{}']".format(path, name.replace("\\", "\\\\").replace("'", "\\'"))


def short_detail(message: str) -> str:
    """`message` cut to `MAX_DETAIL` characters, as a problem shows a schema error."""
    return message if len(message) <= MAX_DETAIL else message[: MAX_DETAIL - 3] + "..."


class ProblemList:
    """The problems found so far, and the checks of shapes every level of a definition shares."""

    def __init__(self) -> None:
        self.problems: list[FlowProblem] = []

    def problem(self, path: str, message: str) -> None:
        self.problems.append(FlowProblem(path, message))

    def object(self, value: Any, path: str, required: tuple, optional: tuple = ()) -> bool:
        """Check `value` is an object with the required keys and no unknown ones."""
        if not isinstance(value, dict):
            self.problem(path, f"must be an object, not {kind(value)}")
            return False
        for name in required:
            if name not in value:
                self.problem(member(path, name), "is required")
        for name in value:
            if name not in required and name not in optional:
                allowed = ", ".join((*required, *optional))
                self.problem(member(path, name), f"unknown key (allowed: {allowed})")
        return True

    def name(
        self, value: Any, path: str, pattern: re.Pattern | None = None, what: str = ""
    ) -> bool:
        if not isinstance(value, str):
            self.problem(path, f"must be a non-empty string, not {kind(value)}")
            return False
        if not value:
            self.problem(path, "must not be empty")
            return False
        if len(value) > MAX_NAME_LENGTH:
            self.problem(path, f"must be at most {MAX_NAME_LENGTH} characters")
            return False
        if pattern is not None and not pattern.fullmatch(value):
            self.problem(path, f"{value!r} is not {what}")
            return False
        return True

    def unique_id(self, item: dict, path: str, seen: set[str], what: str) -> bool:
        """Check `item`'s id is an identifier not in `seen`, and add it there.

        Return whether it is both. Even a malformed id is added: it is still declared, so
        pointers to it are not a second problem.
        """
        ident = item.get("id")
        fresh = False
        if "id" in item and self.name(ident, f"{path}.id", IDENTIFIER, IDENTIFIER_RULE):
            fresh = ident not in seen
            if not fresh:
                self.problem(f"{path}.id", f"duplicate {what} id {ident!r}")
        if isinstance(ident, str):
            seen.add(ident)
        return fresh

    def version(self, value: Any, path: str) -> None:
        if not isinstance(value, int) or isinstance(value, bool):
            self.problem(path, f"must be an integer, not {kind(value)}")
        elif not 1 <= value <= MAX_VERSION:
            self.problem(path, f"must be between 1 and {MAX_VERSION}")
