"""The "compensate" resolution (RECONCILIATION.md#compensate): undo what the execution did, by the
compensations its flow declares, instead of replaying or abandoning it.

One operator write, like every resolution in services.py, offered only where the transition
declares compensations: every uncertain forward write is recorded FAILED (RECORDED_NOT_HAPPENED),
never replayed, and an uncertain undo FAILED with REPLAY_AUTHORIZED; refused with nothing written
(the reason says which) when a succeeded write cannot be undone under the catalog; otherwise
requeued under token + 1 with its compensation cause and RECONCILIATION_RESOLVED {resolution:
COMPENSATE}, for a worker to compensate (executions/worker/compensating.py).
"""

import uuid
from dataclasses import dataclass
from typing import Any

from actions.base import IntegrationConfigError
from actions.registry import get_registry
from executions import sql
from executions.flows.compensations import (
    CannotCompensate,
    compensated_action,
    compensation_steps,
    declares_compensations,
)
from executions.flows.publication import find_transition
from executions.models import ActionExecution, CheckpointStatus, Execution
from executions.queue.operatorwrites import clean_reason
from orquestador import errors

from . import permissions
from .evidence import checkpoint_evidence, is_uncertain
from .services import (
    Operator,
    Resolution,
    ResolutionRefused,
    Resolved,
    _record,
    open_case,
    require,
)


@dataclass(frozen=True)
class _Settled:
    """A checkpoint as the plan reads it (executions/flows/compensations.py)."""

    status: str
    effect: str


def _transition(execution: Execution) -> dict[str, Any] | None:
    definition = execution.flow.definition if isinstance(execution.flow.definition, dict) else {}
    return find_transition(definition, execution.transition_id)


def compensation_offered(execution: Execution) -> bool:
    """Whether the case page offers "compensate" for this execution."""
    transition = _transition(execution)
    return transition is not None and declares_compensations(transition)


def execution_compensate(
    *, execution_id: uuid.UUID | str, reason: str, operator: Operator
) -> Resolved:
    """Record the uncertain forward writes as not done and requeue the execution to compensate
    its succeeded writes; refuse (nothing written) when they cannot all be undone."""
    require(operator, permissions.COMPENSATE_EXECUTION)
    reason = clean_reason(reason, refused=ResolutionRefused)
    with open_case(execution_id) as case:
        execution = Execution.objects.select_related("flow").get(pk=case.execution_id)
        transition = _transition(execution)
        if transition is None or not declares_compensations(transition):
            raise ResolutionRefused(
                errors.NOT_COMPENSABLE, "The execution's transition declares no compensation."
            )
        checkpoints = {
            c.action_id: c
            for c in ActionExecution.objects.filter(execution=execution).order_by("sequence")
        }
        uncertain = [c for c in checkpoints.values() if is_uncertain(c)]
        # What each uncertain checkpoint is once this resolution settles it.
        settled = {c.action_id: _Settled(CheckpointStatus.FAILED, c.effect) for c in uncertain}
        try:
            steps = compensation_steps(
                transition, {**checkpoints, **settled}, get_registry().resolve
            )
        except (CannotCompensate, IntegrationConfigError) as exc:
            raise ResolutionRefused(errors.NOT_COMPENSABLE, f"Cannot compensate: {exc}") from None
        if not steps:
            raise ResolutionRefused(
                errors.NOT_COMPENSABLE, "No write succeeded: there is nothing to undo."
            )
        for checkpoint in uncertain:
            undo = compensated_action(checkpoint.action_id) is not None
            case.cursor.execute(
                sql.RECONCILE_SETTLE_CHECKPOINT,
                {
                    "status": CheckpointStatus.FAILED,
                    "output": None,
                    "error_code": errors.REPLAY_AUTHORIZED
                    if undo
                    else errors.RECORDED_NOT_HAPPENED,
                    "error_detail": f"recorded by {operator.get_username()}: compensate",
                    "token": case.token + 1,
                    "execution_id": case.execution_id,
                    "action_id": checkpoint.action_id,
                },
            )
        (token,) = case.fenced(
            sql.RECONCILE_COMPENSATE,
            {
                "execution_id": case.execution_id,
                "token": case.token,
                "error_code": execution.error_code or errors.PERMANENT_FAILURE,
            },
        )
        case.cursor.execute(sql.NOTIFY_WORK, {"execution_id": str(case.execution_id)})
        return _record(
            case,
            resolution=Resolution.COMPENSATE,
            action_id=uncertain[0].action_id if len(uncertain) == 1 else None,
            reason=reason,
            evidence={
                "previousErrorCode": execution.error_code,
                "compensationCause": execution.compensation_cause,
                "uncertain": [checkpoint_evidence(c) for c in uncertain],
                "compensates": [step.undoes for step in steps],
            },
            operator=operator,
            fencing_token=token,
        )


__all__ = ["compensation_offered", "execution_compensate"]
