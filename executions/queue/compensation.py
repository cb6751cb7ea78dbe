"""Compensation's writes (docs/worker-protocol.md#compensation): beginning it, ending COMPENSATED,
and whether a cancellation requeues an execution to compensate.

Each plan is one transaction, every write fenced. `execution_begin_compensation` replaces an
opted-in transition's failure: under the request lock it decides (executions/flows/
compensations.py) and either records the cause and COMPENSATION_STARTED, the holder keeping the
execution RUNNING, or fails it by the usual rule with why in the detail. `execution_compensated`
ends it COMPENSATED only when every step SUCCEEDED and no write is uncertain, the request
released as it was. `cancel_compensates` is a read inside the cancellation's transaction.
"""

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from psycopg.rows import kwargs_row

from actions.base import IntegrationConfigError
from orquestador.workerconfig import WorkerConfigError

from .. import sql
from ..flows.compensations import CannotCompensate, Step, compensation_steps, opts_in
from ..flows.publication import find_transition
from ..models import (
    ActionExecution,
    AuditType,
    CheckpointStatus,
    Effect,
    Execution,
    ExecutionStatus,
)
from . import faultpoints
from .claims import CheckpointRecord
from .finalize import (
    AttemptSettlement,
    attempt_settle,
    execution_audit,
    execution_fail,
    request_release_audited,
)
from .leases import ExecutionSuperseded, Fence
from .steps import Plan, Query, Steps, as_plan

PlanOf = Callable[[dict[str, CheckpointRecord]], list[Step]]  # raises CannotCompensate


@dataclass(frozen=True)
class Begun:
    """How a failure of an opted-in transition ended: RUNNING (compensating `steps`), or the
    status the usual rule wrote."""

    status: str
    steps: list[Step] = field(default_factory=list)
    checkpoints: dict[str, CheckpointRecord] = field(default_factory=dict)


@as_plan(atomic=True)
def execution_begin_compensation(
    *,
    fence: Fence,
    error_code: str,
    error_detail: str | None,
    settlement: AttemptSettlement | None,
    plan_of: PlanOf,
    actor: str,
    payload: dict[str, Any],
) -> Steps[Begun]:
    """Begin compensating a failure, or fail by the usual rule; one transaction."""
    yield Query(sql.REQUEST_LOCK, {"request_id": fence.request_id}, fetch="none")
    rows: list[CheckpointRecord] = yield Query(
        sql.CHECKPOINTS_OF,
        {"execution_id": fence.execution_id},
        row_factory=kwargs_row(CheckpointRecord),
    )
    checkpoints = {row.action_id: row for row in rows}
    if settlement is not None and settlement.action_id in checkpoints:
        # What the attempt that just failed is once settled, in this same transaction.
        settled = replace(checkpoints[settlement.action_id], status=settlement.status)
        checkpoints[settlement.action_id] = settled
    wrote = any(
        c.status == CheckpointStatus.SUCCEEDED and c.effect != Effect.READ_ONLY
        for c in checkpoints.values()
    )
    steps: list[Step] = []
    reason = None
    try:
        steps = plan_of(checkpoints) if wrote else []
    except CannotCompensate as exc:
        reason = str(exc)
    if not steps:
        detail = error_detail
        if reason is not None:
            detail = f"{error_detail or error_code}; not compensated: {reason}"
        status = yield from execution_fail(
            fence=fence,
            error_code=error_code,
            error_detail=detail,
            settlement=settlement,
            reconcile=False,
            actor=actor,
            payload=payload,
        ).steps
        return Begun(status=status)
    if settlement is not None:
        yield from attempt_settle(fence, settlement)
    params = {**fence.params(), "error_code": error_code, "error_detail": error_detail}
    if (yield Query(sql.EXECUTION_BEGIN_COMPENSATION, params, fetch="one")) is None:
        raise ExecutionSuperseded(fence.execution_id, step="begin compensation", token=fence.token)
    yield execution_audit(
        fence,
        type=AuditType.COMPENSATION_STARTED,
        actor=actor,
        payload={
            **payload,
            "errorCode": error_code,
            "actionId": settlement.action_id if settlement is not None else None,
            "compensates": [step.undoes for step in steps],
        },
    )
    return Begun(status=ExecutionStatus.RUNNING, steps=steps, checkpoints=checkpoints)


def execution_compensated(
    *, fence: Fence, step_ids: list[str], actor: str, payload: dict[str, Any]
) -> Plan[str]:
    """End a compensating execution COMPENSATED and release its request; return its error code
    (the compensation's cause). One transaction."""
    return Plan(
        _compensated(fence, step_ids, actor, payload),
        atomic=True,
        before_commit=faultpoints.final_uncommitted(step_ids),
    )


def _compensated(
    fence: Fence, step_ids: list[str], actor: str, payload: dict[str, Any]
) -> Steps[str]:
    yield Query(sql.REQUEST_LOCK, {"request_id": fence.request_id}, fetch="none")
    row = yield Query(
        sql.EXECUTION_COMPENSATE, {**fence.params(), "step_ids": step_ids}, fetch="one"
    )
    if row is None:
        raise ExecutionSuperseded(fence.execution_id, step="compensated", token=fence.token)
    cause: str = row[0]
    yield from request_release_audited(
        fence,
        type=AuditType.EXECUTION_COMPENSATED,
        actor=actor,
        payload={**payload, "errorCode": cause, "actionIds": step_ids},
    )
    return cause


def cancel_compensates(*, execution_id: uuid.UUID | str) -> bool:
    """Whether cancelling this execution, whose writes are all settled and some SUCCEEDED,
    requeues it to compensate: its transition opts in and each succeeded write can be undone
    under the catalog. Otherwise the usual rule holds (reconciliation)."""
    execution = (
        Execution.objects.select_related("flow")
        .only("transition_id", "flow__definition")
        .get(id=execution_id)
    )
    transition = find_transition(execution.flow.definition, execution.transition_id)
    if transition is None or not opts_in(transition):
        return False
    from actions.registry import get_registry

    checkpoints = {c.action_id: c for c in ActionExecution.objects.filter(execution=execution)}
    try:
        return bool(compensation_steps(transition, checkpoints, get_registry().resolve))
    except (CannotCompensate, IntegrationConfigError, WorkerConfigError):
        return False
