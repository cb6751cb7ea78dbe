"""What a resolution's confirmation page says about each selected case before anything is
written: what will be done (or why the case is skipped), what the provider said, and the risk of
this resolution for this case.

Read-only: one case_detail read per selected case, nothing written. The bulk "write" resolutions
apply to a case only where its latest lookup about the attempt in doubt supports them (found
with a valid output, or not found); the page and the result report case by case.
"""

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from orquestador import display

from . import explain, selectors
from .models import ReconciliationCase
from .resolutions import ResolutionAction


@dataclass(frozen=True)
class CasePlan:
    """One selected case, as the confirmation page lists it."""

    case: ReconciliationCase
    data: dict[str, Any] | None  # what a bulk resolution applies to it; None: skipped
    applies: bool  # whether the resolution will be applied to it
    note: str  # what will be done, or why it is skipped, in words
    why: str  # why the case needs an operator (error code)
    evidence: list[str]  # per uncertain action, what the provider said, who asked and when
    risk: str  # the risk of this resolution for this case


def _supported(
    resolution: ResolutionAction, detail: selectors.CaseDetail
) -> tuple[dict[str, Any] | None, str]:
    """What a bulk resolution would apply to one case (None: skipped), and why, in words."""
    if len(detail.uncertain) != 1:
        return None, f"it has {len(detail.uncertain)} uncertain actions: resolve it on its page"
    action_id = detail.uncertain[0].checkpoint.action_id
    lookup = detail.latest_lookup(action_id)
    status = explain.lookup_status(lookup)
    if resolution.name == explain.WRITE_HAPPENED:
        if lookup is not None and status == explain.HAPPENED and lookup.get("outputValid"):
            data = {"action_id": action_id, "output": lookup["output"]}
            return data, "the provider found the write; its output is recorded"
    elif resolution.name == explain.WRITE_NOT_HAPPENED and status == explain.NOT_FOUND:
        return {"action_id": action_id}, "the provider found no write; it is replayed once"
    return None, f"the provider's answer does not support it (lookup: {status})"


def _evidence(detail: selectors.CaseDetail, now: datetime) -> list[str]:
    lines = []
    for view in detail.uncertain:
        checkpoint = view.checkpoint
        lookup_view = detail.latest_lookup_view(checkpoint.action_id)
        said = explain.evidence_sentence(None if lookup_view is None else lookup_view.payload)
        if lookup_view is not None:
            event = lookup_view.event
            said += (
                f" — asked by {lookup_view.payload.get('operator') or event.actor} at "
                f"{display.at_and_ago(event.created_at, now)}"
            )
        where = f"{checkpoint.action_id} ({checkpoint.capability}), attempt {checkpoint.attempt}"
        lines.append(f"{where}: {said}")
    return lines or ["no write is in doubt"]


def case_plan(
    resolution: ResolutionAction, case: ReconciliationCase, *, by_evidence: bool, now: datetime
) -> CasePlan:
    """The confirmation page's row for one case. `by_evidence`: a bulk "write" resolution,
    applied only where the case's latest lookup supports it."""
    detail = selectors.case_detail(execution_id=case.pk)
    if by_evidence:
        data, note = _supported(resolution, detail)
        applies = data is not None
    else:
        data, note, applies = None, "", True
    first = detail.uncertain[0].checkpoint if detail.uncertain else None
    lookup = detail.latest_lookup(first.action_id) if first is not None else None
    return CasePlan(
        case=case,
        data=data,
        applies=applies,
        note=note,
        why=detail.execution.error_code or "—",
        evidence=_evidence(detail, now),
        risk=explain.resolution_risk(resolution.name, checkpoint=first, lookup=lookup),
    )
