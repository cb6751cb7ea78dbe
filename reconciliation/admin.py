"""The reconciliation admin: the queue of cases, the case page, the blocked requests.

Everything here reads through selectors; every write is an admin action of adminactions.py
(each behind its own permission) calling a service, and the case page's buttons, one form per
resolution of resolutions.py the operator may apply, post to those same actions. Cases are never
added, changed or deleted through a form.
"""

from typing import Any

from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.db.models import Q, QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join

from executions.admin import search
from executions.admin.records import ViewOnly
from executions.models import AuditType, ExecutionStatus, Request
from executions.pictures.insight import takeover_sentence
from orquestador import display
from orquestador.display import clip

from . import approvals, casepage, explain, filters, insight, keptforms, selectors
from .adminactions import CaseActions, case_url
from .adminproposals import ProposalViews, approval_risk
from .forms import DecisionForm
from .models import BlockedRequest, ReconciliationCase, WorkerProcess
from .routeadmin import RouteControls

OPEN = ExecutionStatus.RECONCILIATION_REQUIRED
PROPOSED = AuditType.RECONCILIATION_PROPOSED  # a replay awaiting a second operator's approval
QUEUE_DETAIL_CHARS = 160  # characters of an error detail in a queue row
QUEUE_HOVER_CHARS = 1000  # characters of it on hover

# The admin home opens on the desk's state (templates/admin/operations_index.html); there is no
# public site behind "View site".
admin.site.index_template = "admin/operations_index.html"
admin.site.site_url = None

# No navigation sidebar: it took a quarter of a 1400 px window on every page, pushing the lists'
# columns into a sideways scroll; the breadcrumbs and the home page lead everywhere it did.
admin.site.enable_nav_sidebar = False


def _search(
    queryset: QuerySet[Any], term: str, *, execution_field: str, request_field: str
) -> QuerySet[Any]:
    """By request id (or execution id), by a checkpoint's external key, or by the exact value of a
    case-summary field (a customer, a reference: executions/admin/search.py)."""
    term = term.strip()
    if not term:
        return queryset
    as_id = selectors.as_uuid(term)
    if as_id is not None:
        return queryset.filter(Q(**{request_field: as_id}) | Q(**{execution_field: as_id}))
    keyed = selectors.with_external_key(queryset, term, execution_field=execution_field)
    summary = search.summary_match(term)
    if summary is None:
        return keyed
    requests = Request.objects.filter(summary).values("pk")
    return keyed | queryset.filter(**{f"{request_field}__in": requests})


@admin.register(ReconciliationCase)
class ReconciliationCaseAdmin(ViewOnly, ProposalViews, CaseActions, admin.ModelAdmin):
    list_display = (
        "case",
        "waiting",
        "flow",
        "summary",
        "why",
        "lookup",
        "status",
        "created",
    )
    list_filter = (
        filters.StatusFilter,
        filters.FlowFilter,
        filters.CapabilityFilter,
        filters.AgeFilter,
    )
    search_fields = ("id",)  # shows the box; get_search_results decides what a term means
    search_help_text = (
        "A request id, an execution id, an external key (executionId:actionId), or the exact "
        "value of a summary field (a customer, a reference)."
    )
    ordering = selectors.QUEUE_ORDER
    sortable_by = ()  # one order, the index's, so paging stays cheap and stable
    list_per_page = 50
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER  # counting every filter choice would scan the queue
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
        short = format_html('<span title="{}">{}</span>', obj.pk, str(obj.pk)[:8])
        if obj.status == OPEN and getattr(obj, "latest_decision", None) == PROPOSED:
            return format_html("{}<br><strong>replay proposed</strong>", short)
        return short

    @admin.display(description="waiting")
    def waiting(self, obj: ReconciliationCase) -> str:
        if obj.status != OPEN:
            return "—"
        return display.age((timezone.now() - obj.created_at).total_seconds())

    @admin.display(description="request data")
    def summary(self, obj: ReconciliationCase) -> str:
        fields = explain.summary_fields(obj.flow.definition, obj.request.data)
        return explain.summary_line(fields) or "—"

    @admin.display(description="why")
    def why(self, obj: ReconciliationCase) -> str:
        code = obj.error_code or "—"
        if not obj.error_detail:
            return code
        return format_html(
            '<span title="{}">{}: {}</span>',
            clip(obj.error_detail, QUEUE_HOVER_CHARS),
            code,
            clip(obj.error_detail, QUEUE_DETAIL_CHARS),
        )

    @admin.display(description="provider")
    def lookup(self, obj: ReconciliationCase) -> str:
        if not getattr(obj, "lookup_asked", False):
            return explain.NOT_ASKED
        return explain.lookup_status({"happened": getattr(obj, "lookup_happened", None)})

    @admin.display(description="created (UTC)", ordering="created_at")
    def created(self, obj: ReconciliationCase) -> str:
        return display.utc(obj.created_at).removesuffix(" UTC")

    @admin.display(description="resolved by")
    def resolved_by(self, obj: ReconciliationCase) -> str:
        return getattr(obj, "resolved_by", None) or "—"

    @admin.display(description="how")
    def resolved_how(self, obj: ReconciliationCase) -> str:
        how = getattr(obj, "resolved_how", None)
        return casepage.RESOLUTION_WORDS.get(how, how) if how else "—"

    def get_list_display(self, request: HttpRequest) -> tuple[str, ...]:
        """The waiting queue as it is; the resolved cases say who resolved each, and how, in
        place of the wait and the lookup only an open case has (both kept for "All")."""
        status = request.GET.get(filters.StatusFilter.parameter_name, OPEN)
        if status == OPEN:
            return tuple(self.list_display)
        dropped = () if status == filters.ALL else ("waiting", "lookup")
        shown = [name for name in self.list_display if name not in dropped]
        return (*shown[:-1], "resolved_by", "resolved_how", shown[-1])

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
        kept = keptforms.take(request, obj.pk)
        return self.render_case(
            request, obj.pk, bound=self._rebound(obj.pk, *kept) if kept else None
        )

    def _rebound(self, execution_id: Any, name: str, data: Any) -> dict[str, Any] | None:
        """A refused form again (keptforms.py), bound to what the operator typed and checked
        against the case as it is now, so its errors are said as at the post."""
        case = selectors.case_detail(execution_id=execution_id)
        if name == "decide":  # adminproposals.py's decision on a proposed replay
            proposal = approvals.pending_proposal(execution_id=execution_id)
            approve = data.get("decision") == "approve"
            risk = approval_risk(case, proposal) if approve and proposal else None
            form: Any = DecisionForm(data, risks={"": risk}, auto_id="decide_%s")
        elif name in casepage.BY_NAME:
            form = casepage.resolution_form(casepage.BY_NAME[name], case, data)
        else:
            return None
        form.is_valid()
        return {name: form}

    def render_case(
        self, request: HttpRequest, execution_id: Any, *, bound: dict | None = None
    ) -> TemplateResponse:
        """The case page, with `bound` forms (by resolution name) kept as the operator typed;
        a refused one is also said at the top, where the page opens."""
        refused = casepage.refusal(bound)
        if refused is not None:
            self.message_user(request, refused, messages.ERROR)
        case = selectors.case_detail(execution_id=execution_id)
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": f"Reconciliation case {case.execution.pk}",
            "subtitle": None,
            "may_lookup": self.has_fetch_provider_evidence_permission(request),
            **casepage.case_context(
                request,
                case,
                may_lookup=self.has_fetch_provider_evidence_permission(request),
                bound=bound,
            ),
        }
        return TemplateResponse(request, "admin/reconciliation/case.html", context)


@admin.register(BlockedRequest)
class BlockedRequestAdmin(ViewOnly, admin.ModelAdmin):
    """Requests held by an execution: what holds each, doing what, and since when."""

    # What an operator scans for first comes first: a wide list scrolls sideways at 1400 px.
    list_display = (
        "request_link",
        "doing",
        "blocking",
        "blocked_since",
        "where",
        "flow",
        "changed",
    )
    list_filter = (
        filters.BlockingStatusFilter,
        filters.FlowFilter,
        filters.BlockingCapabilityFilter,
        filters.BlockedAgeFilter,
    )
    search_fields = ("id",)
    search_help_text = (
        "A request id, an execution id, an external key (executionId:actionId), or the exact "
        "value of a summary field (a customer, a reference)."
    )
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
        return format_html('<a href="{}" title="{}">{}</a>', url, obj.pk, str(obj.pk)[:8])

    @admin.display(description="state")
    def where(self, obj: BlockedRequest) -> str:
        return f"{obj.state} (revision {obj.revision})"

    @admin.display(description="blocked by")
    def blocking(self, obj: BlockedRequest) -> str:
        execution = obj.blocked_by
        if execution is None:  # the list holds only blocked requests (selectors.blocked_requests)
            return "—"
        short = str(execution.pk)[:8]
        if execution.status == OPEN:
            url, text = case_url(execution.pk), f"case {short}"
        else:
            url = reverse("admin:executions_execution_change", args=[execution.pk])
            text = f"execution {short}"
        return format_html(
            '<a href="{}" title="{}">{}</a> · {}', url, execution.pk, text, execution.transition_id
        )

    @admin.display(description="what blocks it")
    def doing(self, obj: BlockedRequest) -> str:
        return explain.blocking(obj.blocked_by, timezone.now())

    @admin.display(description="blocked since (UTC)")
    def blocked_since(self, obj: BlockedRequest) -> str:
        if obj.blocked_by is None:  # as in blocking()
            return "—"
        return display.at_and_ago(obj.blocked_by.created_at, timezone.now())

    @admin.display(description="request last changed (UTC)")
    def changed(self, obj: BlockedRequest) -> str:
        return display.at_and_ago(obj.updated_at, timezone.now())

    # None, unlike an empty list, links no column (the stubs allow only a list or a tuple).
    def get_list_display_links(  # type: ignore[override]
        self, request: HttpRequest, list_display: Any
    ) -> None:
        return None  # the columns link to the request and to the case


@admin.register(WorkerProcess)
class WorkerProcessAdmin(RouteControls, ViewOnly, admin.ModelAdmin):
    """Every runworker as it last reported itself: live, silent, gone or stopped, and what it
    holds."""

    list_display = (
        "owner",
        "state",
        "seen",
        "host",
        "pid",
        "started",
        "concurrency",
        "running",
        "holds",
        "takeovers",
        "version",
    )
    ordering = ("-last_seen_at",)
    sortable_by = ()
    list_per_page = 100
    change_list_template = "admin/reconciliation/workerprocess/change_list.html"  # routes atop
    show_full_result_count = False
    actions = None

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        # One read of who holds what for the whole page (insight.workers), not one per row.
        self._views = {view.worker.owner: view for view in insight.workers()}
        return super().changelist_view(request, extra_context)

    def _view(self, obj: WorkerProcess) -> insight.WorkerView | None:
        return getattr(self, "_views", {}).get(obj.owner)

    @admin.display(description="state")
    def state(self, obj: WorkerProcess) -> str:
        return insight.state_of(obj, timezone.now())

    @admin.display(description="last seen")
    def seen(self, obj: WorkerProcess) -> str:
        ago = display.age((timezone.now() - obj.last_seen_at).total_seconds())
        return f"{ago} ago ({display.utc(obj.last_seen_at)})"

    @admin.display(description="started (UTC)")
    def started(self, obj: WorkerProcess) -> str:
        return display.utc(obj.started_at).removesuffix(" UTC")

    @admin.display(description="holds")
    def holds(self, obj: WorkerProcess) -> str:
        view = self._view(obj)
        if view is None or not view.holding:
            return "—"
        return format_html_join(
            " ",
            '<a href="{}" title="{}">{}</a>',
            (
                (
                    reverse("admin:executions_execution_change", args=[e.pk]),
                    f"{e.pk}, lease until {display.utc(e.lease_expires_at)}",
                    str(e.pk)[:8],
                )
                for e in view.holding
            ),
        )

    @admin.display(description="takeovers (recent)")
    def takeovers(self, obj: WorkerProcess) -> str:
        view = self._view(obj)
        if view is None or not (view.lost or view.took):
            return "—"
        latest = max(view.lost + view.took, key=lambda t: t.at)
        return format_html(
            "lost {} · took over {}. Latest: {}",
            len(view.lost),
            len(view.took),
            takeover_sentence(latest),
        )
