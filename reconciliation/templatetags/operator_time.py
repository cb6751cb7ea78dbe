"""Template filters of the operators' pages: UTC to the second, ages in words, short ids."""

from datetime import datetime
from typing import Any

from django import template
from django.utils import timezone

from orquestador import display

register = template.Library()

SHORT_ID_CHARS = 8  # characters of an id shown in lists (the full id is in its title)


@register.filter
def utc(moment: datetime | None) -> str:
    """`2026-12-01 05:54:51 UTC`, or "—"."""
    return display.utc(moment)


@register.filter
def ago(moment: datetime | None) -> str:
    """How long ago, in words ("3 min"), or "—"."""
    if moment is None:
        return "—"
    return display.age((timezone.now() - moment).total_seconds())


@register.filter
def short(value: Any) -> str:
    """The first characters of an id, or "—"."""
    if value is None or value == "":
        return "—"
    return str(value)[:SHORT_ID_CHARS]
