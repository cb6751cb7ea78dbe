"""Workers and leases in sight: each runworker's registry row, read as live / silent / gone,
with what it holds and the leases it lost or took over; an execution's lease, takeovers and next
attempt (and the provider's Retry-After behind it) in words; a request's timeline.

Read-only (the worker writes its row: sql.WORKER_SEEN, once per heartbeat). A worker is live
while it was seen within two renewal intervals, silent until its leases would have run out, and
gone after that: whatever it held is then reclaimable by any worker.
"""

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.utils import timezone
from django.utils.html import format_html, format_html_join

from executions.models import AuditEvent, AuditType, Execution, ExecutionStatus

from . import explain
from .evidence import clip
from .models import WorkerProcess

LIVE, SILENT, GONE = "live", "silent", "gone"


def state_of(worker: WorkerProcess, now: datetime) -> str:
    quiet = (now - worker.last_seen_at).total_seconds()
    if quiet <= 2 * worker.renew_seconds:
        return LIVE
    if quiet <= worker.lease_seconds:
        return SILENT
    return GONE


RECENT_TAKEOVERS = 200  # the latest takeovers the Workers page reads (audit_takeover_idx)


@dataclass(frozen=True)
class WorkerView:
    worker: WorkerProcess
    state: str
    seen_ago: str
    holding: list[Execution]
    lost: list[explain.Takeover] = field(default_factory=list)  # its leases others took over
    took: list[explain.Takeover] = field(default_factory=list)  # leases it took over


def _recent_takeovers() -> list[explain.Takeover]:
    """The latest takeovers, newest first (a partial index holds them alone)."""
    return [
        explain.takeover(event)
        for event in AuditEvent.objects.filter(type=AuditType.LEASE_TAKEN_OVER).order_by("-id")[
            :RECENT_TAKEOVERS
        ]
    ]


def workers(*, now: datetime | None = None, limit: int = 200) -> list[WorkerView]:
    """The registered workers, most recently seen first, with the executions each holds."""
    now = now or timezone.now()
    rows = list(WorkerProcess.objects.order_by("-last_seen_at")[:limit])
    held: dict[str, list[Execution]] = {}
    for execution in Execution.objects.filter(
        status=ExecutionStatus.RUNNING, lease_owner__in=[w.owner for w in rows]
    ).order_by("lease_expires_at")[: limit * 10]:
        if execution.lease_owner is not None:  # always: matched by lease_owner__in
            held.setdefault(execution.lease_owner, []).append(execution)
    lost: dict[str, list[explain.Takeover]] = {}
    took: dict[str, list[explain.Takeover]] = {}
    for found in _recent_takeovers():
        lost.setdefault(found.previous_owner, []).append(found)
        took.setdefault(found.new_owner, []).append(found)
    return [
        WorkerView(
            worker=w,
            state=state_of(w, now),
            seen_ago=explain.age((now - w.last_seen_at).total_seconds()),
            holding=held.get(w.owner, []),
            lost=lost.get(w.owner, []),
            took=took.get(w.owner, []),
        )
        for w in rows
    ]


def execution_takeovers(execution: Execution) -> list[str]:
    """Each takeover of this execution's lease, oldest first, in words."""
    return [
        explain.takeover_sentence(explain.takeover(event))
        for event in AuditEvent.objects.filter(
            execution=execution, type=AuditType.LEASE_TAKEN_OVER
        ).order_by("id")
    ]


def lease_sentence(execution: Execution, now: datetime) -> str:
    """Who holds the execution's lease and how fresh it is, or what happens next, in words."""
    status = execution.status
    if status == ExecutionStatus.RUNNING and execution.lease_expires_at is not None:
        if execution.lease_expires_at > now:
            worker = WorkerProcess.objects.filter(owner=execution.lease_owner).first()
            renewed = ""
            if worker is not None:
                at = execution.lease_expires_at.timestamp() - worker.lease_seconds
                renewed = f", renewed {explain.age(now.timestamp() - at)} ago"
            left = explain.age((execution.lease_expires_at - now).total_seconds())
            return f"Lease held by {execution.lease_owner}{renewed}; it runs out in {left}."
        ago = explain.age((now - execution.lease_expires_at).total_seconds())
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
        in_ = explain.age((due - now).total_seconds())
        return f"{status}: next attempt at {explain.utc(due)}, in {in_}{behind}."
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
                explain.utc(event.created_at),
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
