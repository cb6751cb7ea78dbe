"""History that does not grow forever: `manage.py purgehistory --older-than DAYS`
(docs/operations.md#history).

Invariants: only final executions (SUCCEEDED, FAILED, CANCELLED) finished before the cutoff are
purged, never RECONCILIATION_REQUIRED nor live work; each batch is one statement in its own short
transaction (sql.PURGE_BATCH), so a purge stopped anywhere leaves each execution purged or
untouched; a batch locks only final rows (SKIP LOCKED), which no worker locks; the route
limiter's records go after, in batches of their own; the audit trail and the execution rows stay,
but nothing can be found by a purged execution's external keys or event ids (404 NOT_FOUND).
"""

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from django.db import connection, transaction

from .. import sql

logger = logging.getLogger("executions.queue.history")

DEFAULT_BATCH = 500  # executions per batch (one transaction each)
MAX_BATCH = 10_000  # executions per batch at most: a batch must stay a short transaction
DEFAULT_PAUSE_SECONDS = 0.05  # seconds between batches, so a purge yields to live work
BATCH_LOCK_TIMEOUT = "1s"  # a batch waits this long for a lock at most, then the purge stops


@dataclass
class PurgeResult:
    cutoff: datetime
    executions: int = 0
    checkpoints: int = 0
    events: int = 0
    batches: int = 0
    attempts: int = 0  # rows of attempt history (action_attempt)
    route_calls: int = 0  # the route limiter's records of ended calls (route_call)


def history_purge(
    *,
    older_than_days: int,
    batch: int = DEFAULT_BATCH,
    pause_seconds: float = DEFAULT_PAUSE_SECONDS,
    on_batch: Callable[[PurgeResult], None] | None = None,
) -> PurgeResult:
    """Purge final executions finished more than `older_than_days` ago, batch by batch.

    Returns the totals; `on_batch` is called after each committed batch with the totals so far.
    """
    if older_than_days < 1:
        raise ValueError("older_than_days must be at least 1")
    if not 1 <= batch <= MAX_BATCH:
        raise ValueError(f"batch must be between 1 and {MAX_BATCH}")
    with connection.cursor() as cursor:
        cursor.execute(sql.PURGE_CUTOFF, {"days": older_than_days})
        (cutoff,) = cursor.fetchone()
    result = PurgeResult(cutoff=cutoff)
    while True:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(sql.PURGE_LOCK_TIMEOUT, {"timeout": BATCH_LOCK_TIMEOUT})
            cursor.execute(sql.PURGE_BATCH, {"cutoff": cutoff, "limit": batch})
            rows = cursor.fetchall()
        if not rows:
            break
        result.batches += 1
        result.executions += len(rows)
        result.checkpoints += sum(row[1] for row in rows)
        result.events += sum(row[2] for row in rows)
        result.attempts += sum(row[3] for row in rows)
        logger.info(
            "history purged",
            extra={
                "batch_executions": len(rows),
                "executions": result.executions,
                "checkpoints": result.checkpoints,
                "events": result.events,
                "attempts": result.attempts,
            },
        )
        if on_batch is not None:
            on_batch(result)
        if len(rows) < batch:
            break
        if pause_seconds > 0:
            time.sleep(pause_seconds)
    _purge_route_calls(result, batch=batch, pause_seconds=pause_seconds)
    return result


def _purge_route_calls(result: PurgeResult, *, batch: int, pause_seconds: float) -> None:
    """The route limiter's records of calls that ended before the cutoff, batch by batch: no
    limit counts them any more (a window is at most an hour, a call at most half a lease)."""
    while True:
        with connection.cursor() as cursor:
            cursor.execute(sql.PURGE_ROUTE_CALLS, {"cutoff": result.cutoff, "limit": batch})
            (removed,) = cursor.fetchone()
        result.route_calls += removed
        if removed < batch:
            return
        if pause_seconds > 0:
            time.sleep(pause_seconds)
