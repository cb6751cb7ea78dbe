"""The queue as it is now, read cheaply for `GET /metrics` (executions/metrics/views.py).

Invariants:
- `queue_stats` runs as the first thing of a transaction the caller opens: it makes that
  transaction READ ONLY and bounds each statement by METRICS_TIMEOUT_MS, so a scrape never writes
  and never piles up behind a slow read;
- every statement reads live rows only, through a partial index (sql/queuestats.py says which),
  so its cost follows the work in flight, never the finished history;
- what it returns is counts and ages only: no id, owner, tenant or lease owner leaves here.
"""

from dataclasses import dataclass
from typing import Any

from .. import sql
from ..models import ExecutionStatus
from ..webhooks.config import FAILING_AFTER

METRICS_TIMEOUT_MS = 2000  # milliseconds one statistics statement may run before it is cancelled
# The statuses of live work, in the order the metrics list them (execution_claim_idx's predicate).
QUEUE_STATUSES: tuple[str, ...] = tuple(
    status.value
    for status in (
        ExecutionStatus.PENDING,
        ExecutionStatus.RETRY_WAIT,
        ExecutionStatus.RUNNING,
        ExecutionStatus.SUSPENDED,
    )
)


@dataclass(frozen=True)
class QueueStats:
    """Counts and ages of the live queue, by the database clock."""

    depth: dict[str, int]  # live executions by status
    due: dict[str, int]  # of those, due now (RUNNING: lease expired)
    oldest_due_age_seconds: float  # how long the oldest due execution has been due; 0 if none
    reconciliation_backlog: int  # executions waiting for an operator
    reconciliation_oldest_age_seconds: float  # age of the oldest of those, since creation
    requests_blocked: int  # requests held by an execution
    webhooks_pending: int  # webhook deliveries on their way (first attempt or retry)
    webhooks_oldest_pending_age_seconds: float  # age of the oldest of those, since creation
    webhook_subscriptions_failing: int  # subscriptions that show as `failing`


def queue_stats(*, cursor: Any) -> QueueStats:
    """Read the queue statistics with `cursor` (a DB-API cursor inside a fresh transaction)."""
    cursor.execute(sql.METRICS_READ_ONLY)
    cursor.execute(sql.METRICS_TIMEOUT, {"timeout_ms": str(METRICS_TIMEOUT_MS)})
    cursor.execute(sql.METRICS_QUEUE)
    depth = dict.fromkeys(QUEUE_STATUSES, 0)
    due = dict.fromkeys(QUEUE_STATUSES, 0)
    oldest = 0.0
    for status, count, due_count, age in cursor.fetchall():
        depth[status] = count
        due[status] = due_count
        oldest = max(oldest, float(age))
    cursor.execute(sql.METRICS_RECONCILIATION)
    backlog, backlog_age = cursor.fetchone()
    cursor.execute(sql.METRICS_BLOCKED_REQUESTS)
    (blocked,) = cursor.fetchone()
    cursor.execute(sql.METRICS_WEBHOOKS, {"failing_after": FAILING_AFTER})
    pending, pending_age, failing = cursor.fetchone()
    return QueueStats(
        depth=depth,
        due=due,
        oldest_due_age_seconds=oldest,
        reconciliation_backlog=backlog,
        reconciliation_oldest_age_seconds=float(backlog_age),
        requests_blocked=blocked,
        webhooks_pending=pending,
        webhooks_oldest_pending_age_seconds=float(pending_age),
        webhook_subscriptions_failing=failing,
    )
