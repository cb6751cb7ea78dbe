"""Read-only admin for flows, requests, executions, checkpoints and the audit trail.

Staff read them with the models' "view" permissions. Nobody adds, changes or deletes them here,
superusers included: flows are published through loadflow or the API, the rest is written only by
services and the worker, and the audit trail is append-only. The operators' writes live in the
reconciliation admin, behind their own permissions.
"""

import uuid
from typing import Any

from django.contrib import admin
from django.db.models import Q, QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html

from .models import ActionExecution, AuditEvent, Execution, ExecutionStatus, Flow, Request


def _as_uuid(text: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(text.strip())
    except ValueError:
        return None


class ReadOnlyAdmin(admin.ModelAdmin):
    """Viewable with the "view" permission; never added, changed or deleted through the admin."""

    actions = None
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER  # counting every filter choice would scan the table
    list_per_page = 50
    # Search terms that are UUIDs match these fields exactly; others go to search_fields.
    uuid_search_fields: tuple[str, ...] = ()

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet, search_term: str
    ) -> tuple[QuerySet, bool]:
        as_id = _as_uuid(search_term) if self.uuid_search_fields else None
        if as_id is not None:
            match = Q()
            for field in self.uuid_search_fields:
                match |= Q(**{field: as_id})
            return queryset.filter(match), False
        if not self.search_fields:
            return queryset, False
        return super().get_search_results(request, queryset, search_term)


class CheckpointInline(admin.TabularInline):
    model = ActionExecution
    fields = (
        "sequence",
        "action_id",
        "capability",
        "capability_version",
        "effect",
        "status",
        "attempt",
        "external_key",
        "input_hash",
        "fencing_token",
        "error_code",
        "started_at",
        "finished_at",
    )
    readonly_fields = fields
    ordering = ("sequence",)
    extra = 0
    can_delete = False
    show_change_link = True

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Flow)
class FlowAdmin(ReadOnlyAdmin):
    list_display = ("key", "version", "checksum", "published_at")
    list_filter = ("key",)
    search_fields = ("key",)
    ordering = ("key", "-version")


@admin.register(Request)
class RequestAdmin(ReadOnlyAdmin):
    list_display = ("id", "flow", "owner", "scope", "state", "revision", "blocked_by", "updated_at")
    list_filter = ("state",)
    list_select_related = ("flow", "blocked_by")
    search_fields = ("=owner", "=scope")
    search_help_text = "A request id, or an exact owner or scope."
    uuid_search_fields = ("id", "blocked_by_id")
    ordering = ("-created_at", "-id")


@admin.register(Execution)
class ExecutionAdmin(ReadOnlyAdmin):
    list_display = (
        "id",
        "request",
        "flow",
        "transition_id",
        "status",
        "attempts",
        "fencing_token",
        "error_code",
        "created_at",
        "finished_at",
        "case",
    )
    list_filter = ("status", "transition_id")
    list_select_related = ("flow", "request")
    search_fields = ("=error_code",)
    search_help_text = "An execution or request id, or an exact error code."
    uuid_search_fields = ("id", "request_id")
    ordering = ("-created_at", "-id")
    inlines = (CheckpointInline,)
    exclude = ("idempotency_fingerprint",)

    @admin.display(description="reconciliation")
    def case(self, obj: Execution) -> str:
        if obj.status != ExecutionStatus.RECONCILIATION_REQUIRED:
            return "—"
        url = reverse("admin:reconciliation_reconciliationcase_change", args=[obj.pk])
        return format_html('<a href="{}">open case</a>', url)


@admin.register(ActionExecution)
class ActionExecutionAdmin(ReadOnlyAdmin):
    list_display = (
        "execution",
        "sequence",
        "action_id",
        "capability",
        "capability_version",
        "effect",
        "status",
        "attempt",
        "external_key",
        "error_code",
        "started_at",
    )
    list_filter = ("status", "effect", "capability")
    list_select_related = ("execution",)
    search_fields = ("=external_key",)
    search_help_text = "An execution id, or an exact external key (executionId:actionId)."
    uuid_search_fields = ("execution_id",)
    ordering = ("-started_at", "-id")


@admin.register(AuditEvent)
class AuditEventAdmin(ReadOnlyAdmin):
    list_display = ("id", "type", "request", "execution", "actor", "created_at")
    list_filter = ("type",)
    list_select_related = ("request", "execution")
    search_fields = ("=actor",)
    search_help_text = "A request or execution id, or an exact actor."
    uuid_search_fields = ("request_id", "execution_id")
    ordering = ("-id",)
