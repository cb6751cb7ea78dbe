"""The case page, put together: what explain.py says about the case, the forms the operator may
use, and, once resolved, who resolved it and what the execution has done since.

Read-only: it only reads through selectors and renders. The forms post to the admin actions
(adminactions.py), which render this page again, with the operator's typed input and the
errors, when a resolution is refused or the form is invalid.
"""

import json
from dataclasses import dataclass
from typing import Any

from django.contrib.admin import helpers
from django.forms import Form
from django.forms.utils import ErrorDict
from django.http import HttpRequest
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString

from actions.lookup import supports_lookup
from executions.admin.pictures import timeline_drawing
from executions.models import TERMINAL_STATUSES, AuditType, ExecutionStatus
from orquestador import display

from . import approvals, explain, selectors, services
from .adminproposals import approval_risk
from .forms import DecisionForm, ResolutionForm
from .permissions import RESOLVE_WRITE_NOT_HAPPENED
from .resolutions import BY_NAME, RESOLUTIONS, ResolutionAction

FINAL_STATUSES = TERMINAL_STATUSES
REFRESH_SECONDS = 5  # how often a resolved case's page reloads while the execution still runs


@dataclass(frozen=True)
class CaseForm:
    """A resolution the operator may apply, with its form, as the case page shows it."""

    resolution: ResolutionAction
    form: ResolutionForm
    suggested: bool
    risk: str | None  # the risk of this choice against the evidence, named; None when none
    proposes: bool = False  # under the two-person rule: a proposal for a second operator


def resolution_form(
    resolution: ResolutionAction, case: selectors.CaseDetail, data: Any = None
) -> ResolutionForm:
    """The form of `resolution` for one case, bound to `data` when given, as the case's page
    and the action that receives it make it: the uncertain actions to choose from, and the risk
    of each against the provider's latest answer."""
    action_ids, risks = None, None
    if resolution.settles_one_action:
        action_ids = [view.checkpoint.action_id for view in case.uncertain]
        risks = {a: explain.risk(resolution.name, case.latest_lookup(a)) for a in action_ids}
    return resolution.form_class(
        data, action_ids=action_ids, risks=risks, auto_id=f"{resolution.field_prefix}_%s"
    )


def forms_for(
    request: HttpRequest,
    case: selectors.CaseDetail,
    *,
    suggestion: explain.Suggestion,
    proposal: approvals.Proposal | None,
    bound: dict[str, ResolutionForm] | None = None,
) -> list[CaseForm]:
    """The resolutions the operator may apply to this case, suggested one first."""
    action_ids = [view.checkpoint.action_id for view in case.uncertain]
    lookup = case.latest_lookup(action_ids[0]) if action_ids else None
    prefill = {}
    if len(action_ids) == 1 and lookup and lookup.get("happened") and lookup.get("outputValid"):
        # Offer the provider's record only when it would pass the output schema.
        prefill["output"] = json.dumps(
            lookup["output"], indent=2, sort_keys=True, ensure_ascii=False
        )
    two_people = any(services.needs_two_people(view.checkpoint) for view in case.uncertain)
    offered = []
    for resolution in RESOLUTIONS:
        if not request.user.has_perm(resolution.permission):
            continue
        if resolution.settles_one_action and not case.uncertain:
            continue
        if resolution.offered is not None and not resolution.offered(case.execution):
            continue
        proposes = two_people and resolution.name == explain.WRITE_NOT_HAPPENED
        if proposes and proposal is not None and proposal.stale is None:
            continue  # the pending proposal's card decides it
        risks = {a: explain.risk(resolution.name, case.latest_lookup(a)) for a in action_ids}
        form = (bound or {}).get(resolution.name) or resolution.form_class(
            action_ids=action_ids if resolution.settles_one_action else None,
            initial=prefill if resolution.form_class.takes_output else None,
            risks=risks,
            auto_id=f"{resolution.field_prefix}_%s",
        )
        offered.append(
            CaseForm(
                resolution,
                form,
                suggested=resolution.name == suggestion.resolution,
                risk=next((r for r in risks.values() if r), None),
                proposes=proposes,
            )
        )
    offered.sort(key=lambda item: not item.suggested)
    return offered


# How each resolution reads in the case's header (services.Resolution's values).
RESOLUTION_WORDS = {
    "WRITE_HAPPENED": "The write happened",
    "WRITE_NOT_HAPPENED": "The write did not happen (one replay)",
    "ABANDONED": "Abandoned",
    "COMPENSATE": "Compensate its writes",
}


@dataclass(frozen=True)
class ResolvedCard:
    """Who resolved the case, how, when and why, with the evidence they had."""

    resolution: str
    operator: str
    at: str
    reason: str
    lookup_status: str
    action_id: str | None
    automatic: bool = False  # by the prober (RECONCILIATION.md#automatic-probes)


def _operators(payload: dict[str, Any], actor: str) -> str:
    """Who resolved: one operator, or under the two-person rule the proposer and the approver."""
    approval = (payload.get("evidence") or {}).get("approval")
    if approval:
        return f"{approval['proposedBy']} (proposed), {approval['approvedBy']} (approved)"
    return str(payload.get("operator") or actor)


def resolved_cards(case: selectors.CaseDetail) -> list[ResolvedCard]:
    """Every resolution of this case, oldest first: an operator's and the prober's alike (a
    replay may open the case again, and each settled it once)."""
    return [
        _card(entry.event)
        for entry in case.timeline
        if entry.event.type == AuditType.RECONCILIATION_RESOLVED
        and entry.event.execution_id == case.execution.pk
    ]


def _card(event: Any) -> ResolvedCard:
    payload = event.payload
    evidence = payload.get("evidence") or {}
    lookup = evidence.get("lookup")
    if lookup is None and evidence.get("lookups"):
        lookup = evidence["lookups"][-1]
    resolution = str(payload.get("resolution"))
    return ResolvedCard(
        resolution=RESOLUTION_WORDS.get(resolution, resolution),
        operator=_operators(payload, event.actor),
        at=display.utc(event.created_at),
        reason=str(payload.get("reason") or ""),
        lookup_status=explain.lookup_status(lookup),
        action_id=payload.get("actionId"),
        automatic=str(event.actor).startswith("system:"),
    )


def live_status(case: selectors.CaseDetail, now: Any) -> str:
    """What the execution is doing now, in words."""
    execution = case.execution
    status = execution.status
    if status == ExecutionStatus.PENDING:
        return (
            f"PENDING since {display.utc(execution.next_attempt_at)}: waiting for a worker to "
            "claim it; none has yet. If this lasts, check that a worker is running."
        )
    if status == ExecutionStatus.RUNNING:
        held = (
            f"held by {execution.lease_owner}, "
            f"lease until {display.utc(execution.lease_expires_at)}"
            if execution.lease_owner
            else "claimed"
        )
        return f"RUNNING: {held} (attempt {execution.attempts})."
    if status == ExecutionStatus.RETRY_WAIT:
        return f"RETRY_WAIT: next attempt at {display.utc(execution.next_attempt_at)}."
    if status in FINAL_STATUSES:
        return f"{status} at {display.utc(execution.finished_at)}."
    return f"{status}."


@dataclass(frozen=True)
class ProposalCard:
    """A replay proposed under the two-person rule, as the top of the case page shows it."""

    proposal: approvals.Proposal
    at: str
    age: str
    may_decide: bool  # holds the permission and is not the proposer
    is_proposer: bool
    form: DecisionForm | None  # approve/reject (or withdraw, for the proposer)
    risk: str | None  # the risk of approving against the provider's latest answer


def proposal_card(
    request: HttpRequest,
    case: selectors.CaseDetail,
    proposal: approvals.Proposal | None,
    *,
    now: Any,
    bound: DecisionForm | None,
) -> ProposalCard | None:
    if proposal is None or not case.is_open:
        return None
    permitted = request.user.has_perm(RESOLVE_WRITE_NOT_HAPPENED)
    is_proposer = approvals.is_proposer(proposal, request.user)
    risk = approval_risk(case, proposal)
    form = None
    if permitted and proposal.stale is None:
        form = bound or DecisionForm(
            initial={"proposal": proposal.event_id}, risks={"": risk}, auto_id="decide_%s"
        )
        if is_proposer:
            form.fields.pop("confirm_risk", None)  # the proposer can only withdraw
    return ProposalCard(
        proposal=proposal,
        at=display.utc(proposal.at),
        age=display.age((now - proposal.at).total_seconds()),
        may_decide=permitted and not is_proposer,
        is_proposer=is_proposer,
        form=form,
        risk=risk,
    )


def _problems(form: Form) -> list[str]:
    """A form's errors as sentences, each with its field's label where the message needs one."""
    errors: ErrorDict = form.errors
    lines = []
    for name, messages in errors.items():
        field = form.fields.get(name)
        label = (field.label if field else None) or name.replace("_", " ").capitalize()
        for message in messages:
            # The risk's confirmation and the form's own errors say what they are about.
            bare = name in ("__all__", "confirm_risk")
            lines.append(str(message) if bare else f"{label}: {message}")
    return lines


def refusal(bound: dict[str, Any] | None) -> SafeString | None:
    """What a refused form says, for the top of the case page: the page is shown again from the
    top, and the form with its errors sits below the first screen."""
    for name, form in (bound or {}).items():
        if not form.errors:
            continue
        if name == "decide":  # adminproposals.py: the decision on a proposed replay
            what, anchor = "The decision on the proposed replay", "case-proposal"
        else:
            resolution = BY_NAME[name]
            what, anchor = resolution.title, f"resolve-{resolution.key}"
        return format_html(
            "Not done: “{}” was refused and nothing was written. {} "
            '<a href="#{}" id="refusal-form-link">Go to the form</a> (it keeps what you typed).',
            what,
            " ".join(_problems(form)),
            anchor,
        )
    return None


def replay_offered(resolutions: list[CaseForm], proposal: ProposalCard | None) -> bool:
    """Whether this operator is offered a replay here: its form, or a proposal to approve."""
    if any(offered.resolution.name == explain.WRITE_NOT_HAPPENED for offered in resolutions):
        return True
    return proposal is not None and proposal.may_decide and proposal.proposal.stale is None


def case_context(
    request: HttpRequest,
    case: selectors.CaseDetail,
    *,
    may_lookup: bool,
    bound: dict[str, ResolutionForm] | None = None,
) -> dict[str, Any]:
    """The case page's context (beyond the admin site's)."""
    now = timezone.now()
    execution = case.execution
    uncertain = [view.checkpoint for view in case.uncertain] if case.is_open else []
    first = uncertain[0] if uncertain else None
    # The evidence is about the attempt in doubt; an answer about an earlier one is said apart.
    lookup_view = case.latest_lookup_view(first.action_id) if first else None
    lookup = lookup_view.payload if lookup_view else None
    earlier = case.earlier_lookup_view(first.action_id) if first and not lookup_view else None
    can_lookup = first is not None and supports_lookup(first.capability, first.capability_version)
    suggestion = explain.suggest(uncertain=uncertain, lookup=lookup, can_lookup=can_lookup)
    events = [entry.event for entry in case.timeline]
    cards = resolved_cards(case)
    card = None if case.is_open or not cards else cards[-1]
    decide = (bound or {}).get("decide")  # adminproposals.py keeps a DecisionForm under this
    # With the rule off a leftover proposal is not offered: it could only be refused.
    proposal = (
        approvals.pending_proposal(execution_id=execution.pk)
        if case.is_open and services.two_person_rule()
        else None
    )
    resolutions = (
        forms_for(request, case, suggestion=suggestion, proposal=proposal, bound=bound)
        if case.is_open
        else []
    )
    card_of_proposal = proposal_card(
        request,
        case,
        proposal,
        now=now,
        bound=decide if isinstance(decide, DecisionForm) else None,
    )
    return {
        "case": case,
        "short_id": str(execution.pk)[:8],
        "why": explain.why(
            error_code=execution.error_code,
            error_detail=execution.error_detail,
            uncertain=uncertain,
            timeline=events,
        )
        if case.is_open
        else None,
        "waiting": display.age((now - execution.created_at).total_seconds()),
        "summary_fields": explain.summary_fields(execution.flow.definition, case.request.data),
        "first_uncertain": first,
        "latest_lookup": lookup,
        "lookup_status": explain.lookup_status(lookup),
        "latest_lookup_at": display.utc(lookup_view.event.created_at) if lookup_view else None,
        "lookup_age": display.age((now - lookup_view.event.created_at).total_seconds())
        if lookup_view
        else None,
        "earlier_lookup": earlier,
        "earlier_lookup_status": explain.lookup_status(earlier.payload) if earlier else None,
        "earlier_lookup_at": display.utc(earlier.event.created_at) if earlier else None,
        "can_lookup": can_lookup and may_lookup,
        "suggestion": suggestion,
        "resolutions": resolutions,
        "proposal": card_of_proposal,
        # What a replay does at a provider that does not deduplicate, where one is offered.
        "replay_risk": explain.replay_risk(first)
        if first is not None and replay_offered(resolutions, card_of_proposal)
        else None,
        "proposal_url": reverse(
            "admin:reconciliation_reconciliationcase_proposal", args=[execution.pk]
        ),
        "may_resolve": any(request.user.has_perm(r.permission) for r in RESOLUTIONS),
        "resolved": card,
        "resolutions_done": cards,
        "live_status": None if case.is_open else live_status(case, now),
        "refresh_seconds": REFRESH_SECONDS
        if card and execution.status not in FINAL_STATUSES
        else None,
        "changelist_url": reverse("admin:reconciliation_reconciliationcase_changelist"),
        "selected_name": helpers.ACTION_CHECKBOX_NAME,
        "timeline_drawing": timeline_drawing(execution, now=now),
    }
