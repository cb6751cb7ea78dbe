"""What a case says about itself: why it is uncertain, what identifies it, what the provider
said, and which resolution the evidence suggests, with its consequence in words.

Pure functions of what the case page already read (selectors.CaseDetail): no queries, no clock
(the caller passes `now`). The evidence is the latest lookup about the attempt in doubt; an
answer about an earlier attempt is none. The suggestion follows the evidence and nothing else:
where it is inconclusive (no lookup about this attempt, or one that settled nothing) it is to ask
the provider (again) or check with it directly, and no resolution is pre-selected.
"""

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.utils.html import format_html_join

from executions.flows import amounts
from executions.models import AuditEvent, AuditType, CheckpointStatus, ExecutionStatus
from executions.pictures.insight import takeovers
from orquestador.display import at_and_ago, clip, utc

SUMMARY_VALUE_CHARS = 80  # characters of one case-summary value shown
WHY_DETAIL_CHARS = 200  # characters of an error detail quoted in the one-sentence why
BLOCKING_DETAIL_CHARS = 80  # characters of an error detail on the Blocked requests page

# Lookup statuses, as the queue and the case page name them.
NOT_ASKED, HAPPENED, NOT_FOUND, LOOKUP_ERROR = "not asked", "happened", "not found", "error"

# Resolution names of resolutions.py (the table), as suggested here.
WRITE_HAPPENED = "resolve_write_happened"
WRITE_NOT_HAPPENED = "resolve_write_not_happened"
ABANDON = "abandon_execution"


def lookup_status(lookup: dict[str, Any] | None) -> str:
    """not asked / happened / not found / error, from a recorded lookup's payload."""
    if lookup is None:
        return NOT_ASKED
    if lookup.get("happened") is True:
        return HAPPENED
    if lookup.get("happened") is False:
        return NOT_FOUND
    return LOOKUP_ERROR


def summary_fields(definition: dict[str, Any], data: Any) -> list[tuple[str, amounts.Shown]]:
    """The flow's `caseSummary` pointers with the request data's values there, for display: an
    amount the flow declares (`display.amounts`) formatted as money, its raw value kept."""
    fields = []
    for where in definition.get("caseSummary") or []:
        value = amounts.shown(definition, data, where, SUMMARY_VALUE_CHARS)
        fields.append((amounts.label(where), value or amounts.Shown("—")))
    return fields


def summary_line(fields: list[tuple[str, amounts.Shown]]) -> str:
    """The summary fields on one line (HTML: each amount with its raw value on hover)."""
    return format_html_join(" · ", "{} {}", fields)


def why(
    *,
    error_code: str | None,
    error_detail: str | None,
    uncertain: list[Any],
    timeline: list[AuditEvent],
) -> str:
    """Why the case needs a person, in one sentence."""
    cancelled = next(
        (e for e in reversed(timeline) if e.type == AuditType.EXECUTION_CANCELLED), None
    )
    if uncertain:
        checkpoint = uncertain[0]
        call = f"the call of {checkpoint.action_id!r} to {checkpoint.capability}"
        started = utc(checkpoint.started_at)
        if checkpoint.status == CheckpointStatus.RUNNING:
            lost = next(
                (t for t in takeovers(timeline) if t.previous_token == checkpoint.fencing_token),
                None,
            )
            if lost is not None:
                return (
                    f"Worker {lost.previous_owner} lost its lease at {utc(lost.lease_expired_at)} "
                    f"while {call} "
                    f"was in flight (sent {started}); nobody knows whether the provider applied "
                    "it, and this write is never repeated without an operator."
                )
            if cancelled is not None:
                return (
                    f"{cancelled.actor} cancelled the execution at {utc(cancelled.created_at)} "
                    f"while {call} was in flight (sent {started}); nobody knows whether the "
                    "provider applied it."
                )
            return (
                f"The worker running attempt {checkpoint.attempt} stopped (its lease ran out) "
                f"while {call} was in flight (sent {started}); nobody knows whether the provider "
                "applied it, and this write is never repeated without an operator."
            )
        said = clip(checkpoint.error_detail or checkpoint.error_code or "", WHY_DETAIL_CHARS)
        return (
            f"The outcome of {call} at attempt {checkpoint.attempt} (sent {started}) is unknown"
            + (f": {said}" if said else "")
            + "."
        )
    if cancelled is not None:
        return (
            f"{cancelled.actor} cancelled the execution at {utc(cancelled.created_at)} after one "
            "of its writes had happened; the request stays blocked until someone decides what "
            "that write means."
        )
    detail = clip(error_detail or "", WHY_DETAIL_CHARS)
    return f"{error_code or 'The execution'} needs an operator" + (
        f": {detail}." if detail else "."
    )


@dataclass(frozen=True)
class Suggestion:
    resolution: str | None  # a name of resolutions.py, or None: nothing is pre-selected
    headline: str
    consequence: str
    ask_provider: bool  # asking (again) is the next step


def suggest(*, uncertain: list[Any], lookup: dict[str, Any] | None, can_lookup: bool) -> Suggestion:
    """The resolution the evidence supports for the first uncertain action, if any."""
    if not uncertain:
        return Suggestion(
            ABANDON,
            "Abandon the execution.",
            "No write is in doubt, so there is nothing to settle: abandoning ends it FAILED and "
            "releases the request with its data and state as they are.",
            False,
        )
    status = lookup_status(lookup)
    if lookup is not None and status == HAPPENED and lookup.get("outputValid"):
        return Suggestion(
            WRITE_HAPPENED,
            "The write happened: record the provider's output.",
            "The action is recorded SUCCEEDED with the output the provider reported (pre-filled "
            "below) and the execution continues; the provider is not called again.",
            False,
        )
    if status == HAPPENED:
        return Suggestion(
            None,
            "The provider says the write happened, but its record does not match the output "
            "schema.",
            "Check the record with the provider and enter a valid output by hand under “The "
            "write happened”, or abandon the execution. Do not replay: that would repeat the "
            "write.",
            False,
        )
    if status == NOT_FOUND:
        return Suggestion(
            WRITE_NOT_HAPPENED,
            "The write did not happen: replay it once.",
            "The action is recorded FAILED (REPLAY_AUTHORIZED) and the worker calls the provider "
            "once more with the same external key.",
            False,
        )
    where = "Ask the provider again" if status == LOOKUP_ERROR else "Ask the provider"
    attempt = uncertain[0].attempt
    if lookup is None and attempt > 1:
        where += f" about attempt {attempt}"  # what it said before was about an earlier one
    if not can_lookup:
        return Suggestion(
            None,
            "Check with the provider directly.",
            "This capability has no lookup by external key: find the write at the provider by "
            "its external key, then record what you found. Nothing is pre-selected.",
            False,
        )
    if lookup is None and attempt > 1:
        inconclusive = (
            f"The provider has not been asked about attempt {attempt} (what it said before was "
            "about an earlier attempt)"
        )
    else:
        inconclusive = "The evidence is inconclusive" + (
            f" (the last lookup settled nothing: {lookup.get('detail')})" if lookup else ""
        )
    return Suggestion(
        None,
        f"{where}, or check with it directly.",
        inconclusive + ": nothing is pre-selected until the provider has answered.",
        True,
    )


def risk(resolution: str, lookup: dict[str, Any] | None) -> str | None:
    """The risk of choosing `resolution` where the latest lookup about the attempt in doubt
    (None: not asked about it) does not support it, named with why; None when none. A choice
    with a risk needs the operator's confirmation, on the page and in the services."""
    status = lookup_status(lookup)
    if resolution == WRITE_NOT_HAPPENED and status == HAPPENED:
        return (
            "Against the evidence: The provider said this write happened. Replaying it may "
            "repeat it (a second charge at a provider that does not deduplicate by key)."
        )
    if resolution == WRITE_NOT_HAPPENED and status in (NOT_ASKED, LOOKUP_ERROR):
        return (
            "Without evidence: No answer from the provider about this attempt says it did not "
            "happen (it was not asked since this attempt was sent, or its answer settled "
            "nothing). Replaying it may repeat it (a second charge at a provider that does not "
            "deduplicate by key). If you checked with the provider directly, say so in the reason."
        )
    if resolution == WRITE_HAPPENED and status == NOT_FOUND:
        return (
            "Against the evidence: The provider said this write did not happen. Recording it as "
            "done continues as though it had, and nothing will make it happen."
        )
    return None


def replay_risk(checkpoint: Any) -> str:
    """What replaying this write does, at a provider that deduplicates by key and at one that
    does not: said before any replay is chosen, whatever the evidence."""
    return (
        f"A replay calls {checkpoint.capability} again with the same Idempotency-Key "
        f"({checkpoint.external_key}). A provider that deduplicates by that key answers with its "
        "first result; a provider that does not deduplicate applies the write a second time if "
        "the first call went through: for a payment, a double charge."
    )


def resolution_risk(resolution: str, *, checkpoint: Any, lookup: dict[str, Any] | None) -> str:
    """The risk of `resolution` for a case whose first uncertain write is `checkpoint` (None: no
    write is in doubt): the risk where the provider's latest answer about it does not support
    the resolution, else what it does to the provider's side if the evidence is wrong."""
    unsupported = risk(resolution, lookup) if checkpoint is not None else None
    if unsupported:
        return unsupported
    if checkpoint is None:
        return "No write is in doubt: whatever the provider did stays done."
    if resolution == WRITE_NOT_HAPPENED:
        return replay_risk(checkpoint)
    if resolution == WRITE_HAPPENED:
        return (
            f"{checkpoint.action_id} is recorded as done and the provider is not called again: "
            "if the write did not in fact happen, nothing will make it happen."
        )
    return (
        "Nothing is replayed or undone: if the provider applied the write, it stays applied "
        "(a charge stays charged: refund it at the provider)."
    )


def evidence_sentence(lookup: dict[str, Any] | None) -> str:
    """What the provider's latest answer says, in words."""
    status = lookup_status(lookup)
    if lookup is None:
        return "not asked yet"
    if status == HAPPENED:
        return "the provider says the write happened" + (
            " (its record does not match the output schema)"
            if lookup.get("outputValid") is False
            else ""
        )
    if status == NOT_FOUND:
        return "the provider says the write did not happen (no record for the key)"
    detail = clip(lookup.get("detail") or "", WHY_DETAIL_CHARS)
    return "the last lookup settled nothing" + (f" ({detail})" if detail else "")


def blocking(execution: Any, now: datetime) -> str:
    """What the execution holding a request is doing, in words (the Blocked requests page)."""
    status = execution.status
    if status == ExecutionStatus.RECONCILIATION_REQUIRED:
        detail = clip(execution.error_detail, BLOCKING_DETAIL_CHARS)
        code = execution.error_code or "no error code"
        return f"waiting for an operator: {code}" + (f" — {detail}" if detail else "")
    if status == ExecutionStatus.RUNNING:
        expires = execution.lease_expires_at
        if expires is not None and expires > now:
            return (
                f"running (attempt {execution.attempts}): lease held by {execution.lease_owner} "
                f"until {at_and_ago(expires, now)}"
            )
        return (
            f"running, but its lease expired {at_and_ago(expires, now)}: any worker will reclaim it"
        )
    due = execution.next_attempt_at
    if status == ExecutionStatus.PENDING:
        if due is not None and due > now:
            return f"pending: due {at_and_ago(due, now)}"
        return f"pending: waiting for a worker to claim it since {at_and_ago(due, now)}"
    if status == ExecutionStatus.RETRY_WAIT:
        return f"waiting to retry (attempt {execution.attempts + 1}) {at_and_ago(due, now)}"
    if status == ExecutionStatus.SUSPENDED:
        return f"suspended: waiting for an event, deadline {at_and_ago(due, now)}"
    return str(status)
