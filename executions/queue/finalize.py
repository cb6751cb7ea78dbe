"""How a run ends: completed, retry scheduled, failed, or handed to an operator
(docs/worker-protocol.md: finalisation, retries, recovery).

Each function is one transaction and a plan (steps.py), every write fenced (`ExecutionSuperseded`
rolls it back). `executions_finalize`, one statement for many holders each on its own, locks the
request, then the execution, checks every checkpoint SUCCEEDED, writes and releases the request,
ends the execution SUCCEEDED, appends TRANSITION_COMPLETED; a failure leaves RUNNING and the
checkpoints (`finalize_refusal` says why). `execution_schedule_retry`: checkpoint, RETRY_WAIT and
RETRY_SCHEDULED together. `execution_fail`: FAILED, or to an operator when a write is outstanding.
"""

import datetime
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from psycopg.types.json import Jsonb

from orquestador import errors

from .. import sql
from ..models import AuditType, ExecutionStatus
from . import faultpoints
from .audit import audit_query
from .checkpoints import checkpoint_settle
from .leases import ExecutionSuperseded, Fence, lease_is_held
from .steps import Plan, Query, Steps, as_plan


@dataclass(frozen=True)
class FinalizeRefused:
    """The holder still holds its lease, but the request or checkpoints changed since loading."""

    request_unchanged: bool  # still blocked by this execution, at the state, revision and version
    unsettled: list[str]  # checkpoints missing or not SUCCEEDED, as "action STATUS"


@dataclass(frozen=True)
class AttemptSettlement:
    """How to settle the checkpoint of the attempt that just ended without success."""

    action_id: str
    attempt: int
    status: str  # CheckpointStatus.FAILED or CheckpointStatus.UNKNOWN
    error_code: str
    error_detail: str | None
    output: dict[str, Any] | None = None


def attempt_settle(fence: Fence, settlement: AttemptSettlement) -> Steps[None]:
    """Settle the attempt's checkpoint: the first statement of a transaction that ends an
    attempt without success (a retry, a failure, the beginning of a compensation)."""
    yield from checkpoint_settle(
        fence=fence,
        action_id=settlement.action_id,
        attempt=settlement.attempt,
        status=settlement.status,
        error_code=settlement.error_code,
        error_detail=settlement.error_detail,
        output=settlement.output,
    )


def execution_audit(fence: Fence, *, type: str, actor: str, payload: dict[str, Any]) -> Query:
    """Append the audit event `type` of the holder's execution and its request (a step)."""
    ids = {"request_id": fence.request_id, "execution_id": fence.execution_id}
    return audit_query(**ids, type=type, actor=actor, payload=payload)


def request_release_audited(
    fence: Fence, *, type: str, actor: str, payload: dict[str, Any]
) -> Steps[None]:
    """The tail of a plan that ends an execution and frees its request (FAILED, COMPENSATED):
    release the request (data, state and revision as they are), then append the ending's audit
    event `type`, in the plan's transaction."""
    yield Query(
        sql.REQUEST_RELEASE,
        {"request_id": fence.request_id, "execution_id": fence.execution_id},
        fetch="none",
    )
    yield execution_audit(fence, type=type, actor=actor, payload=payload)


@dataclass(frozen=True)
class FinalizeItem:
    """One holder's computed success: the request's new data and state, and the audit payload."""

    fence: Fence
    from_state: str
    accepted_revision: int
    request_version: int
    action_ids: list[str]
    data: dict[str, Any]
    target_state: str
    result: dict[str, Any]
    payload: dict[str, Any]

    def row(self) -> dict[str, Any]:
        return {
            "execution_id": self.fence.execution_text,
            "request_id": self.fence.request_text,
            "token": self.fence.token,
            "owner": self.fence.owner,
            "from_state": self.from_state,
            "accepted_revision": self.accepted_revision,
            "request_version": self.request_version,
            "action_ids": self.action_ids,
            "data": self.data,
            "target_state": self.target_state,
            "result": self.result,
            "payload": self.payload,
        }


def executions_finalize(*, items: Sequence[FinalizeItem], actor: str) -> Plan[dict[uuid.UUID, int]]:
    """Commit the success of one or many executions in one statement.

    The plan returns each finalised execution's new request revision by execution id. A holder
    missing from it was superseded, or its request or checkpoints changed: `finalize_refusal`
    says which.
    """
    action_ids = [action_id for item in items for action_id in item.action_ids]
    before_commit = faultpoints.final_uncommitted(action_ids)
    return Plan(
        _finalize(items, actor, action_ids),
        atomic=before_commit is not None,
        before_commit=before_commit,
    )


def _finalize(
    items: Sequence[FinalizeItem], actor: str, action_ids: list[str]
) -> Steps[dict[uuid.UUID, int]]:
    rows = yield Query(
        sql.EXECUTION_FINALIZE,
        {"items": Jsonb([item.row() for item in items]), "actor": actor},
    )
    faultpoints.reach(faultpoints.FINAL_COMMITTED, action_ids)
    return {row[0]: row[1] for row in rows}


def _one(row: tuple[Any, ...] | None) -> tuple[Any, ...]:
    """The one row an aggregate (no GROUP BY) always answers."""
    if row is None:  # impossible for an aggregate; said rather than indexed into None
        raise LookupError("an aggregate statement answered no row")
    return row


@as_plan()
def finalize_refusal(*, item: FinalizeItem) -> Steps[FinalizeRefused]:
    """Why a finalisation matched nothing: what changed if the lease holds; else the holder was
    superseded (raised). Two reads, only after a refusal."""
    fence = item.fence
    if not (yield from lease_is_held(fence=fence)):
        raise ExecutionSuperseded(fence.execution_id, step="finalize", token=fence.token)
    unchanged, unsettled = _one(
        (
            yield Query(
                sql.FINALIZE_PROBE,
                {
                    "execution_id": fence.execution_id,
                    "request_id": fence.request_id,
                    "from_state": item.from_state,
                    "accepted_revision": item.accepted_revision,
                    "request_version": item.request_version,
                    "action_ids": item.action_ids,
                },
                fetch="one",
            )
        )
    )
    return FinalizeRefused(request_unchanged=bool(unchanged), unsettled=list(unsettled))


@as_plan(atomic=True)
def execution_schedule_retry(
    *,
    fence: Fence,
    settlement: AttemptSettlement,
    delay_seconds: float,
    actor: str,
    payload: dict[str, Any],
) -> Steps[datetime.datetime]:
    """Settle the attempt and schedule the next one, in one transaction; return when it is due."""
    yield from attempt_settle(fence, settlement)
    row = yield Query(
        sql.EXECUTION_SCHEDULE_RETRY,
        {
            **fence.params(),
            "delay_seconds": delay_seconds,
            "error_code": settlement.error_code,
            "error_detail": settlement.error_detail,
        },
        fetch="one",
    )
    if row is None:
        raise ExecutionSuperseded(fence.execution_id, step="schedule retry", token=fence.token)
    due: datetime.datetime = row[0]
    yield execution_audit(
        fence,
        type=AuditType.RETRY_SCHEDULED,
        actor=actor,
        payload={**payload, "nextAttemptAt": due.isoformat()},
    )
    return due


@as_plan(atomic=True)
def execution_fail(
    *,
    fence: Fence,
    error_code: str,
    error_detail: str | None,
    settlement: AttemptSettlement | None,
    reconcile: bool,
    actor: str,
    payload: dict[str, Any],
) -> Steps[str]:
    """End the run without success, in one transaction; the plan returns the execution's new
    status.

    RECONCILIATION_REQUIRED (request stays blocked) when `reconcile` is asked or any write is
    outstanding; otherwise FAILED with the request released.
    """
    yield Query(sql.REQUEST_LOCK, {"request_id": fence.request_id}, fetch="none")
    if settlement is not None:
        yield from attempt_settle(fence, settlement)
    uncertain, succeeded, last_write = _one(
        (yield Query(sql.WRITES_OUTSTANDING, {"execution_id": fence.execution_id}, fetch="one"))
    )
    params = {**fence.params(), "error_code": error_code, "error_detail": error_detail}
    action_id = settlement.action_id if settlement is not None else None
    if reconcile or uncertain or succeeded:
        if (yield Query(sql.EXECUTION_REQUIRE_RECONCILIATION, params, fetch="one")) is None:
            raise ExecutionSuperseded(fence.execution_id, step="reconcile", token=fence.token)
        yield execution_audit(
            fence,
            type=AuditType.RECONCILIATION_REQUIRED,
            actor=actor,
            payload={**payload, "actionId": action_id or last_write, "errorCode": error_code},
        )
        return ExecutionStatus.RECONCILIATION_REQUIRED
    if (yield Query(sql.EXECUTION_FAIL, params, fetch="one")) is None:
        raise ExecutionSuperseded(fence.execution_id, step="fail", token=fence.token)
    yield from request_release_audited(
        fence,
        type=AuditType.EXECUTION_FAILED,
        actor=actor,
        payload={**payload, "actionId": action_id, "errorCode": error_code},
    )
    return ExecutionStatus.FAILED


def execution_exhaust_reclaims(*, fence: Fence, reclaims: int, actor: str) -> Plan[str]:
    """The poison cap: settle, instead of running, an execution just claimed after more than
    WORKER_MAX_RECLAIMS consecutive takeovers without progress; return its new status.

    FAILED `RECLAIMS_EXHAUSTED` (request released) when no write succeeded or is uncertain,
    otherwise RECONCILIATION_REQUIRED with that code (request kept blocked), by the rules of
    docs/worker-protocol.md for failures; audited either way. One transaction, fenced by the claim's
    token.
    """
    return execution_fail(
        fence=fence,
        error_code=errors.RECLAIMS_EXHAUSTED,
        error_detail=(
            f"taken over {reclaims} times in a row after its lease expired, with no checkpoint "
            "progressing in between; settled instead of run again"
        ),
        settlement=None,
        reconcile=False,
        actor=actor,
        # A takeover is recovery: no principal caused it.
        payload={"reclaims": reclaims, "principal": "system"},
    )
