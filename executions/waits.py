"""Waiting (SPEC §10): wait actions reached by the worker, resumes by events, early events.

A wait action `{"id", "wait": {"event", "payloadSchema", "timeoutSeconds", "onTimeout"?}}` has
a checkpoint like any action (capability `wait:<event>`, READ_ONLY, never a write): WAITING while
the execution is SUSPENDED, then SUCCEEDED with the event's payload as the action's output.

Invariants and transaction boundaries (each function is exactly one transaction):
- `wait_reach` (worker, fenced): lock the request, then the execution; an event kept for this
  wait is consumed at once (checkpoint SUCCEEDED with its payload, EXECUTION_RESUMED with its
  sender as actor) and the run goes on; otherwise the WAITING checkpoint, SUSPENDED until the
  deadline (`next_attempt_at`, database clock; lease cleared, request still blocked) and
  EXECUTION_SUSPENDED commit together. Because the resume below holds the same locks while it
  decides, an event is either kept before the wait is reached (and consumed here) or finds the
  execution SUSPENDED: never lost between the two;
- `wait_time_out_continue` (worker, fenced, the deadline passed): the checkpoint becomes
  SUCCEEDED with the wait's onTimeout payload under the holder's token, EXECUTION_RESUMED with
  actor `system` and `timedOut: true`. Without onTimeout the runner fails the execution with
  EVENT_TIMEOUT under the usual rule (finalize.execution_fail), after `wait_checkpoint_expire`;
- `execution_resume` (API): lock the request, then the execution. A known eventId is a replay
  (same event and payload: nothing changes) or IDEMPOTENCY_KEY_REUSED. SUSPENDED on a wait for
  this event: the payload is validated, then the checkpoint SUCCEEDED with it, the execution
  PENDING and due now under token + 1 (any stale holder is fenced out), the event ACCEPTED,
  EXECUTION_RESUMED and NOTIFY commit together. PENDING, RETRY_WAIT or RUNNING with a wait for
  this event ahead (no checkpoint yet, nothing kept for it): the event is KEPT, at most
  MAX_KEPT_EVENTS per execution. Anything else is NOT_WAITING. Every resume of one execution
  holds its row lock while deciding, so of concurrent resumes exactly one is accepted.
"""

import datetime
from dataclasses import dataclass
from typing import Any

import psycopg
from django.db import connection, transaction
from psycopg.types.json import Jsonb

from orquestador import access, errors
from orquestador.auth import Principal
from orquestador.errors import CodedError

from . import sql
from .audit import audit_append
from .checkpoints import external_key
from .flows.canonical import sha256_hex
from .flows.checks import DRAFT, short_detail
from .flows.publication import find_transition
from .leases import ExecutionSuperseded, Fence
from .models import (
    ActionExecution,
    AuditType,
    CheckpointStatus,
    EventStatus,
    Execution,
    ExecutionStatus,
    Flow,
)

WAIT_CAPABILITY_PREFIX = "wait:"  # a wait action's checkpoint capability: wait:<event>
CALLBACK_EVENT = "callback"  # waitingFor.event while an asynchronous provider's answer is due
MAX_KEPT_EVENTS = 16  # events kept per execution for waits it has not reached yet
MAX_PROBLEMS = 20  # payload problems listed in one EVENT_INVALID answer
SYSTEM_ACTOR = "system"  # who settles a timed-out wait
LIVE_STATUSES = (ExecutionStatus.PENDING, ExecutionStatus.RETRY_WAIT, ExecutionStatus.RUNNING)


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


# -- the worker's side (psycopg connection, fenced) -------------------------------------------


@dataclass(frozen=True)
class WaitReached:
    """A kept event's payload (the run goes on), or the deadline the execution suspended until."""

    output: dict[str, Any] | None = None
    deadline: datetime.datetime | None = None


def _lock_holder(conn: psycopg.Connection, fence: Fence, step: str) -> None:
    conn.execute(sql.REQUEST_LOCK, {"request_id": fence.request_id})
    if conn.execute(sql.WAIT_HOLDER_LOCK, fence.params()).fetchone() is None:
        raise ExecutionSuperseded(fence.execution_id, step=step, token=fence.token)


def wait_reach(
    *,
    conn: psycopg.Connection,
    fence: Fence,
    action: dict[str, Any],
    sequence: int,
    payload: dict,
    tenant: str,
) -> WaitReached:
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
    with conn.transaction():
        _lock_holder(conn, fence, f"reach {action_id}")
        kept = conn.execute(
            sql.EVENT_TAKE_KEPT, {"execution_id": fence.execution_id, "action_id": action_id}
        ).fetchone()
        if kept is not None:
            event_id, event, event_payload, actor = kept
            conn.execute(
                sql.WAIT_CHECKPOINT_INSERT,
                {
                    **checkpoint,
                    "status": CheckpointStatus.SUCCEEDED,
                    "output": Jsonb(event_payload),
                    "finished": True,
                },
            )
            audit_append(
                conn.cursor(),
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
        conn.execute(
            sql.WAIT_CHECKPOINT_INSERT,
            {**checkpoint, "status": CheckpointStatus.WAITING, "output": None, "finished": False},
        )
        row = conn.execute(
            sql.EXECUTION_SUSPEND, {**fence.params(), "timeout_seconds": wait["timeoutSeconds"]}
        ).fetchone()
        if row is None:
            raise ExecutionSuperseded(fence.execution_id, step=f"suspend {action_id}")
        deadline = row[0]
        audit_append(
            conn.cursor(),
            **ids,
            type=AuditType.EXECUTION_SUSPENDED,
            actor=SYSTEM_ACTOR + ":worker",
            payload={
                **payload,
                "actionId": action_id,
                "event": wait["event"],
                "deadline": deadline.isoformat(),
            },
        )
    return WaitReached(deadline=deadline)


def call_accept(
    *,
    conn: psycopg.Connection,
    fence: Fence,
    action_id: str,
    attempt: int,
    timeout_seconds: float,
    payload: dict,
) -> datetime.datetime:
    """An asynchronous provider accepted the call: ACCEPTED, SUSPENDED until the callback is
    overdue, EXECUTION_SUSPENDED; return that deadline."""
    with conn.transaction():
        _lock_holder(conn, fence, f"accept {action_id}")
        params = {**fence.params(), "action_id": action_id, "attempt": attempt}
        if conn.execute(sql.CHECKPOINT_ACCEPT, params).fetchone() is None:
            raise ExecutionSuperseded(fence.execution_id, step=f"accept {action_id}")
        row = conn.execute(
            sql.EXECUTION_SUSPEND, {**fence.params(), "timeout_seconds": timeout_seconds}
        ).fetchone()
        if row is None:
            raise ExecutionSuperseded(fence.execution_id, step=f"suspend {action_id}")
        deadline = row[0]
        audit_append(
            conn.cursor(),
            request_id=fence.request_id,
            execution_id=fence.execution_id,
            type=AuditType.EXECUTION_SUSPENDED,
            actor=SYSTEM_ACTOR + ":worker",
            payload={
                **payload,
                "actionId": action_id,
                "event": CALLBACK_EVENT,
                "deadline": deadline.isoformat(),
            },
        )
    return deadline


def wait_deadline(
    *, conn: psycopg.Connection, fence: Fence, action: dict[str, Any]
) -> tuple[datetime.datetime, bool]:
    """The deadline of a reached wait, and whether it has passed (database clock)."""
    row = conn.execute(
        sql.WAIT_DEADLINE,
        {
            "execution_id": fence.execution_id,
            "action_id": action["id"],
            "timeout_seconds": action["wait"]["timeoutSeconds"],
        },
    ).fetchone()
    return row[0], row[1]


def wait_resuspend(
    *, conn: psycopg.Connection, fence: Fence, action: dict[str, Any], deadline: datetime.datetime
) -> datetime.datetime:
    """Back to SUSPENDED until a deadline that has not passed yet."""
    with conn.transaction():
        _lock_holder(conn, fence, f"suspend {action['id']}")
        row = conn.execute(
            sql.EXECUTION_SUSPEND_UNTIL, {**fence.params(), "deadline": deadline}
        ).fetchone()
        if row is None:
            raise ExecutionSuperseded(fence.execution_id, step=f"suspend {action['id']}")
    return row[0]


def wait_time_out_continue(
    *, conn: psycopg.Connection, fence: Fence, action: dict[str, Any], payload: dict
) -> dict[str, Any]:
    """Settle a timed-out wait with its onTimeout payload; return that payload as the output."""
    output = action["wait"]["onTimeout"]["payload"]
    with conn.transaction():
        _lock_holder(conn, fence, f"time out {action['id']}")
        row = conn.execute(
            sql.WAIT_CHECKPOINT_TIME_OUT,
            {
                "execution_id": fence.execution_id,
                "action_id": action["id"],
                "status": CheckpointStatus.SUCCEEDED,
                "output": Jsonb(output),
                "error_code": errors.EVENT_TIMEOUT,
                "error_detail": "the deadline passed; the wait's onTimeout payload was used",
                "token": fence.token,
            },
        ).fetchone()
        if row is None:
            raise ExecutionSuperseded(fence.execution_id, step=f"time out {action['id']}")
        audit_append(
            conn.cursor(),
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


def wait_checkpoint_expire(*, conn: psycopg.Connection, fence: Fence, action_id: str) -> None:
    """Within the caller's transaction: the WAITING checkpoint becomes FAILED, EVENT_TIMEOUT."""
    _lock_holder(conn, fence, f"time out {action_id}")
    row = conn.execute(
        sql.WAIT_CHECKPOINT_TIME_OUT,
        {
            "execution_id": fence.execution_id,
            "action_id": action_id,
            "status": CheckpointStatus.FAILED,
            "output": None,
            "error_code": errors.EVENT_TIMEOUT,
            "error_detail": "the deadline passed without the event",
            "token": fence.token,
        },
    ).fetchone()
    if row is None:
        raise ExecutionSuperseded(fence.execution_id, step=f"time out {action_id}")


# -- the API's side (Django connection) -------------------------------------------------------


def event_fingerprint(*, event: str, payload: Any) -> str:
    return sha256_hex({"event": event, "payload": payload})


def _not_waiting(detail: str) -> CodedError:
    return CodedError(errors.NOT_WAITING, detail)


def execution_resume(
    *,
    principal: Principal,
    execution_id: str,
    event_id: str,
    event: str,
    payload: dict[str, Any],
) -> tuple[Execution, bool]:
    """Deliver an event to an execution of the caller's tenant.

    Returns the execution as it is now and whether the event was taken now (False: a replay of
    an eventId already taken, with the same body). Raises NOT_FOUND, IDEMPOTENCY_KEY_REUSED,
    NOT_WAITING or EVENT_INVALID (with `problems`) as CodedError; nothing changes then.
    """
    parsed = access.parse_id(execution_id)
    found = None
    if parsed is not None:
        found = access.executions_resumable(principal).filter(id=parsed).first()
    if found is None:
        raise CodedError(errors.NOT_FOUND, "no such execution")
    fingerprint = event_fingerprint(event=event, payload=payload)
    actor = principal.subject
    sender = principal.qualified
    taken = False
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(sql.REQUEST_LOCK, {"request_id": found.request_id})
        cursor.execute(sql.RESUME_LOCK, {"execution_id": found.id})
        status, token, flow_id, transition_id, _ = cursor.fetchone()
        cursor.execute(sql.EVENT_FIND, {"execution_id": found.id, "event_id": event_id})
        known = cursor.fetchone()
        if known is not None:
            if known[0] != fingerprint:
                raise CodedError(
                    errors.IDEMPOTENCY_KEY_REUSED,
                    "this eventId was already sent to this execution with a different event or "
                    "payload",
                )
        else:
            definition = Flow.objects.only("definition").get(id=flow_id).definition
            transition = find_transition(definition, transition_id) or {}
            waits = [a for a in transition.get("actions", []) if is_wait(a)]
            cursor.execute(sql.RESUME_CHECKPOINTS, {"execution_id": found.id})
            checkpoints = dict(cursor.fetchall())
            if status == ExecutionStatus.SUSPENDED:
                _resume_now(
                    cursor,
                    execution=found,
                    token=token,
                    waits=waits,
                    checkpoints=checkpoints,
                    event_id=event_id,
                    event=event,
                    payload=payload,
                    fingerprint=fingerprint,
                    actor=actor,
                    sender=sender,
                    dispatcher=principal.snapshot(),
                )
            elif status in LIVE_STATUSES:
                _keep(
                    cursor,
                    execution=found,
                    waits=waits,
                    checkpoints=checkpoints,
                    event_id=event_id,
                    event=event,
                    payload=payload,
                    fingerprint=fingerprint,
                    sender=actor,
                )
            else:
                raise _not_waiting(f"the execution is {status}: it waits for no event")
            taken = True
    found.refresh_from_db()
    return found, taken


def _resume_now(
    cursor: Any,
    *,
    execution: Execution,
    token: int,
    waits: list[dict[str, Any]],
    checkpoints: dict[str, str],
    event_id: str,
    event: str,
    payload: dict[str, Any],
    fingerprint: str,
    actor: str,
    sender: str,
    dispatcher: dict[str, Any],
) -> None:
    waiting = [a for a in waits if checkpoints.get(a["id"]) == CheckpointStatus.WAITING]
    if not waiting:
        raise _not_waiting(
            "the execution waits for an asynchronous provider's callback, not for an event"
        )
    action = waiting[0]
    if action["wait"]["event"] != event:
        raise _not_waiting(f"the execution waits for event {action['wait']['event']!r}")
    problems = payload_problems(action["wait"]["payloadSchema"], payload)
    if problems:
        raise _invalid(problems)
    cursor.execute(
        sql.RESUME_EXECUTION,
        {"execution_id": execution.id, "token": token, "principal": Jsonb(dispatcher)},
    )
    (new_token,) = cursor.fetchone()
    cursor.execute(
        sql.RESUME_CHECKPOINT,
        {
            "execution_id": execution.id,
            "action_id": action["id"],
            "output": Jsonb(payload),
            "new_token": new_token,
        },
    )
    if cursor.fetchone() is None:  # impossible under the row lock; refuse rather than half-write
        raise RuntimeError(f"the wait of execution {execution.id} changed under its lock")
    _insert_event(
        cursor,
        execution_id=execution.id,
        event_id=event_id,
        event=event,
        action_id=action["id"],
        payload=payload,
        fingerprint=fingerprint,
        status=EventStatus.ACCEPTED,
        actor=actor,
    )
    audit_append(
        cursor,
        request_id=execution.request_id,
        execution_id=execution.id,
        type=AuditType.EXECUTION_RESUMED,
        actor=actor,
        payload={
            "transitionId": execution.transition_id,
            "actionId": action["id"],
            "event": event,
            "eventId": event_id,
            "principal": sender,
        },
    )
    cursor.execute(sql.NOTIFY_WORK, {"execution_id": str(execution.id)})


def _keep(
    cursor: Any,
    *,
    execution: Execution,
    waits: list[dict[str, Any]],
    checkpoints: dict[str, str],
    event_id: str,
    event: str,
    payload: dict[str, Any],
    fingerprint: str,
    sender: str,
) -> None:
    cursor.execute(sql.EVENTS_KEPT, {"execution_id": execution.id})
    kept = [row[0] for row in cursor.fetchall()]
    ahead = [
        a
        for a in waits
        if a["wait"]["event"] == event and a["id"] not in checkpoints and a["id"] not in kept
    ]
    if not ahead:
        raise _not_waiting(f"no wait for event {event!r} lies ahead of this execution")
    if len(kept) >= MAX_KEPT_EVENTS:
        raise _not_waiting(
            f"the execution already keeps {MAX_KEPT_EVENTS} events for waits it has not reached"
        )
    action = ahead[0]
    problems = payload_problems(action["wait"]["payloadSchema"], payload)
    if problems:
        raise _invalid(problems)
    _insert_event(
        cursor,
        execution_id=execution.id,
        event_id=event_id,
        event=event,
        action_id=action["id"],
        payload=payload,
        fingerprint=fingerprint,
        status=EventStatus.KEPT,
        actor=sender,
    )


def _invalid(problems: list[dict[str, str]]) -> CodedError:
    count = len(problems)
    summary = "; ".join(f"{p['path']}: {p['message']}" for p in problems[:3])
    return CodedError(
        errors.EVENT_INVALID,
        f"the payload breaks the wait's payloadSchema ({count} problem"
        f"{'s' if count != 1 else ''}): {summary}",
        extra={"problems": problems},
    )


def _insert_event(cursor: Any, **values: Any) -> None:
    cursor.execute(
        sql.EVENT_INSERT,
        {
            **values,
            "payload": Jsonb(values["payload"]),
            "consumed": values["status"] == EventStatus.ACCEPTED,
        },
    )


# -- reads ------------------------------------------------------------------------------------


def waiting_for(execution: Execution) -> dict[str, Any] | None:
    """What a SUSPENDED execution waits for: `{actionId, event, deadline}`; None otherwise."""
    if execution.status != ExecutionStatus.SUSPENDED:
        return None
    checkpoint = (
        ActionExecution.objects.filter(
            execution_id=execution.id,
            status__in=(CheckpointStatus.WAITING, CheckpointStatus.ACCEPTED),
        )
        .order_by("sequence")
        .only("action_id", "status", "capability")
        .first()
    )
    if checkpoint is None:
        return None
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
    "MAX_KEPT_EVENTS",
    "WaitReached",
    "execution_resume",
    "is_wait",
    "wait_checkpoint_expire",
    "wait_deadline",
    "wait_reach",
    "wait_resuspend",
    "wait_time_out_continue",
    "waiting_for",
]
