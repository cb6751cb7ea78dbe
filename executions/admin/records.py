"""Read-only admin for flows, requests, executions, checkpoints and the audit trail.

Staff read them with the models' "view" permissions. Nobody adds, changes or deletes them here,
superusers included: flows are published through loadflow or the API, the rest is written only by
services and the worker, and the audit trail is append-only. The one write here is the action
"Cancel execution", behind its own permission (`executions.cancel_execution`), which calls the
durable cancellation service; the operators' resolutions live in the reconciliation admin.
"""

import json
import uuid
from collections.abc import Sequence
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.core.exceptions import PermissionDenied
from django.db import models
from django.db.models import Q, QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.utils import timezone
from django.utils.html import format_html, format_html_join

from orquestador import display
from orquestador.errors import CodedError

from ..flows import amounts
from ..flows.compensations import compensated_action
from ..models import (
    ActionAttempt,
    ActionExecution,
    AuditEvent,
    Execution,
    ExecutionStatus,
    Flow,
    Request,
)
from ..pictures import insight
from ..queue.cancel import CANCELLABLE_STATUSES, MAX_REASON_CHARS, execution_cancel
from . import columns, pictures, search
from .caselinks import CASES_SHOWN, case_link, open_case_link, placed_after, with_cases

CANCEL_EXECUTION = "executions.cancel_execution"
PAYLOAD_SUMMARY_CHARS = 120  # characters of an audit payload in the audit events list
AMOUNT_CHARS = 80  # characters of an amount's raw value on hover
MOMENT_SUFFIX = "__utc"  # a detail page shows field `x` as `x__utc`: UTC to the second, its age


class CancelForm(forms.Form):
    reason = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 3, "cols": 80}),
        max_length=MAX_REASON_CHARS,
        strip=True,
        help_text="Required. Why these executions are stopped; it is kept in the audit trail.",
    )


def _as_uuid(text: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(text.strip())
    except ValueError:
        return None


class ViewOnly:
    """Never added, changed or deleted through a form: a mixin for model admins and inlines."""

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class ReadOnlyAdmin(ViewOnly, admin.ModelAdmin):
    """Viewable with the "view" permission; never added, changed or deleted through the admin."""

    actions: Sequence[str] | None = None
    change_form_template = "admin/readonly_change_form.html"  # no History: nothing is edited
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER  # counting every filter choice would scan the table
    list_per_page = 50
    # Search terms that are UUIDs match these fields exactly; others go to search_fields.
    uuid_search_fields: tuple[str, ...] = ()

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

    # A detail page shows every moment as the lists do, "2026-12-01 10:20:53 UTC (3 min ago)":
    # each date-time field leaves the form and comes back as a read-only `<name>__utc`.
    def _moment_fields(self) -> list[models.DateTimeField]:
        return [f for f in self.model._meta.concrete_fields if isinstance(f, models.DateTimeField)]

    def get_exclude(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return [
            *(super().get_exclude(request, obj) or ()),
            *(f.name for f in self._moment_fields()),
        ]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> tuple[str, ...]:
        moments = tuple(f.name + MOMENT_SUFFIX for f in self._moment_fields())
        return (*moments, *super().get_readonly_fields(request, obj))

    def __getattr__(self, name: str) -> Any:
        if not name.endswith(MOMENT_SUFFIX):
            raise AttributeError(name)
        field = self.model._meta.get_field(name.removesuffix(MOMENT_SUFFIX))
        column = columns.moment(field.name, description=str(field.verbose_name))
        return column.__get__(self)


# What a checkpoint is, as its execution's inline shows it first (the checkpoint list folds a few).
CHECKPOINT_COLUMNS = (
    "sequence",
    "action_id",
    "capability",
    "capability_version",
    "effect",
    "status",
    "attempt",
)


class CheckpointInline(ViewOnly, admin.TabularInline):
    model = ActionExecution
    fields = (
        *CHECKPOINT_COLUMNS,
        "external_key_short",
        "input_hash_short",
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
    # A key and a 64-character hash at full width pushed the table past a 1400 px window.
    external_key_short = columns.long_value("external_key", description="external key")
    input_hash_short = columns.long_value("input_hash", description="input hash")


@admin.register(Flow)
class FlowAdmin(pictures.DrawingAdmin, ReadOnlyAdmin):
    list_display = ("key", "version", "short_checksum", "published")
    list_filter = ("key",)
    search_fields = ("key",)
    ordering = ("key", "-version")
    published = columns.moment("published_at", description="published")
    short_checksum = columns.long_value("checksum", description="checksum")
    change_form_template = "admin/executions/flow/change_form.html"  # the state machine first
    exclude = ("definition",)  # shown indented and folded instead of on one line
    readonly_fields = ("definition_json",)

    @admin.display(description="definition")
    def definition_json(self, obj: Flow) -> str:
        definition = obj.definition if isinstance(obj.definition, dict) else {}
        return format_html(
            '<details id="flow-definition"><summary>{} states, {} transitions: show the JSON'
            "</summary><pre>{}</pre></details>",
            len(definition.get("states") or ()),
            len(definition.get("transitions") or ()),
            json.dumps(obj.definition, indent=2, ensure_ascii=False),
        )

    def drawing_context(self, obj: Flow) -> dict[str, Any]:
        return {"flow_drawing": pictures.flow_drawing(obj)}


@admin.register(Request)
class RequestAdmin(pictures.DrawingAdmin, ReadOnlyAdmin):
    list_display = (
        "short",
        "flow",
        "owner",
        "scope",
        "state",
        "revision",
        "blocking",
        "created",
        "updated",
    )
    list_filter = ("state",)
    list_select_related = ("flow",)
    search_fields = ("=owner", "=scope")
    search_help_text = (
        "A request id, an exact owner or scope, or the exact value of a field the case summary "
        "shows (a customer, a reference)."
    )
    uuid_search_fields = ("id", "blocked_by_id")
    ordering = ("-created_at", "-id")
    readonly_fields = ("cases", "money", "timeline")
    change_form_template = "admin/executions/request/change_form.html"  # where it stands, drawn
    short = columns.short_id()
    blocking = columns.linked_id("blocked_by_id", "execution", description="blocked by")
    created = columns.moment("created_at", description="created")
    updated = columns.moment("updated_at", description="updated")

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet, search_term: str
    ) -> tuple[QuerySet, bool]:
        term = search_term.strip()
        if not term or _as_uuid(term) is not None:
            return super().get_search_results(request, queryset, search_term)
        # Each part is served by an index: the owner's and the tenant's, and the data's.
        match = Q(owner=term) | Q(scope=term)
        summary = search.summary_match(term)
        return queryset.filter(match | summary if summary is not None else match), False

    @admin.display(description="amounts")
    def money(self, obj: Request) -> str:
        """The data's amounts as the flow declares them (display.amounts), raw values on hover."""
        found = amounts.amounts(obj.flow.definition, obj.data, AMOUNT_CHARS)
        return format_html_join(", ", "{} {}", found) or "—"

    @admin.display(description="timeline (UTC)")
    def timeline(self, obj: Request) -> str:
        return insight.timeline_html(obj.pk)

    def get_fields(self, request: HttpRequest, obj: Any = None) -> list[Any]:
        return placed_after(super().get_fields(request, obj), ["cases"], "blocked_by")

    @admin.display(description="reconciliation cases")
    def cases(self, obj: Request) -> str:
        """Its executions that are or were a case, each linked to its case page, latest first:
        what blocks it now, when an operator is needed, comes first."""
        found = list(
            with_cases(Execution.objects.filter(request_id=obj.pk))
            .only("id", "status", "created_at")
            .order_by("-created_at", "-id")[:CASES_SHOWN]
        )
        if not found:
            return "—"
        return format_html_join(" · ", "{}", ((case_link(e),) for e in found))

    def drawing_context(self, obj: Request) -> dict[str, Any]:
        return {"flow_drawing": pictures.request_drawing(obj)}


@admin.register(Execution)
class ExecutionAdmin(pictures.DrawingAdmin, ReadOnlyAdmin):
    # What an operator scans for first comes first: a wide list scrolls sideways at 1400 px.
    list_display = (
        "short",
        "status",
        "case",
        "error_code",
        "request_link",
        "flow",
        "transition_id",
        "attempts",
        "created",
        "finished",
    )
    list_filter = ("status", "transition_id")
    list_select_related = ("flow",)
    search_fields = ("=error_code",)
    search_help_text = "An execution or request id, or an exact error code."
    uuid_search_fields = ("id", "request_id")
    ordering = ("-created_at", "-id")
    inlines = (CheckpointInline,)
    exclude = ("idempotency_fingerprint",)
    readonly_fields = (
        "reconciliation_case",
        "compensation_errors",
        "lease_now",
        "takeovers",
        "timeline",
    )
    change_form_template = "admin/executions/execution/change_form.html"  # its timeline first
    # The change list's columns (ids cut short and linked, moments in UTC with their age).
    short = columns.short_id()
    request_link = columns.linked_id("request_id", "request", description="request")
    created = columns.moment("created_at", description="created")
    finished = columns.moment("finished_at", description="finished")

    @admin.display(description="next attempt at (UTC)")
    def next_attempt_at__utc(self, obj: Execution) -> str:
        """When the claim may take it, for the statuses that have a next attempt; a finished
        execution keeps the column's last value, which is no promise of anything."""
        if obj.status in (ExecutionStatus.PENDING, ExecutionStatus.RETRY_WAIT):
            return display.at_and_ago(obj.next_attempt_at, timezone.now())
        if obj.status == ExecutionStatus.SUSPENDED:
            moment = display.at_and_ago(obj.next_attempt_at, timezone.now())
            return f"— (suspended; its wait's deadline is {moment})"
        if obj.status == ExecutionStatus.RUNNING:
            return "— (running; see the lease below)"
        return f"— ({obj.status}: no next attempt)"

    def drawing_context(self, obj: Execution) -> dict[str, Any]:
        return {"timeline_drawing": pictures.timeline_drawing(obj, now=timezone.now())}

    def get_fields(self, request: HttpRequest, obj: Any = None) -> list[Any]:
        fields = placed_after(super().get_fields(request, obj), ["reconciliation_case"], "request")
        return placed_after(fields, ["compensation_errors"], "compensation_detail")

    @admin.display(description="compensation steps' errors")
    def compensation_errors(self, obj: Execution) -> str:
        """The errors of its compensation steps, apart from its own error (the failure that
        started the compensation): the earlier attempts' errors, then each step's latest."""
        if obj.compensation_cause is None:
            return "—"
        steps = [
            c
            for c in ActionExecution.objects.filter(execution=obj).order_by("sequence")
            if compensated_action(c.action_id) is not None
        ]
        earlier = ActionAttempt.objects.filter(
            execution=obj, action_id__in=[c.action_id for c in steps]
        ).order_by("action_id", "attempt")
        lines = [
            (f"{a.action_id} attempt {a.attempt}: {a.status} {a.error_code or ''}".rstrip(),)
            for a in earlier
        ]
        lines += [
            (
                f"{c.action_id} attempt {c.attempt}: {c.status} {c.error_code}"
                + (f": {c.error_detail}" if c.error_detail else ""),
            )
            for c in steps
            if c.error_code
        ]
        return format_html_join("", "<p>{}</p>", lines) or "none"

    @admin.display(description="lease now")
    def lease_now(self, obj: Execution) -> str:
        return insight.lease_sentence(obj, timezone.now())

    @admin.display(description="lease takeovers")
    def takeovers(self, obj: Execution) -> str:
        return (
            format_html_join(
                "", "<p>{}</p>", ((line,) for line in insight.execution_takeovers(obj))
            )
            or "—"
        )

    @admin.display(description="timeline of the request (UTC)")
    def timeline(self, obj: Execution) -> str:
        return insight.timeline_html(obj.request_id)

    actions = ("cancel_execution",)

    def has_cancel_execution_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm(CANCEL_EXECUTION)

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        # A POST naming the action without its permission is refused, not silently ignored.
        if request.method == "POST" and "cancel_execution" in request.POST.getlist("action"):
            if not self.has_cancel_execution_permission(request):
                raise PermissionDenied
        return super().changelist_view(request, extra_context)

    @admin.action(permissions=["cancel_execution"], description="Cancel execution")
    def cancel_execution(self, request: HttpRequest, queryset: QuerySet) -> HttpResponse | None:
        executions = list(
            queryset.filter(status__in=CANCELLABLE_STATUSES)
            .select_related("flow")
            .order_by("created_at", "id")
        )
        if not executions:
            self.message_user(
                request,
                "Nothing to cancel: none of the selected executions is PENDING, RUNNING, "
                "RETRY_WAIT or SUSPENDED (an execution in reconciliation is settled there).",
                messages.WARNING,
            )
            return None
        form = CancelForm(request.POST if "post" in request.POST else None)
        if form.is_valid():
            actor = request.user.get_username()
            counts: dict[str, int] = {
                ExecutionStatus.CANCELLED: 0,
                ExecutionStatus.RECONCILIATION_REQUIRED: 0,
                ExecutionStatus.PENDING: 0,  # requeued to compensate its writes
            }
            for execution in executions:
                try:
                    result = execution_cancel(
                        execution_id=execution.pk, actor=actor, reason=form.cleaned_data["reason"]
                    )
                except CodedError as exc:  # it ended meanwhile
                    self.message_user(
                        request, f"Execution {execution.pk}: {exc.detail}", messages.ERROR
                    )
                else:
                    counts[result.status] += 1
            self.message_user(
                request,
                f"Cancelled {counts[ExecutionStatus.CANCELLED]} execution(s); "
                f"{counts[ExecutionStatus.RECONCILIATION_REQUIRED]} had a write done or pending "
                f"and went to reconciliation; {counts[ExecutionStatus.PENDING]} will compensate "
                "their writes. Recorded in the audit trail.",
                messages.SUCCESS,
            )
            return None
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": "Cancel execution",
            "subtitle": None,
            "executions": executions,
            "form": form if form.is_bound else CancelForm(),
            "selected_name": helpers.ACTION_CHECKBOX_NAME,
        }
        return TemplateResponse(request, "admin/executions/cancel.html", context)

    @admin.display(description="reconciliation")
    def case(self, obj: Execution) -> str:
        return open_case_link(obj)

    @admin.display(description="reconciliation case")
    def reconciliation_case(self, obj: Execution) -> str:
        """Its case, waiting or resolved (the list's column shows only a waiting one)."""
        if not with_cases(Execution.objects.filter(pk=obj.pk)).exists():
            return "—"
        return case_link(obj)


@admin.register(ActionExecution)
class ActionExecutionAdmin(ReadOnlyAdmin):
    # The action is in the checkpoint's name and the capability carries its version, as on the
    # case page: one column each fewer, so the list fits 1400 px beside its filters.
    list_display = (
        "checkpoint",
        "execution_link",
        "sequence",
        "capability_at",
        "effect",
        "status",
        "attempt",
        "error_code",
        "started",
    )
    list_filter = ("status", "effect", "capability")
    search_fields = ("=external_key",)
    search_help_text = "An execution id, or an exact external key (executionId:actionId)."
    uuid_search_fields = ("execution_id",)
    ordering = ("-started_at", "-id")
    execution_link = columns.linked_id("execution_id", "execution", description="execution")
    started = columns.moment("started_at", description="started")

    @admin.display(description="capability", ordering="capability")
    def capability_at(self, obj: ActionExecution) -> str:
        return f"{obj.capability}@{obj.capability_version}"

    @admin.display(description="checkpoint", ordering="external_key")
    def checkpoint(self, obj: ActionExecution) -> str:
        """Its external key with the execution id cut short (the whole key in its title)."""
        short = str(obj.execution_id)[: columns.SHORT_ID_CHARS]
        return format_html('<span title="{}">{}:{}</span>', obj.external_key, short, obj.action_id)


@admin.register(AuditEvent)
class AuditEventAdmin(ReadOnlyAdmin):
    list_display = (
        "id",
        "type",
        "request_link",
        "execution_link",
        "actor",
        "created",
        "payload_summary",
    )
    list_filter = ("type",)
    search_fields = ("=actor",)
    search_help_text = "A request or execution id, or an exact actor."
    uuid_search_fields = ("request_id", "execution_id")
    ordering = ("-id",)
    request_link = columns.linked_id("request_id", "request", description="request")
    execution_link = columns.linked_id("execution_id", "execution", description="execution")
    created = columns.moment("created_at", description="created")

    @admin.display(description="payload")
    def payload_summary(self, obj: AuditEvent) -> str:
        text = json.dumps(obj.payload, sort_keys=True, ensure_ascii=False)
        return (
            text if len(text) <= PAYLOAD_SUMMARY_CHARS else text[: PAYLOAD_SUMMARY_CHARS - 1] + "…"
        )
