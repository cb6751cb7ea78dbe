"""The durable model's vocabularies: the statuses of executions, checkpoints and events, the
effects of a contract and the audit trail's event types, each a CHECK constraint in
executions/models.py, and the status sets the claim, the API and purgehistory read."""

from django.db import models


class ExecutionStatus(models.TextChoices):
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    RETRY_WAIT = "RETRY_WAIT"
    SUSPENDED = "SUSPENDED"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    RECONCILIATION_REQUIRED = "RECONCILIATION_REQUIRED"
    CANCELLED = "CANCELLED"
    # The transition failed after clean writes and its declared compensations undid them
    # (docs/flow-format.md#compensation): final, the request released in the state it had.
    COMPENSATED = "COMPENSATED"


# Claimable: the statuses the claim looks at (RUNNING only once its lease expired, SUSPENDED only
# once its wait's deadline passed: next_attempt_at is that deadline).
CLAIMABLE_STATUSES = (
    ExecutionStatus.PENDING,
    ExecutionStatus.RETRY_WAIT,
    ExecutionStatus.RUNNING,
    ExecutionStatus.SUSPENDED,
)
TERMINAL_STATUSES = (
    ExecutionStatus.SUCCEEDED,
    ExecutionStatus.FAILED,
    ExecutionStatus.CANCELLED,
    ExecutionStatus.COMPENSATED,
)
# What purgehistory may purge: final executions only, never RECONCILIATION_REQUIRED or live work.
PURGEABLE_STATUSES = (
    ExecutionStatus.SUCCEEDED,
    ExecutionStatus.FAILED,
    ExecutionStatus.CANCELLED,
    ExecutionStatus.COMPENSATED,
)


class CheckpointStatus(models.TextChoices):
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    UNKNOWN = "UNKNOWN"
    WAITING = "WAITING"  # a wait action: the execution is SUSPENDED until its event or deadline
    ACCEPTED = "ACCEPTED"  # an asynchronous provider accepted the call and will call back


class EventStatus(models.TextChoices):
    ACCEPTED = "ACCEPTED"  # it resumed the wait it was sent for
    KEPT = "KEPT"  # it came before its wait was reached, and waits to be consumed there
    CONSUMED = "CONSUMED"  # kept, then consumed when the execution reached its wait


class Effect(models.TextChoices):
    READ_ONLY = "READ_ONLY"
    IDEMPOTENT_WRITE = "IDEMPOTENT_WRITE"
    NON_IDEMPOTENT_WRITE = "NON_IDEMPOTENT_WRITE"


class AuditType(models.TextChoices):
    REQUEST_CREATED = "REQUEST_CREATED"
    TRANSITION_ACCEPTED = "TRANSITION_ACCEPTED"
    RETRY_SCHEDULED = "RETRY_SCHEDULED"
    TRANSITION_COMPLETED = "TRANSITION_COMPLETED"
    EXECUTION_FAILED = "EXECUTION_FAILED"
    EXECUTION_SUSPENDED = "EXECUTION_SUSPENDED"
    EXECUTION_RESUMED = "EXECUTION_RESUMED"
    EXECUTION_CANCELLED = "EXECUTION_CANCELLED"
    RECONCILIATION_REQUIRED = "RECONCILIATION_REQUIRED"
    RECONCILIATION_EVIDENCE = "RECONCILIATION_EVIDENCE"
    RECONCILIATION_RESOLVED = "RECONCILIATION_RESOLVED"
    # The two-person rule (RECONCILIATION_TWO_PERSON): a replay proposed by one operator, and a
    # proposal rejected by another; the approval is the RECONCILIATION_RESOLVED that applies it.
    RECONCILIATION_PROPOSED = "RECONCILIATION_PROPOSED"
    RECONCILIATION_REJECTED = "RECONCILIATION_REJECTED"
    LEASE_TAKEN_OVER = "LEASE_TAKEN_OVER"
    # Compensation (docs/flow-format.md#compensation): the holder began undoing the succeeded
    # writes, and the execution ended COMPENSATED.
    COMPENSATION_STARTED = "COMPENSATION_STARTED"
    EXECUTION_COMPENSATED = "EXECUTION_COMPENSATED"
