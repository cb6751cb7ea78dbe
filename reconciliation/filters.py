"""Changelist filters of the reconciliation queues: status, flow, capability, age."""

from collections.abc import Iterator
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from django.contrib import admin
from django.db.models import Max, QuerySet
from django.http import HttpRequest
from django.utils import timezone

from executions.models import TERMINAL_STATUSES, ExecutionStatus, Flow

from .selectors import capabilities, with_capability

if TYPE_CHECKING:
    from django.contrib.admin.filters import _ListFilterChoices  # the stubs' name for a choice
    from django.contrib.admin.views.main import ChangeList

ALL = "all"
MAX_FLOW_KEY_CHARS = 100  # characters: the max_length of Flow.key
MAX_CAPABILITY_VERSION = 2**31 - 1  # integer column


def _bounded_int(text: str, maximum: int) -> int | None:
    """`text` as a non-negative integer up to `maximum`, or None: ASCII digits only (str.isdigit
    accepts '²', which int() refuses) and never longer than the column can hold."""
    if not (text.isascii() and text.isdigit()) or len(text) > len(str(maximum)):
        return None
    value = int(text)
    return value if value <= maximum else None


class StatusFilter(admin.SimpleListFilter):
    """Execution status; the queue opens on `default` rather than on everything."""

    title = "status"
    parameter_name = "status"
    field = "status"
    default: str | None = ExecutionStatus.RECONCILIATION_REQUIRED

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(status.value, status.value) for status in ExecutionStatus] + [(ALL, "All")]

    def current(self) -> str:
        return self.value() or self.default or ALL

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        value = self.current()
        if value == ALL:
            return queryset
        if value not in ExecutionStatus.values:
            return queryset.none()
        return queryset.filter(**{self.field: value})

    def choices(self, changelist: "ChangeList") -> "Iterator[_ListFilterChoices]":
        current = self.current()
        for lookup, title in self.lookup_choices:
            yield {
                "selected": current == lookup,
                "query_string": changelist.get_query_string({self.parameter_name: lookup}),
                "display": title,
            }


FINAL = TERMINAL_STATUSES


class BlockingStatusFilter(StatusFilter):
    """Only the statuses that hold a request: a final execution has released it."""

    title = "status of the blocking execution"
    field = "blocked_by__status"
    default = None

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(ALL, "All")] + [(s.value, s.value) for s in ExecutionStatus if s not in FINAL]


class FlowFilter(admin.SimpleListFilter):
    """By flow key, every version at once: a flow republished all day is still one choice."""

    title = "flow"
    parameter_name = "flow"
    field = "flow_id"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        # One row per key, read from the unique (key, version) index.
        keys = Flow.objects.order_by("key").values("key").annotate(latest=Max("version"))
        return [(row["key"], f"{row['key']} (latest v{row['latest']})") for row in keys]

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        value = self.value()
        if not value:
            return queryset
        if len(value) > MAX_FLOW_KEY_CHARS:
            return queryset.none()
        versions = Flow.objects.filter(key=value).values("pk")
        return queryset.filter(**{f"{self.field}__in": versions})


class CapabilityFilter(admin.SimpleListFilter):
    """Executions with a checkpoint of this `capability@version`."""

    title = "capability"
    parameter_name = "capability"
    execution_field = "pk"
    statuses: tuple[str, ...] = (ExecutionStatus.RECONCILIATION_REQUIRED,)

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(name, name) for name in capabilities(statuses=self.statuses)]

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        value = self.value()
        if not value:
            return queryset
        if (
            "@" not in value
            or _bounded_int(value.rpartition("@")[2], MAX_CAPABILITY_VERSION) is None
        ):
            return queryset.none()
        return with_capability(queryset, value, execution_field=self.execution_field)


class BlockingCapabilityFilter(CapabilityFilter):
    execution_field = "blocked_by_id"
    statuses = tuple(status for status in ExecutionStatus.values if status not in FINAL)


AGES = {
    "lt1h": ("less than an hour", None, timedelta(hours=1)),
    "1h-1d": ("1 hour to 1 day", timedelta(hours=1), timedelta(days=1)),
    "1d-7d": ("1 to 7 days", timedelta(days=1), timedelta(days=7)),
    "gt7d": ("more than 7 days", timedelta(days=7), None),
}


class AgeFilter(admin.SimpleListFilter):
    """How long ago the execution was created."""

    title = "age"
    parameter_name = "age"
    field = "created_at"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(key, label) for key, (label, _, _) in AGES.items()]

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        value = self.value()
        if not value:
            return queryset
        if value not in AGES:
            return queryset.none()
        _, at_least, less_than = AGES[value]
        now = timezone.now()
        if at_least is not None:
            queryset = queryset.filter(**{f"{self.field}__lte": now - at_least})
        if less_than is not None:
            queryset = queryset.filter(**{f"{self.field}__gt": now - less_than})
        return queryset


class BlockedAgeFilter(AgeFilter):
    """How long the request has been held: since its blocking execution was accepted."""

    title = "blocked for"
    field = "blocked_by__created_at"
