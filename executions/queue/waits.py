"""Waiting (docs/worker-protocol.md#waits): wait actions reached by the worker, their deadlines.
A wait's checkpoint is READ_ONLY (`wait:<event>`): WAITING while the execution is SUSPENDED, then
SUCCEEDED with the event's payload as the action's output.

Each function is one fenced transaction. `wait_reach` locks the request, then the execution (as
resumes.py does: an event is kept before the wait is reached or finds it SUSPENDED), and consumes
a kept event or commits the WAITING checkpoint, SUSPENDED until the deadline (database clock,
lease cleared) and EXECUTION_SUSPENDED together. `wait_time_out_continue` succeeds it with
onTimeout's payload (`system`, `timedOut: true`); without one the runner fails it EVENT_TIMEOUT.
"""

import datetime
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.db.models import QuerySet
from psycopg.types.json import Jsonb

from orquestador import errors

from .. import sql
from ..flows.canonical import sha256_hex
from ..flows.checks import DRAFT, short_detail
from ..models import (
    ActionExecution,
    AuditType,
    CheckpointStatus,
    Execution,
    ExecutionStatus,
)
from ..sql.rows import ExecutionRow
from .audit import audit_query
from .checkpoints import external_key
from .leases import ExecutionSuperseded, Fence
from .steps import Query, Steps, as_plan

WAIT_CAPABILITY_PREFIX = "wait:"  # a wait action's checkpoint capability: wait:<event>
CALLBACK_EVENT = "callback"  # waitingFor.event while an asynchronous provider's answer is due
MAX_PROBLEMS = 20  # payload problems listed in one EVENT_INVALID answer
SYSTEM_ACTOR = "system"  # who settles a timed-out wait


def is_wait(action: dict[str, Any]) -> bool:
    return "wait" in action


def wait_capability(action: dict[str, Any]) -> str:
    return (WAIT_CAPABILITY_PREFIX + action["wait"]["event"])[:200]


def wait_input_hash(action: dict[str, Any]) -> str:
    """What a wait's checkpoint records as its input: the event it waits for."""
    return sha256_hex({"event": action["wait"]["event"]})


def payload_problems(schema: Any, payload: Any) -> list[dict[str, str]]:
    """Every way `payload` breaks `schema` (at most MAX_PROBLEMS), each with its JSON path."""
    found = sorted(DRAFT(schema).iter_errors(payload), key=lambda e: e.json_path)
    return [
        {"path": error.json_path, "message": short_detail(error.message)}
        for error in found[:MAX_PROBLEMS]
    ]


# -- the worker's side (plans: executions/queue/steps.py; fenced) -----------------------------


@dataclass(frozen=True)
class WaitReached:
    """A kept event's payload (the run goes on), or the deadline the execution suspended until."""

    output: dict[str, Any] | None = None
    deadline: datetime.datetime | None = None


def _lock_holder(fence: Fence, step: str) -> Steps[None]:
    yield Query(sql.REQUEST_LOCK, {"request_id": fence.request_id}, fetch="none")
    if (yield Query(sql.WAIT_HOLDER_LOCK, fence.params(), fetch="one")) is None:
        raise ExecutionSuperseded(fence.execution_id, step=step, token=fence.token)


@as_plan(atomic=True)
def wait_reach(
    *,
    fence: Fence,
    action: dict[str, Any],
    sequence: int,
    payload: dict,
    tenant: str,
) -> Steps[WaitReached]:
    """Reach a wait action: consume an event kept for it, or suspend until its deadline.

    `payload` goes into the audit event (the runner's: transition and dispatch principal); a
    kept event's EXECUTION_RESUMED names its sender instead, `sub@tenant` of the request's
    `tenant`, who caused that resume (the run goes on in the same dispatch, for its principal)."""
    action_id = action["id"]
    wait = action["wait"]
    checkpoint = {
        "execution_id": fence.execution_id,
        "action_id": action_id,
        "sequence": sequence,
        "capability": wait_capability(action),
        "input_hash": wait_input_hash(action),
        "external_key": external_key(fence.execution_id, action_id),
        "token": fence.token,
    }
    ids = {"request_id": fence.request_id, "execution_id": fence.execution_id}
    yield from _lock_holder(fence, f"reach {action_id}")
    kept = yield Query(
        sql.EVENT_TAKE_KEPT,
        {"execution_id": fence.execution_id, "action_id": action_id},
        fetch="one",
    )
    if kept is not None:
        event_id, event, event_payload, actor = kept
        yield Query(
            sql.WAIT_CHECKPOINT_INSERT,
            {
                **checkpoint,
                "status": CheckpointStatus.SUCCEEDED,
                "output": Jsonb(event_payload),
                "finished": True,
            },
            fetch="none",
        )
        yield audit_query(
            **ids,
            type=AuditType.EXECUTION_RESUMED,
            actor=actor,
            payload={
                **payload,
                "actionId": action_id,
                "event": event,
                "eventId": event_id,
                "principal": f"{actor}@{tenant}",
            },
        )
        return WaitReached(output=event_payload)
    yield Query(
        sql.WAIT_CHECKPOINT_INSERT,
        {**checkpoint, "status": CheckpointStatus.WAITING, "output": None, "finished": False},
        fetch="none",
    )
    deadline = yield from _suspend(fence, action_id, wait["event"], wait["timeoutSeconds"], payload)
    return WaitReached(deadline=deadline)


@as_plan(atomic=True)
def call_accept(
    *,
    fence: Fence,
    action_id: str,
    attempt: int,
    timeout_seconds: float,
    payload: dict,
) -> Steps[datetime.datetime]:
    """An asynchronous provider accepted the call: ACCEPTED, SUSPENDED until the callback is
    overdue, EXECUTION_SUSPENDED; return that deadline."""
    yield from _lock_holder(fence, f"accept {action_id}")
    params = {**fence.params(), "action_id": action_id, "attempt": attempt}
    if (yield Query(sql.CHECKPOINT_ACCEPT, params, fetch="one")) is None:
        raise ExecutionSuperseded(fence.execution_id, step=f"accept {action_id}")
    return (yield from _suspend(fence, action_id, CALLBACK_EVENT, timeout_seconds, payload))


def _suspend(
    fence: Fence,
    action_id: str,
    event: str,
    timeout_seconds: float,
    payload: dict,
) -> Steps[datetime.datetime]:
    """Within the caller's transaction, its checkpoint written: SUSPENDED until `timeout_seconds`
    from now (database clock), and EXECUTION_SUSPENDED; return that deadline. The one suspension
    of a wait reached and of an asynchronous provider's ACCEPTED."""
    row = yield Query(
        sql.EXECUTION_SUSPEND, {**fence.params(), "timeout_seconds": timeout_seconds}, fetch="one"
    )
    if row is None:
        raise ExecutionSuperseded(fence.execution_id, step=f"suspend {action_id}")
    deadline: datetime.datetime = row[0]
    yield audit_query(
        request_id=fence.request_id,
        execution_id=fence.execution_id,
        type=AuditType.EXECUTION_SUSPENDED,
        actor=SYSTEM_ACTOR + ":worker",
        payload={
            **payload,
            "actionId": action_id,
            "event": event,
            "deadline": deadline.isoformat(),
        },
    )
    return deadline


@as_plan()
def wait_deadline(*, fence: Fence, action: dict[str, Any]) -> Steps[tuple[datetime.datetime, bool]]:
    """The deadline of a reached wait, and whether it has passed (database clock)."""
    row = yield Query(
        sql.WAIT_DEADLINE,
        {
            "execution_id": fence.execution_id,
            "action_id": action["id"],
            "timeout_seconds": action["wait"]["timeoutSeconds"],
        },
        fetch="one",
    )
    if row is None:  # its WAITING checkpoint is gone: another holder moved it on
        raise ExecutionSuperseded(fence.execution_id, step=f"deadline {action['id']}")
    return row[0], row[1]


@as_plan(atomic=True)
def wait_resuspend(
    *, fence: Fence, action: dict[str, Any], deadline: datetime.datetime
) -> Steps[datetime.datetime]:
    """Back to SUSPENDED until a deadline that has not passed yet."""
    yield from _lock_holder(fence, f"suspend {action['id']}")
    row = yield Query(
        sql.EXECUTION_SUSPEND_UNTIL, {**fence.params(), "deadline": deadline}, fetch="one"
    )
    if row is None:
        raise ExecutionSuperseded(fence.execution_id, step=f"suspend {action['id']}")
    return row[0]


@as_plan(atomic=True)
def wait_time_out_continue(
    *, fence: Fence, action: dict[str, Any], payload: dict
) -> Steps[dict[str, Any]]:
    """Settle a timed-out wait with its onTimeout payload; return that payload as the output."""
    output: dict[str, Any] = action["wait"]["onTimeout"]["payload"]
    yield from _lock_holder(fence, f"time out {action['id']}")
    yield from _time_out(
        fence,
        action["id"],
        CheckpointStatus.SUCCEEDED,
        output,
        "the deadline passed; the wait's onTimeout payload was used",
    )
    yield audit_query(
        request_id=fence.request_id,
        execution_id=fence.execution_id,
        type=AuditType.EXECUTION_RESUMED,
        actor=SYSTEM_ACTOR,
        payload={
            **payload,
            "actionId": action["id"],
            "event": action["wait"]["event"],
            "timedOut": True,
        },
    )
    return output


@as_plan(atomic=True)
def wait_checkpoint_expire(*, fence: Fence, action_id: str) -> Steps[None]:
    """In a transaction of its own: the WAITING checkpoint becomes FAILED, EVENT_TIMEOUT."""
    yield from _lock_holder(fence, f"time out {action_id}")
    yield from _time_out(
        fence,
        action_id,
        CheckpointStatus.FAILED,
        None,
        "the deadline passed without the event",
    )


def _time_out(
    fence: Fence,
    action_id: str,
    status: str,
    output: dict[str, Any] | None,
    detail: str,
) -> Steps[None]:
    """Settle a WAITING checkpoint whose deadline passed (EVENT_TIMEOUT), `status` with
    `output`, under the holder's lock."""
    row = yield Query(
        sql.WAIT_CHECKPOINT_TIME_OUT,
        {
            "execution_id": fence.execution_id,
            "action_id": action_id,
            "status": status,
            "output": Jsonb(output) if output is not None else None,
            "error_code": errors.EVENT_TIMEOUT,
            "error_detail": detail,
            "token": fence.token,
        },
        fetch="one",
    )
    if row is None:
        raise ExecutionSuperseded(fence.execution_id, step=f"time out {action_id}")


# -- reads ------------------------------------------------------------------------------------


def waiting_for(execution: Execution | ExecutionRow) -> dict[str, Any] | None:
    """What a SUSPENDED execution waits for: `{actionId, event, deadline}`; None otherwise."""
    if execution.status != ExecutionStatus.SUSPENDED:
        return None
    checkpoint = _waiting_checkpoints([execution.id]).first()
    return None if checkpoint is None else _waiting_view(execution, checkpoint)


def waiting_for_each(
    executions: Sequence[Execution | ExecutionRow],
) -> dict[str, dict[str, Any]]:
    """`waiting_for` of each execution that waits, by id as text (a page's rows have no other),
    in one statement (none when none is SUSPENDED): what a page of executions shows."""
    suspended = {str(e.id): e for e in executions if e.status == ExecutionStatus.SUSPENDED}
    found: dict[str, dict[str, Any]] = {}
    if suspended:
        for checkpoint in _waiting_checkpoints(list(suspended)).reverse():
            # The first in sequence wins: later ones in the reversed walk are overwritten.
            key = str(checkpoint.execution_id)
            found[key] = _waiting_view(suspended[key], checkpoint)
    return found


def _waiting_checkpoints(execution_ids: list[Any]) -> QuerySet[ActionExecution]:
    return (
        ActionExecution.objects.filter(
            execution_id__in=execution_ids,
            status__in=(CheckpointStatus.WAITING, CheckpointStatus.ACCEPTED),
        )
        .order_by("execution_id", "sequence")
        .only("execution_id", "action_id", "status", "capability")
    )


def _waiting_view(
    execution: Execution | ExecutionRow, checkpoint: ActionExecution
) -> dict[str, Any]:
    event = (
        checkpoint.capability.removeprefix(WAIT_CAPABILITY_PREFIX)
        if checkpoint.status == CheckpointStatus.WAITING
        else CALLBACK_EVENT
    )
    return {
        "actionId": checkpoint.action_id,
        "event": event,
        "deadline": execution.next_attempt_at,
    }


__all__ = [
    "CALLBACK_EVENT",
    "WaitReached",
    "is_wait",
    "wait_checkpoint_expire",
    "wait_deadline",
    "wait_reach",
    "wait_resuspend",
    "wait_time_out_continue",
    "waiting_for",
    "waiting_for_each",
]
