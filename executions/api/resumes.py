"""Resuming (docs/worker-protocol.md#waits, docs/api.md#events): an event delivered through the
API to a waiting execution, or kept for a wait it has not reached yet (the worker's side is
executions/queue/waits.py).

Invariants; `execution_resume` is exactly one transaction, locking the request, then the
execution, as `waits.wait_reach` does: a known eventId is a replay or IDEMPOTENCY_KEY_REUSED; a
SUSPENDED wait for this event takes the validated payload, the checkpoint SUCCEEDED, the
execution PENDING under token + 1, EXECUTION_RESUMED and NOTIFY together; a wait ahead keeps the
event (at most MAX_KEPT_EVENTS); anything else is NOT_WAITING. Of concurrent resumes one wins.
"""

from dataclasses import dataclass
from typing import Any

from django.db import connection, transaction
from psycopg.types.json import Jsonb

from orquestador import errors
from orquestador.auth import Principal
from orquestador.errors import CodedError

from .. import access, sql
from ..flows.canonical import sha256_hex
from ..flows.publication import find_transition
from ..models import AuditType, CheckpointStatus, EventStatus, Execution, ExecutionStatus, Flow
from ..queue.audit import audit_append
from ..queue.waits import is_wait, payload_problems
from ..sql.rows import ResumeLockRow
from .tracelinks import resume_traced

MAX_KEPT_EVENTS = 16  # events kept per execution for waits it has not reached yet
LIVE_STATUSES = (ExecutionStatus.PENDING, ExecutionStatus.RETRY_WAIT, ExecutionStatus.RUNNING)


def event_fingerprint(*, event: str, payload: Any) -> str:
    return sha256_hex({"event": event, "payload": payload})


@dataclass(frozen=True)
class _Delivery:
    """One event sent to one execution: what its row and its audit event record."""

    execution: Execution
    event_id: str
    event: str
    payload: dict[str, Any]
    fingerprint: str

    def row(self, *, action_id: str, status: str, actor: str) -> dict[str, Any]:
        """The event's row (EVENT_INSERT), for the wait `action_id`."""
        return {
            "execution_id": self.execution.id,
            "event_id": self.event_id,
            "event": self.event,
            "action_id": action_id,
            "payload": Jsonb(self.payload),
            "fingerprint": self.fingerprint,
            "status": status,
            "actor": actor,
            "consumed": status == EventStatus.ACCEPTED,
        }


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
    found = access.visible_one(
        access.executions_resumable(principal), execution_id, what="execution"
    )
    fingerprint = event_fingerprint(event=event, payload=payload)
    actor = principal.subject
    sender = principal.qualified
    taken = False
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(sql.REQUEST_LOCK, {"request_id": found.request_id})
        cursor.execute(sql.RESUME_LOCK, {"execution_id": found.id})
        locked = ResumeLockRow._make(cursor.fetchone())
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
            definition = Flow.objects.only("definition").get(id=locked.flow_id).definition
            transition = find_transition(definition, locked.transition_id) or {}
            waits = [a for a in transition.get("actions", []) if is_wait(a)]
            cursor.execute(sql.RESUME_CHECKPOINTS, {"execution_id": found.id})
            checkpoints = dict(cursor.fetchall())
            delivery = _Delivery(found, event_id, event, payload, fingerprint)
            if locked.status == ExecutionStatus.SUSPENDED:
                _resume_now(
                    cursor,
                    delivery,
                    token=locked.fencing_token,
                    waits=waits,
                    checkpoints=checkpoints,
                    actor=actor,
                    sender=sender,
                    dispatcher=principal.snapshot(),
                )
            elif locked.status in LIVE_STATUSES:
                _keep(cursor, delivery, waits=waits, checkpoints=checkpoints, sender=actor)
            else:
                raise _not_waiting(f"the execution is {locked.status}: it waits for no event")
            taken = True
    found.refresh_from_db()
    if taken:
        attributes = {"orquestador.event": event}
        resume_traced(
            execution_id=found.id, by="event", stored=found.trace_context, attributes=attributes
        )
    return found, taken


def _resume_now(
    cursor: Any,
    delivery: _Delivery,
    *,
    token: int,
    waits: list[dict[str, Any]],
    checkpoints: dict[str, str],
    actor: str,
    sender: str,
    dispatcher: dict[str, Any],
) -> None:
    execution, event = delivery.execution, delivery.event
    waiting = [a for a in waits if checkpoints.get(a["id"]) == CheckpointStatus.WAITING]
    if not waiting:
        raise _not_waiting(
            "the execution waits for an asynchronous provider's callback, not for an event"
        )
    action = waiting[0]
    if action["wait"]["event"] != event:
        raise _not_waiting(f"the execution waits for event {action['wait']['event']!r}")
    problems = payload_problems(action["wait"]["payloadSchema"], delivery.payload)
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
            "output": Jsonb(delivery.payload),
            "new_token": new_token,
        },
    )
    if cursor.fetchone() is None:  # impossible under the row lock; refuse rather than half-write
        raise RuntimeError(f"the wait of execution {execution.id} changed under its lock")
    cursor.execute(
        sql.EVENT_INSERT,
        delivery.row(action_id=action["id"], status=EventStatus.ACCEPTED, actor=actor),
    )
    resumed = {
        "transitionId": execution.transition_id,
        "actionId": action["id"],
        "event": event,
        "eventId": delivery.event_id,
        "principal": sender,
    }
    ids = {"request_id": execution.request_id, "execution_id": execution.id}
    audit_append(cursor, **ids, type=AuditType.EXECUTION_RESUMED, actor=actor, payload=resumed)
    cursor.execute(sql.NOTIFY_WORK, {"execution_id": str(execution.id)})


def _keep(
    cursor: Any,
    delivery: _Delivery,
    *,
    waits: list[dict[str, Any]],
    checkpoints: dict[str, str],
    sender: str,
) -> None:
    event = delivery.event
    cursor.execute(sql.EVENTS_KEPT, {"execution_id": delivery.execution.id})
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
    problems = payload_problems(action["wait"]["payloadSchema"], delivery.payload)
    if problems:
        raise _invalid(problems)
    cursor.execute(
        sql.EVENT_INSERT,
        delivery.row(action_id=action["id"], status=EventStatus.KEPT, actor=sender),
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
