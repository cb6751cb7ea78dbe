"""How the admin pages and the texts they record show a value to a person: a line cut to a
length, a moment in UTC to the second, an age in words, a moment with its age, and an amount of
money in its currency ("€25.00", "¥2,500"), formatted by Babel for the active language.

Pure functions, no clock: callers pass `now`. Imports nothing of the project, so the executions
admin and the reconciliation screens show moments and amounts the same way.
"""

import re
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from functools import cache

from babel import Locale, UnknownLocaleError
from babel.numbers import format_currency, get_currency_precision, list_currencies
from django.utils import translation

CURRENCY_CODE = re.compile(r"[A-Z]{3}")
# An amount written as a JSON string; longer is no amount of money (and would be slow to format).
_DECIMAL_TEXT = re.compile(r"-?[0-9]{1,30}(\.[0-9]{1,30})?")


def clip(text: str | None, limit: int) -> str:
    """One line of at most `limit` characters."""
    if not text:
        return ""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def utc(moment: datetime | None) -> str:
    """A moment as UTC to the second ("2026-12-01 05:54:51 UTC"), or "—"."""
    if moment is None:
        return "—"
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def age(seconds: float) -> str:
    """A duration an operator reads at a glance: "45 s", "3 min", "2 h 5 min", "3 d 4 h"."""
    seconds = max(0, int(seconds))
    if seconds < 60:
        return f"{seconds} s"
    minutes = seconds // 60
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h" if hours else f"{days} d"


def at_and_ago(moment: datetime | None, now: datetime) -> str:
    """A moment as UTC to the second with its relative age: "… UTC (3 min ago)" / "(in 5 s)"."""
    if moment is None:
        return "—"
    seconds = (now - moment).total_seconds()
    relative = f"{age(seconds)} ago" if seconds >= 0 else f"in {age(-seconds)}"
    return f"{utc(moment)} ({relative})"


@cache
def _currencies() -> frozenset[str]:
    return frozenset(list_currencies())


def is_currency(code: object) -> bool:
    """True for an ISO 4217 code Babel knows ("EUR", "JPY"), never for anything else."""
    return (
        isinstance(code, str)
        and CURRENCY_CODE.fullmatch(code) is not None
        and (code in _currencies())
    )


def minor_digits(currency: str) -> int:
    """How many digits the currency's minor unit has: EUR 2, JPY 0, BHD 3."""
    return get_currency_precision(currency)


@cache
def _locale(language: str) -> Locale:
    try:
        return Locale.parse(translation.to_locale(language))
    except (UnknownLocaleError, ValueError):
        return Locale.parse("en_US")


def money(amount: object, currency: object, *, minor_units: bool) -> str | None:
    """`amount` of `currency` as the active language writes money ("€25.00"); None when it is
    not an amount (not a number or a decimal string, a fraction of a minor unit, an unknown
    currency), for the caller to show the value as it is. `minor_units`: `amount` counts the
    currency's minor units (2500 is €25.00, but ¥2,500)."""
    if not isinstance(currency, str) or not is_currency(currency):
        return None
    if isinstance(amount, bool) or not isinstance(amount, int | float | str):
        return None
    if isinstance(amount, str) and not _DECIMAL_TEXT.fullmatch(amount):
        return None
    try:
        value = Decimal(str(amount))
    except (InvalidOperation, ValueError):  # ValueError: an int past str()'s digit limit
        return None
    if not value.is_finite():
        return None
    if minor_units:
        if value != value.to_integral_value():
            return None  # a fraction of a cent is no count of cents
        value = value.scaleb(-minor_digits(currency))
    # Never rounded: a value finer than the currency's minor unit shows every digit it has.
    try:
        return format_currency(
            value,
            currency,
            locale=_locale(translation.get_language() or "en-us"),
            decimal_quantization=False,
        )
    except ArithmeticError:  # beyond what the decimal context holds (1e300): no amount of money
        return None
