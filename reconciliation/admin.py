"""The reconciliation admin: the queue of cases, the case page, the blocked requests.

Everything here reads through selectors and writes through services. The resolutions are admin
actions, each guarded by its own permission (`@admin.action(permissions=[...])`, backed by
`has_<name>_permission`); the case page's buttons post to the same actions, so there is one path
to every write. A POST naming an action the user lacks is refused with 403, not ignored. Cases
are never added, changed or deleted through a form.
"""

import json
from typing import Any

from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.db.models import Q, QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.html import format_html

from executions.models import ExecutionStatus

from . import filters, permissions, selectors, services
from .forms import ResolutionForm, WriteHappenedForm
from .models import BlockedRequest, ReconciliationCase

OPEN = ExecutionStatus.RECONCILIATION_REQUIRED


def _case_url(execution_id: Any) -> str:
    return reverse("admin:reconciliation_reconciliationcase_change", args=[execution_id])


def _search(queryset: QuerySet, term: str, *, execution_field: str, request_field: str):
    """By request id (or execution id), or by a checkpoint's external key."""
    term = term.strip()
    if not term:
        return queryset
    as_id = selectors.as_uuid(term)
    if as_id is not None:
        return queryset.filter(Q(**{request_field: as_id}) | Q(**{execution_field: as_id}))
    return selectors.with_external_key(queryset, term, execution_field=execution_field)


@admin.register(ReconciliationCase)
class ReconciliationCaseAdmin(admin.ModelAdmin):
    list_display = (
        "case",
        "request_link",
        "flow",
        "transition_id",
        "status",
        "error_code",
        "attempts",
        "created_at",
    )
    list_filter = (
        filters.StatusFilter,
        filters.FlowFilter,
        filters.CapabilityFilter,
        filters.AgeFilter,
    )
    search_fields = ("id",)  # shows the box; get_search_results decides what a term means
    search_help_text = "A request id, an execution id, or an external key (executionId:actionId)."
    ordering = selectors.QUEUE_ORDER
    sortable_by = ()  # one order, the index's, so paging stays cheap and stable
    list_per_page = 50
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER  # counting every filter choice would scan the queue
    actions = (
        "fetch_provider_evidence",
        "resolve_write_happened",
        "resolve_write_not_happened",
        "abandon_execution",
    )

    # --- Reading ----------------------------------------------------------------------------

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        return selectors.cases()

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet, search_term: str
    ) -> tuple[QuerySet, bool]:
        return _search(
            queryset, search_term, execution_field="pk", request_field="request_id"
        ), False

    @admin.display(description="case", ordering="created_at")
    def case(self, obj: ReconciliationCase) -> str:
        return str(obj.pk)

    @admin.display(description="request")
    def request_link(self, obj: ReconciliationCase) -> str:
        url = reverse("admin:executions_request_change", args=[obj.request_id])
        return format_html('<a href="{}">{}</a>', url, obj.request_id)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_fetch_provider_evidence_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm(permissions.FETCH_PROVIDER_EVIDENCE)

    def has_resolve_write_happened_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm(permissions.RESOLVE_WRITE_HAPPENED)

    def has_resolve_write_not_happened_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm(permissions.RESOLVE_WRITE_NOT_HAPPENED)

    def has_abandon_execution_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm(permissions.ABANDON_EXECUTION)

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict | None = None,
    ) -> HttpResponse:
        """The case page: evidence, lookups, the audit timeline, and the permitted resolutions."""
        if request.method != "GET":
            raise PermissionDenied  # every write goes through the guarded actions
        obj = self.get_object(request, unquote(object_id))
        if obj is None:
            return self._get_obj_does_not_exist_redirect(request, self.opts, object_id)
        if not self.has_view_permission(request, obj):
            raise PermissionDenied
        case = selectors.case_detail(execution_id=obj.pk)
        action_ids = [view.checkpoint.action_id for view in case.uncertain]
        may = {
            "lookup": self.has_fetch_provider_evidence_permission(request),
            "happened": self.has_resolve_write_happened_permission(request),
            "not_happened": self.has_resolve_write_not_happened_permission(request),
            "abandon": self.has_abandon_execution_permission(request),
        }
        prefill = {}
        if len(action_ids) == 1:
            lookup = case.latest_lookup(action_ids[0])
            # Offer the provider's record only when it would pass the output schema.
            if lookup and lookup.get("happened") and lookup.get("outputValid"):
                prefill["output"] = _json(lookup["output"])
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": f"Reconciliation case {obj.pk}",
            "subtitle": None,
            "case": case,
            "may": may,
            "changelist_url": reverse("admin:reconciliation_reconciliationcase_changelist"),
            "selected_name": helpers.ACTION_CHECKBOX_NAME,
            "happened_form": WriteHappenedForm(
                action_ids=action_ids, initial=prefill, auto_id="happened_%s"
            ),
            "not_happened_form": ResolutionForm(action_ids=action_ids, auto_id="not_happened_%s"),
            "abandon_form": ResolutionForm(auto_id="abandon_%s"),
            **(extra_context or {}),
        }
        return TemplateResponse(request, "admin/reconciliation/case.html", context)

    # --- Writing: admin actions, each behind its permission -----------------------------------

    def changelist_view(self, request: HttpRequest, extra_context: dict | None = None):
        if request.method == "POST":
            allowed = self.get_actions(request)
            named = request.POST.getlist("action")
            if any(name in self.actions and name not in allowed for name in named):
                raise PermissionDenied
        return super().changelist_view(request, extra_context)

    def _back(self, request: HttpRequest, ids: list[Any]) -> HttpResponseRedirect | None:
        """After an action: to the case page when it was about one case, else the queue."""
        if len(ids) == 1:
            return HttpResponseRedirect(_case_url(ids[0]))
        return None

    def _open(self, request: HttpRequest, queryset: QuerySet) -> list[ReconciliationCase]:
        """Narrow to cases that can still be resolved, and say so when that leaves none."""
        cases = list(queryset.filter(status=OPEN).order_by(*selectors.QUEUE_ORDER))
        if not cases:
            self.message_user(
                request,
                "Nothing to resolve: none of the selected executions is in "
                "RECONCILIATION_REQUIRED (already resolved?).",
                messages.WARNING,
            )
        return cases

    @admin.action(
        permissions=["fetch_provider_evidence"],
        description="Ask the provider whether the write happened (stored as evidence)",
    )
    def fetch_provider_evidence(self, request: HttpRequest, queryset: QuerySet):
        selected = list(queryset.values_list("pk", flat=True))
        cases = self._open(request, queryset)
        only = request.POST.get("action_id")
        for case in cases:
            detail = selectors.case_detail(execution_id=case.pk)
            action_ids = [view.checkpoint.action_id for view in detail.uncertain]
            if only:
                action_ids = [a for a in action_ids if a == only]
            if not action_ids:
                self.message_user(
                    request, f"{case.pk}: no uncertain action to ask about.", messages.WARNING
                )
            for action_id in action_ids:
                try:
                    event = services.checkpoint_record_lookup(
                        execution_id=case.pk, action_id=action_id, operator=request.user
                    )
                except services.ResolutionRefused as exc:
                    self.message_user(
                        request, f"{case.pk} {action_id}: {exc.message}", messages.ERROR
                    )
                else:
                    self.message_user(
                        request,
                        f"{case.pk} {action_id}: {_lookup_summary(event.payload)} "
                        "Recorded as evidence.",
                        messages.SUCCESS,
                    )
        return self._back(request, selected)

    @admin.action(
        permissions=["resolve_write_happened"],
        description="Resolve: the write happened (record its output, continue)",
    )
    def resolve_write_happened(self, request: HttpRequest, queryset: QuerySet):
        return self._resolve(
            request,
            queryset,
            name="resolve_write_happened",
            form_class=WriteHappenedForm,
            one_action=True,
            title="The write happened",
            explanation="The uncertain action is recorded SUCCEEDED with the output below, and "
            "the execution goes back to the queue; the worker reuses that output and does not "
            "call the provider for this action again.",
            apply=lambda case, data, user: services.execution_resolve_write_happened(
                execution_id=case.pk,
                action_id=data["action_id"],
                output=data["output"],
                reason=data["reason"],
                operator=user,
            ),
        )

    @admin.action(
        permissions=["resolve_write_not_happened"],
        description="Resolve: the write did not happen (replay it once, same external key)",
    )
    def resolve_write_not_happened(self, request: HttpRequest, queryset: QuerySet):
        return self._resolve(
            request,
            queryset,
            name="resolve_write_not_happened",
            form_class=ResolutionForm,
            one_action=True,
            title="The write did not happen",
            explanation="The uncertain action is recorded FAILED with REPLAY_AUTHORIZED, and the "
            "execution goes back to the queue; the worker calls the provider for this action "
            "once more, with the same external key (Idempotency-Key).",
            apply=lambda case, data, user: services.execution_resolve_write_not_happened(
                execution_id=case.pk,
                action_id=data["action_id"],
                reason=data["reason"],
                operator=user,
            ),
        )

    @admin.action(
        permissions=["abandon_execution"],
        description="Abandon: end FAILED and release the request",
    )
    def abandon_execution(self, request: HttpRequest, queryset: QuerySet):
        return self._resolve(
            request,
            queryset,
            name="abandon_execution",
            form_class=ResolutionForm,
            one_action=False,
            title="Abandon",
            explanation="Each execution ends FAILED (RECONCILIATION_ABANDONED) and its request is "
            "released with its data, state and revision as they were. Nothing is replayed and "
            "nothing is recorded as done: whatever the provider did stays as it is.",
            apply=lambda case, data, user: services.execution_abandon(
                execution_id=case.pk, reason=data["reason"], operator=user
            ),
        )

    def _resolve(
        self,
        request: HttpRequest,
        queryset: QuerySet,
        *,
        name: str,
        form_class: type[ResolutionForm],
        one_action: bool,
        title: str,
        explanation: str,
        apply: Any,
    ):
        selected = list(queryset.values_list("pk", flat=True))
        cases = self._open(request, queryset)
        if not cases:
            return self._back(request, selected)
        action_ids = None
        if one_action:
            # Settling an action needs evidence about that one write: one case at a time.
            if len(cases) != 1:
                self.message_user(
                    request, "Choose exactly one case for this resolution.", messages.ERROR
                )
                return None
            detail = selectors.case_detail(execution_id=cases[0].pk)
            action_ids = [view.checkpoint.action_id for view in detail.uncertain]
            if not action_ids:
                self.message_user(
                    request,
                    "This case has no RUNNING or UNKNOWN action to settle; only abandoning "
                    "applies.",
                    messages.ERROR,
                )
                return self._back(request, selected)
        if "post" in request.POST:
            form = form_class(request.POST, action_ids=action_ids)
            if form.is_valid():
                done = []
                for case in cases:
                    try:
                        apply(case, form.cleaned_data, request.user)
                    except services.ResolutionRefused as exc:
                        self.message_user(request, f"{case.pk}: {exc.message}", messages.ERROR)
                    else:
                        done.append(case.pk)
                if done:
                    self.message_user(
                        request,
                        f"{title}: resolved {len(done)} case(s), recorded in the audit trail.",
                        messages.SUCCESS,
                    )
                return self._back(request, selected)
        else:
            form = form_class(action_ids=action_ids)
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": title,
            "subtitle": None,
            "explanation": explanation,
            "cases": cases,
            "form": form,
            "action_name": name,
            "selected_name": helpers.ACTION_CHECKBOX_NAME,
        }
        return TemplateResponse(request, "admin/reconciliation/resolve.html", context)


def _json(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)


def _lookup_summary(payload: dict[str, Any]) -> str:
    happened = payload.get("happened")
    if happened is True:
        return "the provider says the write happened."
    if happened is False:
        return "the provider says the write did not happen."
    return "the provider's answer settles nothing" + (
        f" ({payload['detail']})." if payload.get("detail") else "."
    )


@admin.register(BlockedRequest)
class BlockedRequestAdmin(admin.ModelAdmin):
    list_display = (
        "request_link",
        "flow",
        "state",
        "revision",
        "blocking",
        "blocking_status",
        "since",
    )
    list_filter = (
        filters.BlockingStatusFilter,
        filters.FlowFilter,
        filters.BlockingCapabilityFilter,
        filters.BlockedAgeFilter,
    )
    search_fields = ("id",)
    search_help_text = "A request id, an execution id, or an external key (executionId:actionId)."
    ordering = ("updated_at", "id")
    sortable_by = ()
    list_per_page = 50
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER  # counting every filter choice would scan the queue
    actions = None

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        return selectors.blocked_requests()

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet, search_term: str
    ) -> tuple[QuerySet, bool]:
        return (
            _search(queryset, search_term, execution_field="blocked_by_id", request_field="pk"),
            False,
        )

    @admin.display(description="request")
    def request_link(self, obj: BlockedRequest) -> str:
        url = reverse("admin:executions_request_change", args=[obj.pk])
        return format_html('<a href="{}">{}</a>', url, obj.pk)

    @admin.display(description="blocked by")
    def blocking(self, obj: BlockedRequest) -> str:
        execution = obj.blocked_by
        if execution.status == OPEN:
            return format_html('<a href="{}">case {}</a>', _case_url(execution.pk), execution.pk)
        url = reverse("admin:executions_execution_change", args=[execution.pk])
        return format_html('<a href="{}">{}</a>', url, execution.pk)

    @admin.display(description="execution status")
    def blocking_status(self, obj: BlockedRequest) -> str:
        return obj.blocked_by.status

    @admin.display(description="last change")
    def since(self, obj: BlockedRequest) -> Any:
        return obj.updated_at

    def get_list_display_links(self, request: HttpRequest, list_display: Any) -> None:
        return None  # the columns link to the request and to the case

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
