"""The reconciliation admin's writes: the admin actions, each behind its own permission.

Every write goes through an admin action (`@admin.action(permissions=[...])`, backed by
`has_<name>_permission`), and the case page's buttons post to the same actions, so there is one
path to every write. The resolutions' actions and permission checks are made from the table in
resolutions.py. A POST naming an action the user lacks is refused with 403, not ignored. Actions
narrow to cases still open, call a service, and report with `message_user`.
"""

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.core.exceptions import PermissionDenied
from django.db.models import BLANK_CHOICE_DASH, QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.http.response import HttpResponseBase
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils import timezone

from executions.models import ExecutionStatus
from orquestador import display

from . import confirmation, explain, keptforms, permissions, selectors, services
from .forms import ResolutionForm
from .models import ReconciliationCase
from .resolutions import RESOLUTIONS, ResolutionAction

if TYPE_CHECKING:
    from django.db.models.options import Options

    # The mixins of ReconciliationCaseAdmin are checked as the ModelAdmin they are mixed into,
    # with the case page that admin.py defines.
    class CaseAdminBase(admin.ModelAdmin[ReconciliationCase]):
        def render_case(
            self, request: HttpRequest, execution_id: Any, *, bound: dict[str, Any] | None = None
        ) -> TemplateResponse: ...

        # ModelAdmin's own redirect for a missing object: private, so the stubs leave it out.
        def _get_obj_does_not_exist_redirect(
            self, request: HttpRequest, opts: Options[Any], object_id: str
        ) -> HttpResponseRedirect: ...
else:
    CaseAdminBase = object

CaseAction = Callable[
    ["CaseActions", HttpRequest, QuerySet[ReconciliationCase]], HttpResponseBase | None
]


def case_url(execution_id: Any) -> str:
    return reverse("admin:reconciliation_reconciliationcase_change", args=[execution_id])


def lookup_summary(payload: dict[str, Any]) -> str:
    happened = payload.get("happened")
    if happened is True:
        return "the provider says the write happened."
    if happened is False:
        return "the provider says the write did not happen."
    return "the provider's answer settles nothing" + (
        f" ({payload['detail']})." if payload.get("detail") else "."
    )


def short(execution_id: Any) -> str:
    return str(execution_id)[:8]


def _posted_ids(request: HttpRequest) -> list[str]:
    return request.POST.getlist(helpers.ACTION_CHECKBOX_NAME)


def settled_by(execution_id: Any, settled: Any) -> str:
    """Who settled a case the operator meant to act on, and how."""
    what = settled.payload.get("resolution") or settled.type
    return (
        f"case {short(execution_id)} was already settled by {settled.actor} at "
        f"{display.utc(settled.created_at)} ({what}); nothing was written."
    )


def _resolution_action(resolution: ResolutionAction) -> CaseAction:
    """The admin action of one resolution of the table."""

    @admin.action(permissions=[resolution.name], description=resolution.description)
    def action(
        modeladmin: "CaseActions", request: HttpRequest, queryset: QuerySet[ReconciliationCase]
    ) -> HttpResponseBase | None:
        return modeladmin.resolve(request, queryset, resolution)

    action.__name__ = resolution.name
    return action


def _permission_check(permission: str) -> Callable[["admin.ModelAdmin[Any]", HttpRequest], bool]:
    def has_permission(self: admin.ModelAdmin, request: HttpRequest) -> bool:
        return request.user.has_perm(permission)

    return has_permission


class CaseActions(CaseAdminBase):
    """The actions of ReconciliationCaseAdmin (a ModelAdmin mixin)."""

    actions: tuple[str | CaseAction, ...] = (
        "fetch_provider_evidence",
        *(_resolution_action(r) for r in RESOLUTIONS),
    )

    def has_fetch_provider_evidence_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm(permissions.FETCH_PROVIDER_EVIDENCE)

    def get_action_choices(
        self, request: HttpRequest, default_choices: list[tuple[str, str]] = BLANK_CHOICE_DASH
    ) -> list[tuple[str, str]]:
        """The action menu. Under the two-person rule it offers no bulk replay: each replay of a
        non-idempotent write is proposed on its case and approved there (adminproposals.py).

        Only the menu (GET) leaves it out: Django checks a posted action against these choices,
        and the case page still posts a replay of a write the rule does not cover, which the
        service then decides (it refuses a non-idempotent one, APPROVAL_REQUIRED)."""
        choices = super().get_action_choices(request, default_choices)
        if request.method == "GET" and services.two_person_rule():
            choices = [choice for choice in choices if choice[0] != explain.WRITE_NOT_HAPPENED]
        return choices

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        if request.method == "POST":
            allowed = self.get_actions(request)
            ours = {a if isinstance(a, str) else a.__name__ for a in self.actions}
            if any(name in ours and name not in allowed for name in request.POST.getlist("action")):
                raise PermissionDenied
        return super().changelist_view(request, extra_context)

    def back(self, request: HttpRequest, ids: list[Any]) -> HttpResponseRedirect | None:
        """After an action: to the case page when it was about one case, else the queue.

        `ids` are the cases the operator selected, whatever the queue's filter still shows: a
        case resolved by someone else meanwhile is one the queue no longer lists.
        """
        ids = ids or _posted_ids(request)
        if len(ids) == 1:
            return HttpResponseRedirect(case_url(ids[0]))
        return None

    def open_cases(
        self, request: HttpRequest, queryset: QuerySet[ReconciliationCase]
    ) -> list[ReconciliationCase]:
        """Narrow to cases that can still be resolved, and say so when that leaves none."""
        cases = list(
            queryset.filter(status=ExecutionStatus.RECONCILIATION_REQUIRED).order_by(
                *selectors.QUEUE_ORDER
            )
        )
        if not cases:
            posted = _posted_ids(request)
            settled = (
                selectors.last_settlement(execution_id=posted[0]) if len(posted) == 1 else None
            )
            self.message_user(
                request,
                "Nothing to resolve: "
                + (
                    settled_by(posted[0], settled)
                    if settled
                    else "none of the selected executions is in RECONCILIATION_REQUIRED "
                    "(already resolved?)."
                ),
                messages.WARNING,
            )
        return cases

    @admin.action(
        permissions=["fetch_provider_evidence"],
        description="Ask the provider whether the write happened (stored as evidence)",
    )
    def fetch_provider_evidence(
        self, request: HttpRequest, queryset: QuerySet[ReconciliationCase]
    ) -> HttpResponseRedirect | None:
        selected = list(queryset.values_list("pk", flat=True))
        only = request.POST.get("action_id")
        for case in self.open_cases(request, queryset):
            detail = selectors.case_detail(execution_id=case.pk)
            action_ids = [view.checkpoint.action_id for view in detail.uncertain]
            if only:
                action_ids = [a for a in action_ids if a == only]
            if not action_ids:
                self.message_user(
                    request,
                    f"Case {short(case.pk)}: no uncertain action to ask about.",
                    messages.WARNING,
                )
            for action_id in action_ids:
                try:
                    event = services.checkpoint_record_lookup(
                        execution_id=case.pk, action_id=action_id, operator=request.user
                    )
                except services.ResolutionRefused as exc:
                    self.message_user(
                        request, f"Case {short(case.pk)}, {action_id}: {exc.detail}", messages.ERROR
                    )
                else:
                    self.message_user(
                        request,
                        f"Case {short(case.pk)}, {action_id}: {lookup_summary(event.payload)} "
                        "Recorded as evidence.",
                        messages.SUCCESS,
                    )
        return self.back(request, selected)

    def resolve_by_evidence(
        self,
        request: HttpRequest,
        cases: list[ReconciliationCase],
        resolution: ResolutionAction,
        selected: list[Any],
    ) -> HttpResponseRedirect | TemplateResponse | None:
        """Settle many cases at once, each only where its provider's answer supports it.

        The page lists, case by case, what will be done and what is skipped and why; after the
        operator's reason, each case gets its own result.
        """
        now = timezone.now()
        plans = [
            confirmation.case_plan(resolution, case, by_evidence=True, now=now) for case in cases
        ]
        if "post" in request.POST:
            form = ResolutionForm(request.POST)
            if form.is_valid():
                reason = form.cleaned_data["reason"]
                for plan in plans:
                    name, note = f"Case {short(plan.case.pk)}", plan.note
                    if plan.data is None:
                        self.message_user(request, f"{name}: skipped, {note}.", messages.WARNING)
                        continue
                    try:
                        resolution.apply(
                            plan.case.pk, {**plan.data, "reason": reason}, request.user
                        )
                    except services.ResolutionRefused as exc:
                        self.message_user(request, f"{name}: {exc.detail}", messages.ERROR)
                    else:
                        self.message_user(request, f"{name}: resolved ({note}).", messages.SUCCESS)
                return self.back(request, selected)
        else:
            form = ResolutionForm()
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": f"{resolution.title}, where the provider's answer supports it",
            "subtitle": None,
            "explanation": resolution.explanation,
            "cases": cases,
            "plans": plans,
            "form": form,
            "action_name": resolution.name,
            "selected_name": helpers.ACTION_CHECKBOX_NAME,
        }
        return TemplateResponse(request, "admin/reconciliation/resolve.html", context)

    def resolve(
        self,
        request: HttpRequest,
        queryset: QuerySet[ReconciliationCase],
        resolution: ResolutionAction,
    ) -> HttpResponseRedirect | TemplateResponse | None:
        """Confirm (with a reason, and the action to settle), then apply to each open case."""
        selected = list(queryset.values_list("pk", flat=True))
        cases = self.open_cases(request, queryset)
        if not cases:
            return self.back(request, selected)
        action_ids, risks = None, None
        if resolution.settles_one_action and len(cases) > 1:
            return self.resolve_by_evidence(request, cases, resolution, selected)
        if resolution.settles_one_action:
            detail = selectors.case_detail(execution_id=cases[0].pk)
            action_ids = [view.checkpoint.action_id for view in detail.uncertain]
            # Choosing against the provider's latest answer needs a second confirmation.
            risks = {a: explain.risk(resolution.name, detail.latest_lookup(a)) for a in action_ids}
            if not action_ids:
                self.message_user(
                    request,
                    "This case has no RUNNING or UNKNOWN action to settle; only abandoning "
                    "applies.",
                    messages.ERROR,
                )
                return self.back(request, selected)
        one = len(cases) == 1
        if "post" in request.POST:
            form = resolution.form_class(
                request.POST,
                action_ids=action_ids,
                risks=risks,
                auto_id=f"{resolution.field_prefix}_%s" if one else "id_%s",
            )
            if not form.is_valid():
                if one:  # back to the case, with what the operator typed and why it failed
                    return keptforms.keep(request, cases[0].pk, resolution.name)
            else:
                done = []
                for case in cases:
                    try:
                        resolution.apply(case.pk, form.cleaned_data, request.user)
                    except services.ResolutionRefused as exc:
                        settled = selectors.last_settlement(execution_id=case.pk)
                        text = settled_by(case.pk, settled) if settled else exc.detail
                        self.message_user(request, f"Case {short(case.pk)}: {text}", messages.ERROR)
                        if one and not settled:
                            return keptforms.keep(request, case.pk, resolution.name)
                    else:
                        done.append(case.pk)
                if done:
                    self.message_user(
                        request,
                        f"{resolution.title}: resolved {len(done)} case(s), recorded in the "
                        "audit trail.",
                        messages.SUCCESS,
                    )
                return self.back(request, selected)
        else:
            form = resolution.form_class(action_ids=action_ids, risks=risks)
        now = timezone.now()
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": resolution.title,
            "subtitle": None,
            "explanation": resolution.explanation,
            "cases": cases,
            "plans": [
                confirmation.case_plan(resolution, case, by_evidence=False, now=now)
                for case in cases
            ],
            "form": form,
            "action_name": resolution.name,
            "selected_name": helpers.ACTION_CHECKBOX_NAME,
        }
        return TemplateResponse(request, "admin/reconciliation/resolve.html", context)


for _resolution in RESOLUTIONS:
    setattr(
        CaseActions,
        f"has_{_resolution.name}_permission",
        _permission_check(_resolution.permission),
    )
