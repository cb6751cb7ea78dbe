"""The durable model (docs/worker-protocol.md#data-model): flows, requests, executions,
checkpoints and the audit trail; their vocabularies are in executions/choices.py.

Invariants kept by the database itself: statuses and effects are CHECK constraints; a checkpoint
is unique per (execution, action_id), an event per (execution, eventId); a RUNNING execution has
a lease owner and expiry, mirrored in `next_attempt_at`, so one partial index serves the whole
claim (`next_attempt_at, created_at, id`); audit events are append-only (a trigger refuses UPDATE
and DELETE for every role). Writes go through services and the queue SQL in `executions/sql/`;
lease times come from the database clock.
"""

import uuid

from django.contrib.postgres.indexes import GinIndex
from django.db import models
from django.db.models import Q
from django.db.models.functions import Now

from . import lookups  # noqa: F401 (registers `one_of`, which the constraints below use)
from .choices import (
    CLAIMABLE_STATUSES,
    PURGEABLE_STATUSES,
    TERMINAL_STATUSES,
    AuditType,
    CheckpointStatus,
    Effect,
    EventStatus,
    ExecutionStatus,
)

__all__ = [
    "CLAIMABLE_STATUSES",
    "PURGEABLE_STATUSES",
    "TERMINAL_STATUSES",
    "ActionAttempt",
    "ActionExecution",
    "AuditEvent",
    "AuditType",
    "CheckpointStatus",
    "Effect",
    "EventStatus",
    "Execution",
    "ExecutionEvent",
    "ExecutionStatus",
    "Flow",
    "Request",
]


def _listed(*prefix: str) -> list[str]:
    """An index's fields for a list: equality columns first, then the list's order."""
    return [*prefix, "created_at", "id"]


def _in(field: str, choices: type[models.TextChoices]) -> Q:
    """A CHECK constraint's test of a vocabulary, as one array constant (executions/lookups.py)."""
    return Q(**{f"{field}__one_of": choices.values})


class Flow(models.Model):
    """An immutable, published flow version (docs/flow-format.md)."""

    key = models.CharField(max_length=100)
    version = models.PositiveIntegerField()
    definition = models.JSONField()
    checksum = models.CharField(max_length=64, help_text="SHA-256 of the canonical JSON.")
    published_at = models.DateTimeField(db_default=Now())

    class Meta:
        db_table = "flow"
        constraints = [
            models.UniqueConstraint(fields=["key", "version"], name="flow_key_version_uniq"),
            models.CheckConstraint(condition=Q(version__gte=1), name="flow_version_positive"),
        ]

    def __str__(self) -> str:
        return f"{self.key}@{self.version}"


class Request(models.Model):
    """A business request moving through its pinned flow version."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    # Flows are never deleted, so no index serves the foreign key (see migration 0004).
    flow = models.ForeignKey(
        Flow, on_delete=models.PROTECT, related_name="requests", db_index=False
    )
    owner = models.CharField(max_length=255, help_text="Subject (JWT sub) that owns it.")
    scope = models.CharField(max_length=255, help_text="Tenant (JWT tenant).")
    data = models.JSONField(default=dict)
    state = models.CharField(max_length=100)
    revision = models.BigIntegerField(db_default=1, help_text="+1 on every accepted change.")
    version = models.BigIntegerField(db_default=1, help_text="+1 on every row update.")
    blocked_by = models.ForeignKey(
        "Execution",
        on_delete=models.PROTECT,
        db_index=False,  # set and cleared on every transition; request_blocked_idx lists them
        null=True,
        blank=True,
        related_name="+",
        help_text="The execution that holds this request, if any.",
    )
    created_at = models.DateTimeField(db_default=Now())
    updated_at = models.DateTimeField(db_default=Now())

    class Meta:
        db_table = "request"
        indexes = [
            models.Index(
                fields=["updated_at"],
                name="request_blocked_idx",
                condition=Q(blocked_by__isnull=False),
            ),
            # The list's access paths (GET /api/v1/requests, newest first by created_at, id): the
            # owner's, the tenant's, and the tenant's by state, by flow version, blocked only,
            # and by last change, carrying the keyset and the owner so that a page of
            # updatedAfter picks its ids from the index alone (docs/api.md#lists).
            models.Index(fields=_listed("scope", "owner"), name="request_owner_list_idx"),
            models.Index(fields=_listed("scope"), name="request_tenant_list_idx"),
            models.Index(fields=_listed("scope", "state"), name="request_state_list_idx"),
            models.Index(fields=_listed("scope", "flow"), name="request_flow_list_idx"),
            models.Index(
                fields=_listed("scope"),
                name="request_blocked_list_idx",
                condition=Q(blocked_by__isnull=False),
            ),
            models.Index(
                fields=["scope", "updated_at", "created_at", "id"],
                name="request_updated_at_list_idx",
                include=["owner"],
            ),
            # The admin's search (executions/admin/search.py, migration 0034): by an exact owner
            # whatever the tenant, and by what a case summary shows (`data @> {"customer": ...}`:
            # every path to a value of the data, hashed).
            models.Index(fields=["owner"], name="request_owner_search_idx"),
            GinIndex(
                fields=["data"],
                opclasses=["jsonb_path_ops"],
                name="request_data_search_idx",
                fastupdate=True,
                gin_pending_list_limit=256,
            ),
        ]
        constraints = [
            models.CheckConstraint(condition=Q(revision__gte=1), name="request_revision_positive"),
            models.CheckConstraint(condition=Q(version__gte=1), name="request_version_positive"),
        ]

    def __str__(self) -> str:
        return str(self.id)


class Execution(models.Model):
    """One accepted transition being run, claimed under a lease with a fencing token."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    # execution_request_idx (request, created_at) serves the request key; flows are never deleted.
    request = models.ForeignKey(
        Request, on_delete=models.PROTECT, related_name="executions", db_index=False
    )
    flow = models.ForeignKey(
        Flow, on_delete=models.PROTECT, related_name="executions", db_index=False
    )
    transition_id = models.CharField(max_length=100)
    # Copies of the request's scope and owner, so a list of executions walks one index of this
    # table in either access mode. The database keeps them: a trigger sets both from the request
    # on every insert, whatever the insert says (migration 0012), and a request's scope and owner
    # never change.
    scope = models.CharField(
        max_length=255, db_default="", editable=False, help_text="Its request's tenant."
    )
    owner = models.CharField(
        max_length=255, db_default="", editable=False, help_text="Its request's owner."
    )
    status = models.CharField(
        max_length=32, choices=ExecutionStatus.choices, db_default=ExecutionStatus.PENDING
    )
    accepted_revision = models.BigIntegerField(
        help_text="The request revision right after the acceptance."
    )
    attempts = models.IntegerField(db_default=0)
    fencing_token = models.BigIntegerField(db_default=0)
    lease_owner = models.CharField(max_length=200, null=True, blank=True)  # noqa: DJ001
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    next_attempt_at = models.DateTimeField(
        db_default=Now(),
        help_text="When the claim may take it: creation or backoff time; for RUNNING, the lease "
        "expiry.",
    )
    result = models.JSONField(null=True, blank=True)
    error_code = models.CharField(max_length=64, null=True, blank=True)  # noqa: DJ001
    error_detail = models.TextField(null=True, blank=True)  # noqa: DJ001
    actor_snapshot = models.JSONField(default=dict)
    # Who caused the current or next dispatch; the package's `principal`
    # (docs/worker-protocol.md#runtime-spi). Set with the event that causes the dispatch: the
    # acceptance, a resume; the claim clears it (system) when it takes over an expired lease or a
    # wait past its deadline. See executions/sql/claims.py.
    dispatch_principal = models.JSONField(
        null=True,
        blank=True,
        help_text="Who caused the current or next dispatch ({subject, scope, roles}); "
        "null: system (a timeout, recovery, or an operator's requeue).",
    )
    idempotency_key = models.CharField(max_length=255, null=True, blank=True)  # noqa: DJ001
    idempotency_fingerprint = models.CharField(max_length=64, null=True, blank=True)  # noqa: DJ001
    created_at = models.DateTimeField(db_default=Now())
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    purged_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="When purgehistory removed its checkpoints and payloads (history.py).",
    )
    # The poison cap (WORKER_MAX_RECLAIMS): when the latest claim was taken, and how many
    # consecutive takeovers after lease expiry found no checkpoint SUCCEEDED since the claim
    # before them. Written only by the claim statement (executions/sql/claims.py).
    claimed_at = models.DateTimeField(null=True, blank=True)
    reclaims = models.IntegerField(db_default=0)
    # Set, with the forward path's error code, when the execution starts compensating; a holder
    # that finds it set runs the compensations instead of the actions
    # (executions/queue/compensation.py).
    compensation_cause = models.CharField(  # noqa: DJ001
        max_length=64,
        null=True,
        blank=True,
        help_text="The errorCode its forward path failed with, once it compensates.",
    )
    # Its error detail, kept with the cause: a compensation step's retry or wait rewrites the
    # execution's error, and COMPENSATED shows the cause again (executions/sql/compensation.py).
    compensation_detail = models.TextField(  # noqa: DJ001
        null=True,
        blank=True,
        help_text="The error detail its forward path failed with, once it compensates.",
    )
    # Written by the acceptance only, read by the claim (executions/sql/claims.py): every run of
    # this execution continues that trace (executions/worker/spans.py).
    trace_context = models.JSONField(
        null=True,
        blank=True,
        editable=False,
        help_text="The W3C trace context (traceparent, tracestate) of the acceptance; null when "
        "tracing was off.",
    )

    class Meta:
        db_table = "execution"
        # Cancelling is an operator's write with its own permission (the admin's "Cancel
        # execution"); the default add/change/delete stay unused, as for every model here.
        permissions = [("cancel_execution", "Can cancel an execution")]
        indexes = [
            # The claim's access path: live work only, in claim order. Finished executions are
            # not in it, so history does not slow the claim.
            models.Index(
                fields=["next_attempt_at", "created_at", "id"],
                name="execution_claim_idx",
                condition=Q(status__in=CLAIMABLE_STATUSES),
            ),
            # WORKER_FAIRNESS=tenant's access paths (executions/sql/fairness.py): live work by
            # tenant in claim order, and the executions each tenant holds right now.
            models.Index(
                fields=["scope", "next_attempt_at", "created_at", "id"],
                name="execution_fair_idx",
                condition=Q(status__in=CLAIMABLE_STATUSES),
            ),
            models.Index(
                fields=["scope", "lease_expires_at"],
                name="execution_held_idx",
                condition=Q(status=ExecutionStatus.RUNNING),
            ),
            models.Index(fields=["request", "created_at"], name="execution_request_idx"),
            # The list's access paths (GET /api/v1/executions, newest first by created_at, id):
            # the owner's, the tenant's, and the tenant's by status, by error code (failures
            # only) and by finish time (finished only; with the keyset and the owner, as the
            # requests' by last change); by request: execution_request_idx.
            models.Index(fields=_listed("scope", "owner"), name="execution_owner_list_idx"),
            models.Index(fields=_listed("scope"), name="execution_tenant_list_idx"),
            models.Index(fields=_listed("scope", "status"), name="execution_status_list_idx"),
            models.Index(
                fields=_listed("scope", "error_code"),
                name="execution_error_list_idx",
                condition=Q(error_code__isnull=False),
            ),
            models.Index(
                fields=["scope", "finished_at", "created_at", "id"],
                name="execution_finished_at_list_idx",
                include=["owner"],
                condition=Q(finished_at__isnull=False),
            ),
            models.Index(
                fields=["created_at"],
                name="execution_reconcile_idx",
                condition=Q(status=ExecutionStatus.RECONCILIATION_REQUIRED),
            ),
            # purgehistory's access path: finished history not purged yet, oldest first. Live
            # rows are not in it, so it costs one entry per execution, written when it finishes.
            models.Index(
                fields=["finished_at", "id"],
                name="execution_purge_idx",
                condition=Q(status__in=PURGEABLE_STATUSES, purged_at__isnull=True),
            ),
        ]
        constraints = [
            models.CheckConstraint(
                condition=_in("status", ExecutionStatus), name="execution_status_valid"
            ),
            models.CheckConstraint(condition=Q(attempts__gte=0), name="execution_attempts_nonneg"),
            models.CheckConstraint(
                condition=Q(fencing_token__gte=0), name="execution_token_nonneg"
            ),
            models.CheckConstraint(
                condition=~Q(status=ExecutionStatus.RUNNING)
                | (
                    Q(lease_owner__isnull=False)
                    & Q(lease_expires_at__isnull=False)
                    & Q(next_attempt_at=models.F("lease_expires_at"))
                ),
                name="execution_running_has_lease",
            ),
            models.CheckConstraint(
                condition=~Q(status__one_of=list(TERMINAL_STATUSES)) | Q(finished_at__isnull=False),
                name="execution_terminal_has_finished_at",
            ),
            models.UniqueConstraint(
                fields=["request", "idempotency_key"],
                name="execution_idempotency_uniq",
                condition=Q(idempotency_key__isnull=False),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.transition_id} {self.id}"


class AuditEvent(models.Model):
    """An append-only record of what happened to a request, by whom."""

    # audit_request_idx (request, id) serves the request key.
    request = models.ForeignKey(
        Request, on_delete=models.PROTECT, related_name="audit_events", db_index=False
    )
    execution = models.ForeignKey(
        Execution, on_delete=models.PROTECT, null=True, blank=True, related_name="audit_events"
    )
    type = models.CharField(max_length=40, choices=AuditType.choices)
    actor = models.CharField(max_length=255)
    payload = models.JSONField(default=dict)
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        db_table = "audit_event"
        indexes = [
            models.Index(fields=["request", "id"], name="audit_request_idx"),
            # The Workers page's recent takeovers; takeovers only, so other appends never touch it.
            models.Index(
                fields=["id"],
                name="audit_takeover_idx",
                condition=Q(type=AuditType.LEASE_TAKEN_OVER),
            ),
        ]
        constraints = [
            models.CheckConstraint(condition=_in("type", AuditType), name="audit_type_valid"),
        ]

    def __str__(self) -> str:
        return f"{self.type} {self.request_id}"


class ActionExecution(models.Model):
    """A checkpoint: one action of one execution, written before and after its adapter call."""

    # action_execution_action_uniq (execution, action_id) serves the execution key.
    execution = models.ForeignKey(
        Execution, on_delete=models.PROTECT, related_name="checkpoints", db_index=False
    )
    # An action's id (at most 100 characters), or a compensation step's "<id>:compensate".
    action_id = models.CharField(max_length=120)
    sequence = models.IntegerField()
    capability = models.CharField(max_length=200)
    capability_version = models.IntegerField()
    effect = models.CharField(
        max_length=24,
        choices=Effect.choices,
        help_text="Declared by the trusted adapter or contract, never by the flow.",
    )
    status = models.CharField(max_length=16, choices=CheckpointStatus.choices)
    input_hash = models.CharField(max_length=64, help_text="SHA-256 of the canonical input JSON.")
    external_key = models.CharField(
        max_length=200,
        help_text="executionId:actionId, or executionId:actionId:compensate",
    )
    attempt = models.IntegerField(db_default=1)
    fencing_token = models.BigIntegerField(help_text="The token of the writer.")
    output = models.JSONField(null=True, blank=True)
    error_code = models.CharField(max_length=64, null=True, blank=True)  # noqa: DJ001
    error_detail = models.TextField(null=True, blank=True)  # noqa: DJ001
    started_at = models.DateTimeField(db_default=Now())
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "action_execution"
        ordering = ["execution", "sequence"]
        indexes = [models.Index(fields=["external_key"], name="action_execution_key_idx")]
        constraints = [
            models.UniqueConstraint(
                fields=["execution", "action_id"], name="action_execution_action_uniq"
            ),
            models.CheckConstraint(
                condition=_in("status", CheckpointStatus), name="action_execution_status_valid"
            ),
            models.CheckConstraint(
                condition=Q(attempt__gte=1), name="action_execution_attempt_pos"
            ),
            models.CheckConstraint(
                condition=_in("effect", Effect), name="action_execution_effect_valid"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.execution_id}:{self.action_id}"


class ExecutionEvent(models.Model):
    """An event sent to an execution (`POST /api/v1/executions/{id}/events`).

    Kept for good, so the same `eventId` is recognised (a replay) however late it comes; an event
    that came before its wait was reached is KEPT until the execution gets there.
    """

    # execution_event_uniq (execution, event_id) serves the execution key.
    execution = models.ForeignKey(
        Execution, on_delete=models.PROTECT, related_name="events", db_index=False
    )
    event_id = models.CharField(max_length=255, help_text="The sender's eventId.")
    event = models.CharField(max_length=100)
    action_id = models.CharField(max_length=100, help_text="The wait action it is for.")
    payload = models.JSONField()
    fingerprint = models.CharField(
        max_length=64, help_text="SHA-256 of the canonical {event, payload}."
    )
    status = models.CharField(max_length=16, choices=EventStatus.choices)
    actor = models.CharField(max_length=255, help_text="The principal that sent it.")
    created_at = models.DateTimeField(db_default=Now())
    consumed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "execution_event"
        constraints = [
            models.UniqueConstraint(fields=["execution", "event_id"], name="execution_event_uniq"),
            models.CheckConstraint(
                condition=_in("status", EventStatus), name="execution_event_status_valid"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.event} {self.event_id}"


class ActionAttempt(models.Model):
    """An ended attempt of an action that did not succeed (FAILED or UNKNOWN), kept because its
    checkpoint holds only the latest attempt: written by the statement that settles it
    (sql.CHECKPOINT_SETTLE), read by the execution's timeline, removed by purgehistory with the
    checkpoints."""

    # action_attempt_uniq (execution, action_id, attempt) serves the execution key.
    execution = models.ForeignKey(
        Execution, on_delete=models.PROTECT, related_name="attempt_history", db_index=False
    )
    action_id = models.CharField(max_length=120)
    attempt = models.IntegerField()
    status = models.CharField(max_length=16, choices=CheckpointStatus.choices)
    error_code = models.CharField(max_length=64, null=True, blank=True)  # noqa: DJ001
    fencing_token = models.BigIntegerField(help_text="The token of the writer.")
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField()

    class Meta:
        db_table = "action_attempt"
        constraints = [
            models.UniqueConstraint(
                fields=["execution", "action_id", "attempt"], name="action_attempt_uniq"
            ),
            models.CheckConstraint(
                condition=_in("status", CheckpointStatus), name="action_attempt_status_valid"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.execution_id}:{self.action_id}#{self.attempt}"
