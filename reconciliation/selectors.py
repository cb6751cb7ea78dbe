"""Reads for the reconciliation admin: the queue, one case with its evidence, the audit timeline.

Read-only; no locks. The queue of open cases is ordered `created_at, id`, the order of the
partial index `execution_reconcile_idx` (status = RECONCILIATION_REQUIRED), so the oldest case
comes first and the order is total, as keyset pagination needs.
"""

import json
import uuid
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.db.models import (
    Count,
    Exists,
    IntegerField,
    JSONField,
    Min,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    Value,
)
from django.db.models.fields.json import KeyTextTransform
from django.db.models.functions import Cast, Coalesce
from django.utils import timezone

from actions.lookup import supports_lookup
from executions.models import (
    ActionExecution,
    AuditEvent,
    AuditType,
    Execution,
    ExecutionStatus,
    Request,
)
from orquestador.display import clip

from .evidence import checkpoint_evidence, is_uncertain, lookup_attempt, safe_error, speaks_of
from .models import BlockedRequest, ReconciliationCase

QUEUE_ORDER = ("created_at", "id")
TIMELINE_PAYLOAD_CHARS = 4000  # characters of an audit payload shown on the case page
TIMELINE_SUMMARY_CHARS = 100  # characters of its one-line summary

# evidence.lookup_attempt in SQL: the attempt a recorded lookup was asked about.
LOOKUP_ATTEMPT = Coalesce(
    Cast(KeyTextTransform("attempt", "payload"), IntegerField()),
    Value(1),
    output_field=IntegerField(),
)


def _current_lookups(execution: Any) -> QuerySet[AuditEvent]:
    """The lookups of an execution that speak of the current attempt of their action, newest
    first: an answer about an earlier attempt is no evidence about the one now in doubt."""
    current = ActionExecution.objects.filter(
        execution_id=OuterRef("execution_id"),
        action_id=OuterRef("action"),
        attempt=OuterRef("about"),
    )
    return (
        AuditEvent.objects.filter(execution=execution, type=AuditType.RECONCILIATION_EVIDENCE)
        .alias(about=LOOKUP_ATTEMPT, action=KeyTextTransform("actionId", "payload"))
        .filter(Exists(current))
        .order_by("-id")
    )


def cases() -> QuerySet[ReconciliationCase]:
    """Executions awaiting an operator, and those an operator has resolved."""
    resolved = AuditEvent.objects.filter(
        execution=OuterRef("pk"), type=AuditType.RECONCILIATION_RESOLVED
    )
    lookups = _current_lookups(OuterRef("pk"))
    # The two-person rule's latest word on the case: PROPOSED means a replay awaits approval.
    decisions = AuditEvent.objects.filter(
        execution=OuterRef("pk"),
        type__in=(
            AuditType.RECONCILIATION_PROPOSED,
            AuditType.RECONCILIATION_REJECTED,
            AuditType.RECONCILIATION_RESOLVED,
        ),
    ).order_by("-id")
    return (
        ReconciliationCase.objects.filter(
            Q(status=ExecutionStatus.RECONCILIATION_REQUIRED) | Q(Exists(resolved))
        )
        .select_related("request", "flow")
        .annotate(
            lookup_asked=Exists(lookups),
            lookup_happened=Subquery(
                lookups.values("payload__happened")[:1], output_field=JSONField()
            ),
            latest_decision=Subquery(decisions.values("type")[:1]),
            # The latest resolution's who and how, for the resolved cases' columns.
            resolved_by=Subquery(resolved.order_by("-id").values("actor")[:1]),
            resolved_how=Subquery(
                resolved.order_by("-id").values("payload__resolution")[:1],
                output_field=JSONField(),
            ),
        )
        .order_by(*QUEUE_ORDER)
    )


def blocked_requests() -> QuerySet[BlockedRequest]:
    """Requests held by an execution, longest-held first (served by request_blocked_idx)."""
    return (
        BlockedRequest.objects.filter(blocked_by__isnull=False)
        .select_related("flow", "blocked_by")
        .order_by("updated_at", "id")
    )


def with_external_key(queryset: QuerySet, key: str, *, execution_field: str) -> QuerySet:
    """Narrow to rows whose execution has a checkpoint with this external key."""
    match = ActionExecution.objects.filter(execution=OuterRef(execution_field), external_key=key)
    return queryset.filter(Exists(match))


def with_capability(queryset: QuerySet, capability: str, *, execution_field: str) -> QuerySet:
    """Narrow to rows whose execution has a checkpoint of `capability@version`."""
    name, _, version = capability.rpartition("@")
    match = ActionExecution.objects.filter(
        execution=OuterRef(execution_field), capability=name, capability_version=version
    )
    return queryset.filter(Exists(match))


def capabilities(*, statuses: tuple[str, ...] | None = None) -> list[str]:
    """The `capability@version` names used by checkpoints of executions in these statuses."""
    rows = ActionExecution.objects.all()
    if statuses is not None:
        rows = rows.filter(execution__status__in=statuses)
    # order_by(): the model's default ordering would join DISTINCT and repeat each name.
    pairs = rows.order_by().values_list("capability", "capability_version").distinct()
    return sorted(f"{name}@{version}" for name, version in pairs)


def as_uuid(text: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(text.strip())
    except ValueError:
        return None


@dataclass(frozen=True)
class CheckpointView:
    checkpoint: ActionExecution
    evidence: dict[str, Any]
    uncertain: bool
    error: str
    lookup_available: bool  # the route offers a lookup by external key


@dataclass(frozen=True)
class TimelineEntry:
    event: AuditEvent
    payload: str  # pretty JSON, cut short
    summary: str  # the payload on one line, cut shorter


@dataclass(frozen=True)
class LookupView:
    event: AuditEvent
    output: str  # pretty JSON of the provider's output, or "" when it gave none
    earlier: bool = False  # about an earlier attempt than its action's current one

    @property
    def payload(self) -> dict[str, Any]:
        return self.event.payload

    @property
    def attempt(self) -> int:
        """The attempt of the write it was asked about."""
        return lookup_attempt(self.payload)


@dataclass(frozen=True)
class CaseDetail:
    execution: Execution
    request: Request
    checkpoints: list[CheckpointView]
    lookups: list[LookupView]
    timeline: list[TimelineEntry]

    @property
    def is_open(self) -> bool:
        return self.execution.status == ExecutionStatus.RECONCILIATION_REQUIRED

    @property
    def cancellation(self) -> AuditEvent | None:
        """The cancellation of this execution, if a client or operator asked for one."""
        for entry in self.timeline:
            event = entry.event
            if (
                event.type == AuditType.EXECUTION_CANCELLED
                and event.execution_id == self.execution.pk
            ):
                return event
        return None

    @property
    def uncertain(self) -> list[CheckpointView]:
        return [view for view in self.checkpoints if view.uncertain]

    def checkpoint(self, action_id: str) -> ActionExecution | None:
        return next(
            (v.checkpoint for v in self.checkpoints if v.checkpoint.action_id == action_id), None
        )

    def latest_lookup_view(self, action_id: str) -> LookupView | None:
        """The newest lookup about the action's current attempt (None: not asked about it)."""
        checkpoint = self.checkpoint(action_id)
        if checkpoint is None:
            return None
        for view in reversed(self.lookups):
            if speaks_of(view.payload, checkpoint):
                return view
        return None

    def earlier_lookup_view(self, action_id: str) -> LookupView | None:
        """The newest lookup about an earlier attempt of the action, said apart on the page."""
        for view in reversed(self.lookups):
            if view.earlier and view.payload.get("actionId") == action_id:
                return view
        return None

    def latest_lookup(self, action_id: str) -> dict[str, Any] | None:
        view = self.latest_lookup_view(action_id)
        return None if view is None else view.payload


def _pretty(payload: Any) -> str:
    text = json.dumps(payload, indent=2, sort_keys=True, ensure_ascii=False)
    if len(text) <= TIMELINE_PAYLOAD_CHARS:
        return text
    return text[: TIMELINE_PAYLOAD_CHARS - 1] + "…"


def case_detail(*, execution_id: uuid.UUID | str) -> CaseDetail:
    """Everything the case page shows about one execution. Raises Execution.DoesNotExist."""
    execution = Execution.objects.select_related("request", "request__flow", "flow").get(
        pk=execution_id
    )
    checkpoints = [
        CheckpointView(
            checkpoint=checkpoint,
            evidence=checkpoint_evidence(checkpoint),
            uncertain=is_uncertain(checkpoint),
            error=safe_error(checkpoint) or "",
            lookup_available=is_uncertain(checkpoint)
            and supports_lookup(checkpoint.capability, checkpoint.capability_version),
        )
        for checkpoint in ActionExecution.objects.filter(execution=execution).order_by(
            "sequence", "id"
        )
    ]
    attempts = {view.checkpoint.action_id: view.checkpoint.attempt for view in checkpoints}
    lookups = [
        LookupView(
            event=event,
            output="" if event.payload.get("output") is None else _pretty(event.payload["output"]),
            earlier=lookup_attempt(event.payload) < attempts.get(event.payload.get("actionId"), 0),
        )
        for event in AuditEvent.objects.filter(
            execution=execution, type=AuditType.RECONCILIATION_EVIDENCE
        ).order_by("id")
    ]
    timeline = [
        TimelineEntry(
            event=event,
            payload=_pretty(event.payload),
            summary=clip(
                json.dumps(event.payload, sort_keys=True, ensure_ascii=False),
                TIMELINE_SUMMARY_CHARS,
            ),
        )
        for event in AuditEvent.objects.filter(request_id=execution.request_id).order_by("id")
    ]
    return CaseDetail(
        execution=execution,
        request=execution.request,
        checkpoints=checkpoints,
        lookups=lookups,
        timeline=timeline,
    )


def latest_lookup(*, checkpoint: ActionExecution) -> dict[str, Any] | None:
    """The last lookup recorded about the checkpoint's current attempt, with its audit event id
    (None: the provider was not asked about this attempt)."""
    event = (
        AuditEvent.objects.filter(
            execution_id=checkpoint.execution_id,
            type=AuditType.RECONCILIATION_EVIDENCE,
            payload__actionId=checkpoint.action_id,
        )
        .alias(about=LOOKUP_ATTEMPT)
        .filter(about=checkpoint.attempt)
        .order_by("-id")
        .first()
    )
    if event is None:
        return None
    return {**event.payload, "auditEventId": event.pk, "recordedAt": event.created_at.isoformat()}


def last_settlement(*, execution_id: uuid.UUID | str) -> AuditEvent | None:
    """The latest resolution or cancellation of an execution, for the operator who came second."""
    as_id = as_uuid(str(execution_id))
    if as_id is None:
        return None
    return (
        AuditEvent.objects.filter(
            execution_id=as_id,
            type__in=(AuditType.RECONCILIATION_RESOLVED, AuditType.EXECUTION_CANCELLED),
        )
        .order_by("-id")
        .first()
    )


@dataclass(frozen=True)
class Overview:
    """The admin home's view of the desk."""

    open_cases: int
    oldest: Any  # created_at of the oldest open case, or None
    by_capability: list[tuple[str, int]]
    resolved_by_people: int  # in the last 24 hours
    resolved_automatically: int  # in the last 24 hours, by system:prober


# The actor of automatic resolutions (RECONCILIATION.md#automatic-probes).
AUTOMATIC_ACTOR = "system:prober"


def overview() -> Overview:
    """Open cases (served by execution_reconcile_idx), by capability, and the day's resolutions."""
    open_rows = Execution.objects.filter(status=ExecutionStatus.RECONCILIATION_REQUIRED)
    totals = open_rows.aggregate(count=Count("id"), oldest=Min("created_at"))
    by_capability = (
        ActionExecution.objects.filter(
            execution__status=ExecutionStatus.RECONCILIATION_REQUIRED,
            status__in=("RUNNING", "UNKNOWN"),
        )
        .order_by()
        .values_list("capability", "capability_version")
        .annotate(cases=Count("execution_id", distinct=True))
    )
    day = AuditEvent.objects.filter(
        type=AuditType.RECONCILIATION_RESOLVED,
        created_at__gte=timezone.now() - timedelta(hours=24),
    )
    automatic = day.filter(actor=AUTOMATIC_ACTOR).count()
    return Overview(
        open_cases=totals["count"],
        oldest=totals["oldest"],
        by_capability=sorted(
            ((f"{name}@{version}", cases) for name, version, cases in by_capability),
            key=lambda item: (-item[1], item[0]),
        ),
        resolved_by_people=day.count() - automatic,
        resolved_automatically=automatic,
    )
