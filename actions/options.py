"""Route options: how an adapter declares the keys it accepts under `[routes."cap@ver"]`.

Each validator takes the full TOML key (for the error message) and the raw value, and returns the
normalised value or raises `IntegrationConfigError` naming that key and why. Adapters list their
options in `route_options`; the catalog applies them and refuses any key not listed. The helpers
at the end check tables and keys for the whole catalog file and write a key as the file does.
"""

import re
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from .base import IntegrationConfigError

Validator = Callable[[str, Any], Any]

_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")


@dataclass(frozen=True)
class Option:
    validate: Validator
    required: bool = False
    default: Any = None


def http_url(*, placeholders: Collection[str] = (), required: Collection[str] = ()) -> Validator:
    """An absolute http(s) URL with a host, no credentials, no fragment.

    `placeholders` may appear (each at most once) after the host; those in `required` must.
    """

    def validate(key: str, value: Any) -> str:
        if not isinstance(value, str) or not value:
            raise IntegrationConfigError(key, "must be a non-empty string URL")
        found = _PLACEHOLDER.findall(value)
        for name in found:
            if name not in placeholders:
                allowed = ", ".join(f"{{{p}}}" for p in placeholders) or "none"
                raise IntegrationConfigError(
                    key, f"unknown placeholder {{{name}}} (allowed: {allowed})"
                )
        for name in required:
            if found.count(name) != 1:
                raise IntegrationConfigError(key, f"must contain {{{name}}} exactly once")
        if len(found) != len(set(found)):
            raise IntegrationConfigError(key, "a placeholder appears more than once")
        # Placeholders are filled with URL-quoted values; check the shape with a sample filled in
        # and that the scheme and host do not depend on it.
        sample = _PLACEHOLDER.sub("x", value)
        try:
            parts = urlsplit(sample)
            port = parts.port
        except ValueError as exc:
            raise IntegrationConfigError(key, f"is not a valid URL ({exc})") from None
        if parts.scheme not in ("http", "https"):
            raise IntegrationConfigError(key, "must be an http:// or https:// URL")
        if not parts.hostname:
            raise IntegrationConfigError(key, "must name a host")
        if "{" in value.split("//", 1)[1].split("/", 1)[0] or port == 0:
            raise IntegrationConfigError(key, "the host and port must be fixed")
        if parts.username is not None or parts.password is not None:
            raise IntegrationConfigError(
                key, "must not carry credentials; name them in headers_from_env instead"
            )
        if parts.fragment:
            raise IntegrationConfigError(key, "must not have a #fragment")
        return value

    return validate


def one_of(*choices: str) -> Validator:
    def validate(key: str, value: Any) -> str:
        if value not in choices:
            raise IntegrationConfigError(
                key, f"must be one of {', '.join(choices)}, got {show_value(value)}"
            )
        return value

    return validate


def integer(*, minimum: int, maximum: int) -> Validator:
    def validate(key: str, value: Any) -> int:
        # TOML booleans are Python ints; refuse them explicitly.
        if isinstance(value, bool) or not isinstance(value, int):
            raise IntegrationConfigError(key, f"must be an integer, got {show_value(value)}")
        if not minimum <= value <= maximum:
            raise IntegrationConfigError(key, f"must be between {minimum} and {maximum}")
        return value

    return validate


def seconds(*, maximum: float) -> Validator:
    """A positive number of seconds, at most `maximum`."""

    def validate(key: str, value: Any) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise IntegrationConfigError(
                key, f"must be a number of seconds, got {show_value(value)}"
            )
        if not 0 < value <= maximum:
            raise IntegrationConfigError(key, f"must be more than 0 and at most {maximum}")
        return float(value)

    return validate


def string_list(*, pattern: re.Pattern[str], what: str) -> Validator:
    """A non-empty list of distinct strings, each matching `pattern` (lower-cased)."""

    def validate(key: str, value: Any) -> tuple[str, ...]:
        if not isinstance(value, list) or not value:
            raise IntegrationConfigError(key, f"must be a non-empty list of {what}")
        items = []
        for item in value:
            if not isinstance(item, str) or not pattern.fullmatch(item):
                raise IntegrationConfigError(key, f"{show_value(item)} is not a valid {what}")
            items.append(item.lower())
        if len(set(items)) != len(items):
            raise IntegrationConfigError(key, "has duplicate entries")
        return tuple(items)

    return validate


def show_value(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


# TOML tables and keys, as the catalog's error messages name them
_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def toml_key(name: str) -> str:
    """A TOML key as written in the file: bare when it can be, quoted otherwise."""
    if _BARE_KEY.fullmatch(name):
        return name
    escaped = name.replace("\\", "\\\\").replace('"', '\\"')
    return f'"{escaped}"'


def as_table(key: str, value: Any) -> dict[str, Any]:
    """`value` when it is a TOML table; otherwise the error naming `key`."""
    if not isinstance(value, dict):
        raise IntegrationConfigError(key, f"must be a table, got {show_value(value)}")
    return value


def only_keys(key: str, table: Mapping[str, Any], allowed: Collection[str]) -> None:
    """Refuse the first key of `table` that is not `allowed`, naming it as written in the file."""
    for name in table:
        if name not in allowed:
            where = f"{key}.{toml_key(name)}" if key else toml_key(name)
            raise IntegrationConfigError(
                where, f"unknown key (allowed: {', '.join(sorted(allowed))})"
            )
