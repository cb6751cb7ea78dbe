"""Columns of the read-only admin lists that an operator reads at a glance: an id cut to its
first characters (the whole id in its title, the row still linking to it) and a moment in UTC to
the second with its age. Each builder returns an `admin.display` method for a ModelAdmin."""

from collections.abc import Callable
from typing import Any

from django.contrib import admin
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html

from orquestador import display

SHORT_ID_CHARS = 8  # characters of an id shown in a list


def short_id(field: str = "pk", *, description: str = "id") -> Callable[[Any, Any], str]:
    """The row's own id, short: the admin links the first column to the row."""

    @admin.display(description=description, ordering=field)
    def column(self: admin.ModelAdmin, obj: Any) -> str:
        value = getattr(obj, field)
        return format_html('<span title="{}">{}</span>', value, str(value)[:SHORT_ID_CHARS])

    return column


def linked_id(field: str, model: str, *, description: str) -> Callable[[Any, Any], str]:
    """Another row's id (`field`, e.g. "request_id"), short, linking to its page; "—" for none."""

    @admin.display(description=description)
    def column(self: admin.ModelAdmin, obj: Any) -> str:
        value = getattr(obj, field)
        if value is None:
            return "—"
        url = reverse(f"admin:executions_{model}_change", args=[value])
        return format_html(
            '<a href="{}" title="{}">{}</a>', url, value, str(value)[:SHORT_ID_CHARS]
        )

    return column


def moment(field: str, *, description: str) -> Callable[[Any, Any], str]:
    """A moment as "2026-12-01 10:20:53 UTC (3 min ago)", or "—"."""

    @admin.display(description=f"{description} (UTC)", ordering=field)
    def column(self: admin.ModelAdmin, obj: Any) -> str:
        return display.at_and_ago(getattr(obj, field), timezone.now())

    return column


def long_value(field: str, *, description: str) -> Callable[[Any, Any], str]:
    """A hash or a key, cut short by the stylesheet (orquestador/static/orquestador/fit.css,
    `.long-value`) with the whole value in its title and its text, for hover and copy."""

    @admin.display(description=description, ordering=field)
    def column(self: Any, obj: Any) -> str:
        value = getattr(obj, field)
        if not value:
            return "—"
        return format_html('<span class="long-value" title="{}">{}</span>', value, value)

    return column
