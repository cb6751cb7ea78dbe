"""An execution as a timeline, for the admin's execution and case pages: every attempt of every
action as a span on a time axis, the backoff before each retry, waits and asynchronous calls, and
the execution's moments from its audit trail (acceptance, suspensions, takeovers, reconciliation,
probes, resolutions, compensation, the end); each compensation step is a lane of its own.

Earlier attempts come from the attempt history (ActionAttempt); one that never ended left no row
and is marked at the takeover that followed (docs/adr/0012-pictures-drawn-on-the-server.md).
Read-only; `execution_timeline` reads and timelinesvg.py draws.
"""

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from orquestador.display import age, clip, utc

from ..flows.publication import find_transition
from ..models import (
    TERMINAL_STATUSES,
    ActionAttempt,
    ActionExecution,
    AuditEvent,
    AuditType,
    CheckpointStatus,
    Execution,
    ExecutionStatus,
)
from .diagram import EFFECT_STYLE
from .insight import takeover, takeover_sentence

MAX_EVENTS = 500  # audit events of one execution drawn at most
MAX_ATTEMPTS = 1000  # rows of attempt history drawn at most
MAX_LANES = 60  # action lanes drawn at most
TITLE_CHARS = 300  # characters of one tooltip

PROBER = "system:prober"  # the actor of automatic probes (reconciliation/probes.py)


@dataclass(frozen=True)
class Span:
    """Something that lasted: an attempt, a backoff, a wait, a stay in the queue or with an
    operator."""

    start: datetime
    end: datetime | None  # None: still going at the timeline's end
    kind: str  # succeeded, failed, unknown, running, waiting, accepted, backoff, queued, ...
    label: str  # drawn inside when it fits
    title: str  # the tooltip


@dataclass(frozen=True)
class Mark:
    """Something that happened at one moment."""

    at: datetime
    kind: str  # accepted, takeover, probe, lookup, proposal, rejected, resolved, ...
    label: str
    title: str


@dataclass
class Lane:
    title: str
    subtitle: str
    spans: list[Span] = field(default_factory=list)
    marks: list[Mark] = field(default_factory=list)


@dataclass(frozen=True)
class Timeline:
    start: datetime
    end: datetime
    live: bool  # the execution is not over: the end is now
    lanes: list[Lane]
    notes: list[str]
    now: datetime | None = None  # for a live execution: where "now" is drawn, open spans end


def duration(seconds: float) -> str:
    """A duration with the precision a timeline needs: "8 ms", "2.4 s", "3 min"."""
    if seconds < 1:
        return f"{max(0, round(seconds * 1000))} ms"
    if seconds < 10:
        return f"{seconds:.1f} s"
    return age(seconds)


def _span_title(what: str, start: datetime, end: datetime | None, detail: str = "") -> str:
    ended = f" → {utc(end)} ({duration((end - start).total_seconds())})" if end else " → not ended"
    return clip(f"{what}: {utc(start)}{ended}{'; ' + detail if detail else ''}", TITLE_CHARS)


def _payload(event: AuditEvent) -> dict[str, Any]:
    return event.payload if isinstance(event.payload, dict) else {}


def _moment(text: Any) -> datetime | None:
    try:
        return datetime.fromisoformat(str(text))
    except ValueError:
        return None


# ------------------------------------------------------------------------------
# The execution's own lanes
# ------------------------------------------------------------------------------
def _said(payload: dict[str, Any]) -> str:
    happened = payload.get("happened")
    return "found" if happened is True else "not found" if happened is False else "nothing settled"


class _Blank(dict[str, Any]):
    def __missing__(self, key: str) -> str:
        return "—"


# The audit events drawn as marks: type -> (lane, kind, label, what it says, from the event's
# actor and payload).
E, OPS = "execution", "operators"
MARKS: dict[str, tuple[str, str, str, str]] = {
    AuditType.TRANSITION_ACCEPTED: (E, "accepted", "accepted", "accepted by {actor}"),
    AuditType.LEASE_TAKEN_OVER: (E, "takeover", "takeover", "{takeover}"),
    AuditType.EXECUTION_RESUMED: (E, "resumed", "resumed", "resumed by {actor}"),
    AuditType.RECONCILIATION_REQUIRED: (E, "reconciliation", "to an operator", "{errorCode}"),
    AuditType.EXECUTION_CANCELLED: (E, "cancelled", "cancelled", "by {actor}: {reason}"),
    AuditType.TRANSITION_COMPLETED: (E, "completed", "completed", "rules {ruleIds}"),
    AuditType.EXECUTION_FAILED: (E, "ended-failed", "failed", "failed: {errorCode}"),
    AuditType.COMPENSATION_STARTED: (E, "compensating", "compensating", "undoing {compensates}"),
    AuditType.EXECUTION_COMPENSATED: (E, "compensated", "compensated", "undone: {errorCode}"),
    AuditType.RECONCILIATION_PROPOSED: (OPS, "proposal", "replay proposed", "by {actor}: {reason}"),
    AuditType.RECONCILIATION_REJECTED: (OPS, "rejected", "rejected", "by {actor}: {reason}"),
    AuditType.RECONCILIATION_RESOLVED: (OPS, "resolved", "resolved", "{resolution}: {reason}"),
}
# Spans opened by one event type and closed by another: opener -> (closer, kind, label, what).
OPENERS: dict[str, tuple[str, str, str, str]] = {
    AuditType.EXECUTION_SUSPENDED: (
        AuditType.EXECUTION_RESUMED, "suspended", "suspended", "until an event or a callback"
    ),
    AuditType.RECONCILIATION_REQUIRED: (
        AuditType.RECONCILIATION_RESOLVED, "operator", "with an operator", "with an operator"
    ),
}  # fmt: skip


def _mark(event: AuditEvent) -> tuple[str, Mark] | None:
    """The lane ("execution" or "operators") and mark an event is drawn as, if any."""
    payload = _payload(event)
    if event.type == AuditType.RECONCILIATION_EVIDENCE:
        probe = event.actor == PROBER
        who = "automatic probe" if probe else f"lookup by {event.actor}"
        return OPS, Mark(
            event.created_at,
            "probe" if probe else "lookup",
            f"{'probe' if probe else 'lookup'}: {_said(payload)}",
            f"{who} of {payload.get('actionId')}: the provider says {_said(payload)}",
        )
    if event.type not in MARKS:
        return None
    lane, kind, label, says = MARKS[event.type]
    fields = _Blank({k: v for k, v in payload.items() if isinstance(k, str)}, actor=event.actor)
    if event.type == AuditType.LEASE_TAKEN_OVER:
        fields["takeover"] = takeover_sentence(takeover(event))
    if payload.get("timedOut"):
        fields["actor"] = "its deadline (timed out)"
    title = f"{event.type}: {says.format_map(fields)}"
    return lane, Mark(event.created_at, kind, label, clip(title, TITLE_CHARS))


def _own_lanes(execution: Execution, events: list[AuditEvent]) -> list[Lane]:
    """The execution's lane (queued, suspended, with an operator; its moments) and, when there
    is any, the lane of operators and probes."""
    lane = Lane("execution", f"{execution.transition_id} · {execution.status}")
    operators = Lane("operators and probes", "evidence and resolutions")
    queued_until = execution.started_at or execution.finished_at
    lane.spans.append(
        Span(
            execution.created_at,
            queued_until,
            "queued",
            "queued",
            _span_title("queued until a worker claimed it", execution.created_at, queued_until),
        )
    )
    opened: dict[str, AuditEvent] = {}
    for event in events:
        for opener, (closer, kind, label, what) in OPENERS.items():
            if event.type == closer and opener in opened:
                begun = opened.pop(opener)
                title = _span_title(what, begun.created_at, event.created_at)
                lane.spans.append(Span(begun.created_at, event.created_at, kind, label, title))
        if event.type in OPENERS:
            opened[event.type] = event
        found = _mark(event)
        if found is not None:
            (lane if found[0] == "execution" else operators).marks.append(found[1])
    for opener, begun in opened.items():
        _, kind, label, what = OPENERS[opener]
        title = _span_title(what, begun.created_at, None)
        lane.spans.append(Span(begun.created_at, None, kind, label, title))
    return [lane, operators] if operators.marks else [lane]


# ------------------------------------------------------------------------------
# One lane per action
# ------------------------------------------------------------------------------
def _attempt_span(
    action_id: str,
    attempt: int,
    status: str,
    error_code: str | None,
    start: datetime,
    end: datetime | None,
    *,
    wait: bool = False,
) -> Span:
    kind = str(status).lower()  # succeeded, failed, unknown, running, waiting, accepted
    if wait:  # a wait is drawn as one, however it ended
        kind, label = "waiting", "timed out" if error_code else "waited"
        if status == CheckpointStatus.WAITING:
            label = "waiting"
        what = f"{action_id} waiting for its event ({status})"
    elif status == CheckpointStatus.ACCEPTED:
        what, label = f"{action_id} accepted by the provider, awaiting its callback", "callback"
    else:
        what, label = f"{action_id} attempt {attempt}: {status}", f"#{attempt}"
        if error_code:
            label += f" {error_code}"
    detail = error_code or ""
    return Span(start, end, kind, label, _span_title(what, start, end, detail))


def _action_lane(
    action: dict[str, Any] | None,
    action_id: str,
    checkpoint: ActionExecution | None,
    history: list[ActionAttempt],
    events: list[AuditEvent],
    *,
    running: bool,
) -> Lane:
    """An action's lane; `running`: whether the execution is RUNNING (a RUNNING checkpoint of an
    execution that is not never ended)."""
    if action is not None and "wait" in action:
        subtitle = f"wait: {(action.get('wait') or {}).get('event')}"
        subtitle += "" if checkpoint is not None else " (not reached)"
    elif checkpoint is not None:
        subtitle = (
            f"{checkpoint.capability}@{checkpoint.capability_version} · "
            f"{EFFECT_STYLE.get(checkpoint.effect, ('', checkpoint.effect))[1]}"
        )
    elif action is not None:
        subtitle = f"{action.get('capability')}@{action.get('version')} · not started"
    else:
        subtitle = ""
    lane = Lane(action_id, subtitle)
    known: dict[int, Span] = {}
    if checkpoint is not None:
        status = checkpoint.status
        if status == CheckpointStatus.RUNNING and not running:
            status = CheckpointStatus.UNKNOWN  # its worker stopped mid-call: it never ended
        known[checkpoint.attempt] = _attempt_span(
            action_id,
            checkpoint.attempt,
            status,
            checkpoint.error_code,
            checkpoint.started_at,
            checkpoint.finished_at,
            wait=action is not None and "wait" in action,
        )
    for row in history:
        if checkpoint and row.attempt == checkpoint.attempt and checkpoint.status != row.status:
            # The attempt as it ended; the checkpoint was settled since by an operator.
            lane.marks.append(
                Mark(
                    checkpoint.finished_at or row.finished_at,
                    "resolved",
                    f"→ {checkpoint.status}",
                    f"{action_id} attempt {row.attempt} settled {checkpoint.status} by an "
                    "operator's resolution",
                )
            )
        known[row.attempt] = _attempt_span(
            action_id, row.attempt, row.status, row.error_code, row.started_at, row.finished_at
        )
    lane.spans.extend(known[n] for n in sorted(known))
    for event in events:
        payload = _payload(event)
        if event.type == AuditType.RETRY_SCHEDULED and payload.get("actionId") == action_id:
            due = _moment(payload.get("nextAttemptAt"))
            delay = payload.get("delaySeconds")
            asked = payload.get("retryAfterSeconds")
            detail = f"after {payload.get('errorCode')}"
            if asked is not None:
                detail += f"; the provider's Retry-After: {asked} s"
            label = f"backoff {duration(float(delay))}" if isinstance(delay, int | float) else ""
            lane.spans.append(
                Span(
                    event.created_at,
                    due,
                    "backoff",
                    label,
                    _span_title(
                        f"backoff before attempt {payload.get('attempt', 0) + 1}",
                        event.created_at,
                        due,
                        detail,
                    ),
                )
            )
    _mark_interrupted(lane, action_id, known, events)
    return lane


def _mark_interrupted(
    lane: Lane, action_id: str, known: dict[int, Span], events: list[AuditEvent]
) -> None:
    """Attempts below the latest with no row never ended: each is marked at the first takeover
    after the attempt before it (or at the start of the one after, when none was recorded)."""
    if not known:
        return
    takeovers = [e for e in events if e.type == AuditType.LEASE_TAKEN_OVER]
    for attempt in range(1, max(known)):
        if attempt in known:
            continue
        before = known.get(attempt - 1)
        after = next((known[n] for n in sorted(known) if n > attempt), None)
        floor = (before.end or before.start) if before else None
        found = next((e for e in takeovers if floor is None or e.created_at >= floor), None)
        at = found.created_at if found else (after.start if after else None)
        if at is None:
            continue
        why = takeover_sentence(takeover(found)) if found else "no end was recorded"
        what = f"{action_id} attempt {attempt} never ended: {why}"
        lane.marks.append(Mark(at, "interrupted", f"#{attempt} cut off", what))


# ------------------------------------------------------------------------------
# The whole
# ------------------------------------------------------------------------------
def execution_timeline(execution: Execution, *, now: datetime) -> Timeline:
    """What the execution went through, lane by lane, from its rows and its audit trail."""
    events = list(AuditEvent.objects.filter(execution=execution).order_by("id")[: MAX_EVENTS + 1])
    notes = []
    if len(events) > MAX_EVENTS:
        events = events[:MAX_EVENTS]
        notes.append(f"Only the first {MAX_EVENTS} audit events of this execution are drawn.")
    checkpoints = {
        c.action_id: c
        for c in ActionExecution.objects.filter(execution=execution).order_by("sequence")
    }
    history: dict[str, list[ActionAttempt]] = {}
    for row in ActionAttempt.objects.filter(execution=execution).order_by("action_id", "attempt")[
        :MAX_ATTEMPTS
    ]:
        history.setdefault(row.action_id, []).append(row)
    if execution.purged_at is not None:
        notes.append(
            f"Its checkpoints and attempt history were purged at {utc(execution.purged_at)}: "
            "only the audit trail is drawn."
        )
    definition = execution.flow.definition if isinstance(execution.flow.definition, dict) else {}
    transition = find_transition(definition, execution.transition_id) or {}
    actions = {str(a.get("id")): a for a in transition.get("actions") or () if isinstance(a, dict)}
    order = list(actions) + [a for a in checkpoints if a not in actions]
    if len(order) > MAX_LANES:
        notes.append(f"Only the first {MAX_LANES} of its {len(order)} actions are drawn.")
        order = order[:MAX_LANES]

    lanes = _own_lanes(execution, events)
    for action_id in order:
        lanes.append(
            _action_lane(
                actions.get(action_id),
                action_id,
                checkpoints.get(action_id),
                history.get(action_id, []),
                events,
                running=execution.status == ExecutionStatus.RUNNING,
            )
        )

    live = execution.status not in TERMINAL_STATUSES  # reconciliation too: it is waiting
    moments = [execution.created_at]
    for lane in lanes:
        moments.extend(span.start for span in lane.spans)
        moments.extend(span.end for span in lane.spans if span.end is not None)
        moments.extend(mark.at for mark in lane.marks)
    end = max([*moments, execution.finished_at or execution.created_at, *([now] if live else [])])
    start = min(moments)
    if end <= start:
        end = start + timedelta(seconds=1)
    return Timeline(
        start=start, end=end, live=live, lanes=lanes, notes=notes, now=now if live else None
    )
