"""The holder's side of compensation (docs/flow-format.md#compensation,
docs/worker-protocol.md#compensation): undo a failed transition's writes, in reverse, as actions.

Invariants: only a FAIL of a transition whose onFailure is "compensate" is compensated, and only
when executions/queue/compensation.py so decides under the request lock; each step runs the
runner's own action path (`Run.action`) (key `executionId:actionId:compensate`, RUNNING before the
call, the recovery table by its own effect, its route's limits); a step's RETRY schedules RETRY_WAIT
(the next claim compensates again), FAIL becomes COMPENSATION_FAILED, RECONCILE stays; the end,
COMPENSATED with the request released, is one transaction. None is open during a step's call.
"""

import logging
from dataclasses import replace
from typing import Any

from orquestador import errors

from ..flows.compensations import (
    CannotCompensate,
    Step,
    compensated_action,
    compensation_steps,
    opts_in,
)
from ..models import CheckpointStatus, ExecutionStatus
from ..queue import faultpoints
from ..queue.claims import CheckpointRecord, Snapshot
from ..queue.compensation import Begun, execution_begin_compensation, execution_compensated
from . import recovery
from .endings import WORKER_ACTOR, run_end
from .groupcommit import on
from .recovery import Decision, Verb
from .runs import Run
from .stops import RunEnded, RunSuspended
from .wire import RunOutcome

logger = logging.getLogger("executions.worker")


async def compensate_failure(
    run: Run,
    decision: Decision,
    transition: dict[str, Any] | None,
    snapshot: Snapshot,
) -> RunOutcome | None:
    """Compensate the failure `decision` of an opted-in transition; None when it is not one (the
    runner writes the decision as usual)."""
    if transition is None or decision.verb != Verb.FAIL or not opts_in(transition):
        return None
    if snapshot.compensation_cause is not None:  # already compensating: no second beginning
        return None
    code = decision.code or errors.PERMANENT_FAILURE

    def plan_of(checkpoints: dict[str, CheckpointRecord]) -> list[Step]:
        return compensation_steps(transition, checkpoints, run.deps.resolve)

    begun: Begun = await run.write(
        "EXECUTION_BEGIN_COMPENSATION",
        lambda: on(
            run.db,
            execution_begin_compensation(
                fence=run.fence,
                error_code=code,
                error_detail=decision.detail,
                settlement=decision.settlement,
                plan_of=plan_of,
                actor=WORKER_ACTOR,
                payload=run.audit,
            ),
        ),
    )
    if begun.status != ExecutionStatus.RUNNING:  # the usual rule was written instead
        reconciled = begun.status == ExecutionStatus.RECONCILIATION_REQUIRED
        logger.warning(
            "reconciliation required" if reconciled else "execution failed",
            extra={**run.log_extra, "status": begun.status, "error_code": code},
        )
        return RunOutcome(status=ExecutionStatus(begun.status), error_code=code)
    logger.info(
        "compensation started",
        extra={**run.log_extra, "error_code": code, "steps": [s.action_id for s in begun.steps]},
    )
    faultpoints.reach(faultpoints.COMPENSATION_STARTED, [s.action_id for s in begun.steps])
    return await _run_steps(run, begun.steps, replace(snapshot, checkpoints=begun.checkpoints))


async def compensate_resumed(
    run: Run, transition: dict[str, Any], snapshot: Snapshot
) -> RunOutcome:
    """Go on compensating an execution claimed with its compensation begun (after a crash, a
    retry, an operator's requeue or a cancellation): the steps whose checkpoint SUCCEEDED are
    reused, the others run by the recovery table."""
    try:
        steps = compensation_steps(transition, snapshot.checkpoints, run.deps.resolve)
    except CannotCompensate as exc:
        return await run_end(
            recovery.reconcile(errors.COMPENSATION_FAILED, f"cannot compensate: {exc}"), run
        )
    return await _run_steps(run, steps, snapshot)


async def _run_steps(run: Run, steps: list[Step], snapshot: Snapshot) -> RunOutcome:
    outputs = {
        action_id: record.output or {}
        for action_id, record in snapshot.checkpoints.items()
        if record.status == CheckpointStatus.SUCCEEDED and compensated_action(action_id) is None
    }
    for step in steps:
        try:
            await run.action(step.sequence, step.action, snapshot, outputs)
        except RunEnded as ended:
            return await run_end(_undo_failed(ended.decision, step), run)
        except RunSuspended as suspended:  # an asynchronous undo: its callback resumes it
            return suspended.outcome
    step_ids = [step.action_id for step in steps]
    cause = await run.write(
        "EXECUTION_COMPENSATE",
        lambda: on(
            run.db,
            execution_compensated(
                fence=run.fence, step_ids=step_ids, actor=WORKER_ACTOR, payload=run.audit
            ),
        ),
    )
    # Webhooks: the `execution.compensated` event is emitted here.
    logger.info(
        "execution compensated",
        extra={**run.log_extra, "status": ExecutionStatus.COMPENSATED, "error_code": cause},
    )
    return RunOutcome(status=ExecutionStatus.COMPENSATED, error_code=cause)


def _undo_failed(decision: Decision, step: Step) -> Decision:
    """A step's ending: a failure for good of an undo goes to an operator, never FAILED."""
    if decision.verb != Verb.FAIL:
        return decision
    return recovery.reconcile(
        errors.COMPENSATION_FAILED,
        f"compensating {step.undoes!r}: {decision.detail or decision.code}",
        decision.settlement,
    )
