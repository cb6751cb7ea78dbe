"""An execution in sight, for the admin pages: its lease, the takeovers of it and its next
attempt (with the provider's Retry-After behind it) in words, and its request's timeline.

Read-only. A takeover is what a claim recorded when it took an expired lease (LEASE_TAKEN_OVER);
reconciliation's Workers page and case explanations read takeovers through here too. The lease
sentence reads the holder's registered lease length from the row its heartbeat keeps
(worker_process, written by sql.WORKER_SEEN).
"""

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import connection
from django.utils.html import format_html, format_html_join

from orquestador.display import age, clip, utc

from ..models import AuditEvent, AuditType, Execution, ExecutionStatus

# The lease length a worker registered with (its WORKER_LEASE_SECONDS), so a held lease can say
# when it was last renewed.
# Locks: none.
# Index: worker_process_pkey (owner).
WORKER_LEASE_SECONDS = "SELECT lease_seconds FROM worker_process WHERE owner = %(owner)s"


@dataclass(frozen=True)
class Takeover:
    """A worker that took over an expired lease, as the claim recorded it (LEASE_TAKEN_OVER)."""

    at: datetime  # when it was taken over
    lease_expired_at: datetime  # when the previous holder's lease ran out
    previous_owner: str
    previous_token: int
    new_owner: str
    new_token: int


def takeover(event: AuditEvent) -> Takeover:
    """A LEASE_TAKEN_OVER event read back."""
    payload = event.payload
    expired = payload.get("leaseExpiredAt")
    return Takeover(
        at=event.created_at,
        lease_expired_at=datetime.fromisoformat(expired) if expired else event.created_at,
        previous_owner=str(payload.get("previousOwner") or "an unknown worker"),
        previous_token=int(payload.get("previousToken") or 0),
        new_owner=str(payload.get("newOwner") or "a worker"),
        new_token=int(payload.get("newToken") or 0),
    )


def takeovers(timeline: list[AuditEvent]) -> list[Takeover]:
    """The takeovers among `timeline`'s events, in its order."""
    return [takeover(event) for event in timeline if event.type == AuditType.LEASE_TAKEN_OVER]


def takeover_sentence(found: Takeover) -> str:
    """One takeover in words, for the Execution and Workers pages."""
    return (
        f"{found.previous_owner} lost its lease (token {found.previous_token}) at "
        f"{utc(found.lease_expired_at)}; {found.new_owner} took the execution over at "
        f"{utc(found.at)} as token {found.new_token}."
    )


def execution_takeovers(execution: Execution) -> list[str]:
    """Each takeover of this execution's lease, oldest first, in words."""
    return [
        takeover_sentence(takeover(event))
        for event in AuditEvent.objects.filter(
            execution=execution, type=AuditType.LEASE_TAKEN_OVER
        ).order_by("id")
    ]


def _registered_lease_seconds(owner: str | None) -> float | None:
    """The lease length the worker `owner` registered with, or None when it has no row."""
    with connection.cursor() as cursor:
        cursor.execute(WORKER_LEASE_SECONDS, {"owner": owner})
        row = cursor.fetchone()
    return None if row is None else float(row[0])


def lease_sentence(execution: Execution, now: datetime) -> str:
    """Who holds the execution's lease and how fresh it is, or what happens next, in words."""
    status = execution.status
    if status == ExecutionStatus.RUNNING and execution.lease_expires_at is not None:
        if execution.lease_expires_at > now:
            lease_seconds = _registered_lease_seconds(execution.lease_owner)
            renewed = ""
            if lease_seconds is not None:
                at = execution.lease_expires_at.timestamp() - lease_seconds
                renewed = f", renewed {age(now.timestamp() - at)} ago"
            left = age((execution.lease_expires_at - now).total_seconds())
            return f"Lease held by {execution.lease_owner}{renewed}; it runs out in {left}."
        ago = age((now - execution.lease_expires_at).total_seconds())
        return (
            f"Lease of {execution.lease_owner} expired {ago} ago; any worker will reclaim it "
            "(a new attempt under a new fencing token)."
        )
    if status in (ExecutionStatus.PENDING, ExecutionStatus.RETRY_WAIT):
        due = execution.next_attempt_at
        if due is None or due <= now:
            return f"{status}: due now; the next free worker claims it."
        retry = (
            AuditEvent.objects.filter(execution=execution, type=AuditType.RETRY_SCHEDULED)
            .order_by("-id")
            .first()
        )
        behind = ""
        if retry is not None and retry.payload.get("delaySeconds") is not None:
            behind = (
                f" (a delay of {retry.payload['delaySeconds']} s after "
                f"{retry.payload.get('errorCode')}"
            )
            asked = retry.payload.get("retryAfterSeconds")
            if asked is not None:
                behind += f", the provider's Retry-After: {asked} s"
                if asked > retry.payload["delaySeconds"]:
                    behind += ", capped at WORKER_RETRY_AFTER_MAX_SECONDS"
            behind += ")"
        in_ = age((due - now).total_seconds())
        return f"{status}: next attempt at {utc(due)}, in {in_}{behind}."
    return f"{status}: no lease (nothing runs it now)."


TIMELINE_EVENTS = 200  # the latest events of a request shown on its pages
TIMELINE_SUMMARY_CHARS = 140  # characters of one event's payload shown


def timeline_html(request_id: Any) -> str:
    """The request's audit events, numbered per request, UTC to the second, as an HTML table."""
    events = list(
        AuditEvent.objects.filter(request_id=request_id).order_by("-id")[:TIMELINE_EVENTS]
    )
    first = (
        AuditEvent.objects.filter(request_id=request_id, id__lt=events[-1].pk).count()
        if events
        else 0
    )
    rows = format_html_join(
        "",
        '<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td title="{}">{}</td><td>{}</td></tr>',
        (
            (
                first + number,
                utc(event.created_at),
                event.type,
                event.actor,
                event.execution_id or "",
                str(event.execution_id or "—")[:8],
                clip(
                    json.dumps(event.payload, sort_keys=True, ensure_ascii=False),
                    TIMELINE_SUMMARY_CHARS,
                ),
            )
            for number, event in enumerate(reversed(events), start=1)
        ),
    )
    return format_html(
        "<table><thead><tr><th>#</th><th>when</th><th>type</th><th>actor</th><th>execution</th>"
        "<th>payload</th></tr></thead><tbody>{}</tbody></table>",
        rows,
    )
