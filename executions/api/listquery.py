"""The lists' query strings: each parameter declared once, parsed strictly and described in the
OpenAPI schema from the same declaration.

Anything else is 400 INVALID_QUERY naming the parameter: an unknown one, one given twice, an
empty value, a value of the wrong type or outside its enumeration. Times are RFC 3339 with an
offset; a bound is compared strictly, and a fraction finer than the database's microseconds is
rounded so that strictness holds (an `…After` down, a `…Before` up).
"""

import datetime
import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from drf_spectacular.utils import OpenApiParameter

from orquestador import errors
from orquestador.errors import CodedError

from .cursors import CURSOR_CHARS

DEFAULT_LIMIT = 50
MAX_LIMIT = 200
MAX_VALUE_CHARS = 100  # of a time or a number, before it is parsed
NO_NUL = "^[^\\x00]*$"
RFC3339 = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?"
    r"(?:([Zz])|([+-])(\d{2}):(\d{2}))",
    re.ASCII,
)
# A UUID as the schema's `format: uuid` has it: hyphenated, nothing around it.
UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
_MIN = datetime.datetime.min.replace(tzinfo=datetime.UTC)
_MAX = datetime.datetime.max.replace(tzinfo=datetime.UTC)


@dataclass(frozen=True)
class Param:
    """One filter: `kind` is text, boolean, uuid, choice, after or before (a time)."""

    name: str
    kind: str
    description: str
    max_length: int = 100
    choices: tuple[str, ...] = field(default=())


@dataclass(frozen=True)
class ListQuery:
    filters: dict[str, Any]  # by parameter name, parsed; JSON-ready for the cursor's HMAC
    limit: int
    cursor: str | None


def _refuse(name: str, why: str) -> CodedError:
    return CodedError(errors.INVALID_QUERY, f"{name[:100]}: {why}")


def _time(name: str, value: str, *, upward: bool) -> datetime.datetime:
    match = RFC3339.fullmatch(value) if len(value) <= MAX_VALUE_CHARS else None
    if match is None:
        hint = " (a '+' in a query string must be sent as %2B)" if " " in value else ""
        raise _refuse(name, f"must be an RFC 3339 time with an offset{hint}")
    year, month, day, hour, minute, second, fraction, _zulu, sign, off_h, off_m = match.groups()
    digits = (fraction or "").ljust(6, "0")
    micros = int(digits[:6])
    try:
        moment = datetime.datetime(
            int(year),
            int(month),
            int(day),
            int(hour),
            int(minute),
            min(int(second), 59),
            micros,
            tzinfo=datetime.UTC,
        )
        offset = datetime.timedelta(hours=int(off_h or 0), minutes=int(off_m or 0))
        if int(off_m or 0) > 59 or offset >= datetime.timedelta(days=1) or int(second) > 60:
            raise ValueError(value)
    except ValueError:
        raise _refuse(name, "must be an RFC 3339 time with an offset (a real one)") from None
    extra = datetime.timedelta(seconds=int(second) - 59 if int(second) == 60 else 0)
    if upward and digits[6:].strip("0"):
        extra += datetime.timedelta(microseconds=1)
    # The same instant in UTC: local time minus the offset ("Z" has none).
    shift = offset if sign == "-" else -offset
    try:
        return moment + shift + extra
    except OverflowError:  # beyond the years a time can have: before or after every row
        return _MIN if moment.year == 1 else _MAX


def _one(param: Param, value: str) -> Any:
    name = param.name
    if value == "":
        raise _refuse(name, "must not be empty")
    if param.kind == "boolean":
        if value not in ("true", "false"):
            raise _refuse(name, "must be true or false")
        return value == "true"
    if param.kind == "uuid":
        if not UUID.fullmatch(value):
            raise _refuse(name, "must be a UUID (8-4-4-4-12 hexadecimal digits)")
        return str(uuid.UUID(value))
    if param.kind == "choice":
        if value not in param.choices:
            raise _refuse(name, f"must be one of {', '.join(param.choices)}")
        return value
    if param.kind in ("after", "before"):
        return _time(name, value, upward=param.kind == "before").isoformat()
    if "\x00" in value:
        raise _refuse(name, "must not contain a NUL character")
    if len(value) > param.max_length:
        raise _refuse(name, f"must be at most {param.max_length} characters")
    return value


def _limit(value: str) -> int:
    if not (value.isascii() and value.isdigit() and len(value) <= 3):
        raise _refuse("limit", f"must be an integer from 1 to {MAX_LIMIT}")
    limit = int(value)
    if not 1 <= limit <= MAX_LIMIT:
        raise _refuse("limit", f"must be an integer from 1 to {MAX_LIMIT}")
    return limit


def list_query(query: Mapping[str, Sequence[str]], params: Sequence[Param]) -> ListQuery:
    """The filters, limit and cursor of a list's query string (a QueryDict's lists())."""
    known = {param.name: param for param in params}
    allowed = ", ".join([*known, "limit", "cursor"])
    filters: dict[str, Any] = {}
    limit = DEFAULT_LIMIT
    cursor: str | None = None
    for name, values in query.items():
        if name not in known and name not in ("limit", "cursor"):
            raise _refuse(name, f"unknown parameter (allowed: {allowed})")
        if len(values) != 1:
            raise _refuse(name, "must be given once")
        value = values[0]
        if name == "limit":
            limit = _limit(value)
        elif name == "cursor":
            if value == "":
                raise _refuse(name, "must not be empty")
            cursor = value
        else:
            filters[name] = _one(known[name], value)
    return ListQuery(filters=filters, limit=limit, cursor=cursor)


# -- OpenAPI ------------------------------------------------------------------------------------


def _schema(param: Param) -> dict[str, Any]:
    if param.kind == "boolean":
        return {"type": "boolean"}
    if param.kind == "uuid":
        return {"type": "string", "format": "uuid"}
    if param.kind == "choice":
        return {"type": "string", "enum": list(param.choices)}
    if param.kind in ("after", "before"):
        return {"type": "string", "format": "date-time"}
    return {"type": "string", "minLength": 1, "maxLength": param.max_length, "pattern": NO_NUL}


def openapi_parameters(params: Sequence[Param]) -> list[OpenApiParameter]:
    """The query parameters of a list: its filters, then limit and cursor."""
    return [
        *(
            OpenApiParameter(p.name, _schema(p), OpenApiParameter.QUERY, description=p.description)
            for p in params
        ),
        OpenApiParameter(
            "limit",
            {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "default": DEFAULT_LIMIT},
            OpenApiParameter.QUERY,
            description=f"Rows per page, 1 to {MAX_LIMIT} (default {DEFAULT_LIMIT}); it may "
            "change from page to page.",
        ),
        OpenApiParameter(
            "cursor",
            {
                "type": "string",
                "minLength": CURSOR_CHARS,
                "maxLength": CURSOR_CHARS,
                "pattern": "^[A-Za-z0-9_-]*$",
            },
            OpenApiParameter.QUERY,
            description="The `next` of the page before, sent with the same filters (the limit "
            "may differ). Anything else, or with other filters or another caller's token, is "
            "400 INVALID_CURSOR.",
        ),
    ]
