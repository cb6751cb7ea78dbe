"""The case page's two-person rule controls (approvals.py): propose a replay, approve or reject a
proposal. One POST-only view at `<case>/proposal/`, CSRF-protected by the admin site; the
services check the permission and the proposer again, so a forged post changes nothing. Errors
stay on the case with what the operator typed; a success returns to the case.
"""

from typing import Any

from django.contrib import messages
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.urls import URLPattern, path

from orquestador import errors

from . import approvals, explain, keptforms, permissions, selectors, services
from .adminactions import CaseAdminBase, case_url, settled_by, short
from .forms import DecisionForm
from .resolutions import BY_NAME

DECISIONS = ("propose", "approve", "reject")
PROPOSE = BY_NAME[explain.WRITE_NOT_HAPPENED]  # the resolution a proposal is of


def approval_risk(case: selectors.CaseDetail, proposal: approvals.Proposal) -> str | None:
    """The risk of approving the replay where the provider's latest answer about the attempt
    it repeats does not support it, named."""
    return explain.risk(explain.WRITE_NOT_HAPPENED, case.latest_lookup(proposal.action_id))


class ProposalViews(CaseAdminBase):
    """The proposal view of ReconciliationCaseAdmin (a ModelAdmin mixin)."""

    def get_urls(self) -> list[URLPattern]:
        info = self.opts.app_label, self.opts.model_name
        return [
            path(
                "<path:object_id>/proposal/",
                self.admin_site.admin_view(self.proposal_view),
                name="{}_{}_proposal".format(*info),
            ),
            *super().get_urls(),
        ]

    def proposal_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        obj = self.get_object(request, unquote(object_id))
        if obj is None:
            return self._get_obj_does_not_exist_redirect(request, self.opts, object_id)
        if not self.has_view_permission(request, obj) or not request.user.has_perm(
            permissions.RESOLVE_WRITE_NOT_HAPPENED
        ):
            raise PermissionDenied
        decision = request.POST.get("decision")
        if decision not in DECISIONS:
            raise PermissionDenied
        case = selectors.case_detail(execution_id=obj.pk)
        if decision == "propose":
            return self._propose(request, case)
        return self._decide(request, case, approve=decision == "approve")

    def _propose(self, request: HttpRequest, case: selectors.CaseDetail) -> HttpResponse:
        action_ids = [view.checkpoint.action_id for view in case.uncertain]
        risks = {a: explain.risk(PROPOSE.name, case.latest_lookup(a)) for a in action_ids}
        form = PROPOSE.form_class(
            request.POST,
            action_ids=action_ids,
            risks=risks,
            auto_id=f"{PROPOSE.field_prefix}_%s",
        )
        if not form.is_valid():
            return keptforms.keep(request, case.execution.pk, PROPOSE.name)
        try:
            approvals.replay_propose(
                execution_id=case.execution.pk,
                action_id=form.cleaned_data["action_id"],
                reason=form.cleaned_data["reason"],
                operator=request.user,
            )
        except services.ResolutionRefused as exc:
            return self._refused(request, case, exc, form=PROPOSE.name)
        self.message_user(
            request,
            f"Case {short(case.execution.pk)}: replay proposed. Nothing is applied until another "
            "operator approves it.",
            messages.SUCCESS,
        )
        return HttpResponseRedirect(case_url(case.execution.pk))

    def _decide(
        self, request: HttpRequest, case: selectors.CaseDetail, *, approve: bool
    ) -> HttpResponse:
        proposal = approvals.pending_proposal(execution_id=case.execution.pk)
        risk = approval_risk(case, proposal) if (approve and proposal) else None
        form = DecisionForm(request.POST, risks={"": risk}, auto_id="decide_%s")
        if not form.is_valid():
            return keptforms.keep(request, case.execution.pk, "decide")
        data: dict[str, Any] = {
            "execution_id": case.execution.pk,
            "proposal_id": form.cleaned_data["proposal"],
            "reason": form.cleaned_data["reason"],
            "operator": request.user,
        }
        try:
            if approve:
                confirmed = bool(form.cleaned_data.get("confirm_risk"))
                approvals.replay_approve(**data, confirm_risk=confirmed)
            else:
                approvals.replay_reject(**data)
        except services.ResolutionRefused as exc:
            return self._refused(request, case, exc, form="decide")
        done = "approved: the replay is applied" if approve else "rejected"
        self.message_user(
            request, f"Case {short(case.execution.pk)}: proposal {done}.", messages.SUCCESS
        )
        return HttpResponseRedirect(case_url(case.execution.pk))

    def _refused(
        self,
        request: HttpRequest,
        case: selectors.CaseDetail,
        exc: services.ResolutionRefused,
        *,
        form: str,
    ) -> HttpResponse:
        """Say why on the case, the form `form` kept as typed; a case settled meanwhile says by
        whom (the form is moot)."""
        settled = selectors.last_settlement(execution_id=case.execution.pk)
        if exc.code == errors.NOT_IN_RECONCILIATION and settled:
            text = settled_by(case.execution.pk, settled)
            self.message_user(request, f"Case {short(case.execution.pk)}: {text}", messages.ERROR)
            return HttpResponseRedirect(case_url(case.execution.pk))
        self.message_user(request, f"Case {short(case.execution.pk)}: {exc.detail}", messages.ERROR)
        return keptforms.keep(request, case.execution.pk, form)
