"""A run's wait action: met at once, reused, waited on, or timed out.

The writes are executions/queue/waits.py's plans, each one fenced transaction on a borrowed
connection; this module decides which to make from the checkpoint the run found: the wait's
output (the run goes on), a suspension (`run_suspended`), or EVENT_TIMEOUT under the usual rule
for a failure.
"""

import logging
from typing import Any

from actions.base import StopSignal
from orquestador import errors

from ..models import CheckpointStatus
from ..queue.claims import Snapshot
from ..queue.leases import ExecutionInterrupted, Fence
from ..queue.steps import run_async
from ..queue.waits import (
    wait_checkpoint_expire,
    wait_deadline,
    wait_reach,
    wait_resuspend,
    wait_time_out_continue,
)
from . import recovery
from .groupcommit import Database, borrowed, on
from .stops import RunEnded, run_suspended

logger = logging.getLogger("executions.worker")


async def wait_step(
    *,
    db: Database,
    fence: Fence,
    sequence: int,
    action: dict[str, Any],
    snapshot: Snapshot,
    audit: dict[str, Any],
    cancelled: StopSignal,
    log_extra: dict[str, Any],
) -> dict[str, Any]:
    """The wait action's output, as the holder `fence`; or the run stops (`RunSuspended`,
    `RunEnded`, `ExecutionInterrupted`)."""
    action_id, event = action["id"], action["wait"]["event"]
    extra = {**log_extra, "action_id": action_id, "wait_event": event}
    previous = snapshot.checkpoints.get(action_id)
    if previous is None:
        if cancelled.is_set():
            raise ExecutionInterrupted(fence.execution_id, step=f"reach {action_id}")
        reached = await on(
            db,
            wait_reach(
                fence=fence, action=action, sequence=sequence, payload=audit, tenant=snapshot.scope
            ),
        )
        if reached.output is None:
            run_suspended(action_id, event, reached.deadline, extra)
        logger.info("wait met by a kept event", extra=extra)
        return reached.output
    if previous.status == CheckpointStatus.SUCCEEDED:
        logger.info("wait reused", extra=extra)
        return previous.output or {}
    if previous.status == CheckpointStatus.WAITING:
        async with borrowed(db) as conn:
            deadline, passed = await run_async(conn, wait_deadline(fence=fence, action=action))
            if not passed:  # reclaimed before its deadline: wait on
                due = await run_async(
                    conn, wait_resuspend(fence=fence, action=action, deadline=deadline)
                )
                run_suspended(action_id, event, due, extra)
            if "onTimeout" in action["wait"]:
                output = await run_async(
                    conn, wait_time_out_continue(fence=fence, action=action, payload=audit)
                )
                logger.info("wait timed out; onTimeout payload used", extra=extra)
                return output
            await run_async(conn, wait_checkpoint_expire(fence=fence, action_id=action_id))
    # Timed out without onTimeout (now, or by an earlier holder that stopped after recording it):
    # the execution fails under the usual rule for a failure.
    raise RunEnded(
        recovery.fail(
            errors.EVENT_TIMEOUT, f"wait {action_id!r} for event {event!r} passed its deadline"
        )
    )
