"""How a run ends, written: the fail, reconcile and retry decisions of recovery.py.

Invariants: a decision is written after it is made, never while an exception is being built (the
runner decides, unwinds, then calls `run_end` once); each ending is one fenced transaction of
executions/queue/finalize.py on a connection borrowed for that write: FAIL and RECONCILE through
`execution_fail` (an operator gets it when a write is outstanding), RETRY through
`execution_schedule_retry`; a holder that no longer holds gets `ExecutionSuperseded`; INTERRUPT
writes nothing. `poison_settle` ends a claim past WORKER_MAX_RECLAIMS without a run, on the
claim's own connection and token (docs/worker-protocol.md#poison-cap).
"""

import datetime
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg

from orquestador import errors

from ..models import ExecutionStatus
from ..queue.claims import Dispatch
from ..queue.finalize import (
    AttemptSettlement,
    execution_exhaust_reclaims,
    execution_fail,
    execution_schedule_retry,
)
from ..queue.leases import ExecutionInterrupted, ExecutionSuperseded
from ..queue.steps import run_async
from .groupcommit import on
from .recovery import Decision, Verb
from .retry import retry_delay_seconds
from .runs import Run
from .wire import RunOutcome
from .writeretry import fenced_write

logger = logging.getLogger("executions.worker")

WORKER_ACTOR = "system:worker"  # the audit actor of everything the worker writes


async def run_end(decision: Decision, run: Run) -> RunOutcome:
    """Write the ending `decision` chose for this holder's run; return where it left the run."""
    if decision.verb == Verb.INTERRUPT:
        raise ExecutionInterrupted(run.fence.execution_id, step="end")
    if decision.verb == Verb.RETRY and decision.settlement is not None:
        return await _retry(decision.settlement, decision.retry_after, run)
    settlement = decision.settlement
    code = decision.code or errors.PERMANENT_FAILURE

    async def fail() -> str:
        return await on(
            run.db,
            execution_fail(
                fence=run.fence,
                error_code=code,
                error_detail=decision.detail,
                settlement=settlement,
                reconcile=decision.verb == Verb.RECONCILE,
                actor=WORKER_ACTOR,
                payload=run.audit,
            ),
        )

    status = await _write("EXECUTION_FAIL", fail, run)
    reconciled = status == ExecutionStatus.RECONCILIATION_REQUIRED
    logger.warning(
        "reconciliation required" if reconciled else "execution failed",
        extra={
            **run.log_extra,
            "status": status,
            "error_code": code,
            "action_id": settlement.action_id if settlement else None,
            "detail": decision.detail,
        },
    )
    return RunOutcome(status=ExecutionStatus(status), error_code=code)


async def _retry(settlement: AttemptSettlement, retry_after: float | None, run: Run) -> RunOutcome:
    delay = retry_delay_seconds(
        attempt=settlement.attempt,
        retry_after=retry_after,
        config=run.deps.config,
        rng=run.deps.rng,
    )

    async def schedule() -> datetime.datetime:
        return await on(
            run.db,
            execution_schedule_retry(
                fence=run.fence,
                settlement=settlement,
                delay_seconds=delay,
                actor=WORKER_ACTOR,
                payload={
                    **run.audit,
                    "actionId": settlement.action_id,
                    "attempt": settlement.attempt,
                    "errorCode": settlement.error_code,
                    "delaySeconds": round(delay, 3),
                    **_retry_after(retry_after),
                },
            ),
        )

    due = await _write("EXECUTION_SCHEDULE_RETRY", schedule, run)
    logger.info(
        "retry scheduled",
        extra={
            **run.log_extra,
            "action_id": settlement.action_id,
            "action_attempt": settlement.attempt,
            "error_code": settlement.error_code,
            "delay_seconds": round(delay, 3),
        },
    )
    return RunOutcome(
        status=ExecutionStatus.RETRY_WAIT, error_code=settlement.error_code, next_attempt_at=due
    )


def _retry_after(retry_after: float | None) -> dict[str, float]:
    """The provider's Retry-After behind a retry's delay, when it answered one (retry.py honours
    it, capped at WORKER_RETRY_AFTER_MAX_SECONDS), so the Execution page can say so."""
    if retry_after is None or retry_after < 0:
        return {}
    return {"retryAfterSeconds": round(float(retry_after), 3)}


async def _write(statement: str, write: Callable[[], Awaitable[Any]], run: Run) -> Any:
    """An ending is a fenced write: a database error is logged with `statement` and retried with
    backoff for up to half the lease, then raised; a lost connection waits for the database,
    lease kept (executions/worker/writeretry.py)."""
    return await fenced_write(
        statement,
        write,
        budget_seconds=run.deps.config.lease_seconds / 2,
        log_extra=run.log_extra,
        rng=run.deps.rng,
        ride=run.ride,
    )


async def poison_settle(conn: psycopg.AsyncConnection, dispatch: Dispatch) -> str | None:
    """The poison cap: an execution taken over more than WORKER_MAX_RECLAIMS times in a row
    without progress is settled (RECLAIMS_EXHAUSTED) instead of run, on the claim's own
    connection and token. Returns the status written; None when nothing was (taken over
    meanwhile, or a database error: the next claim tries again). A lost connection is raised."""
    extra = {**dispatch.log_extra, "reclaims": dispatch.reclaims}
    try:
        status = await run_async(
            conn,
            execution_exhaust_reclaims(
                fence=dispatch.fence, reclaims=dispatch.reclaims, actor=WORKER_ACTOR
            ),
        )
    except ExecutionSuperseded:
        logger.info("poison execution taken over before it was settled", extra=extra)
        return None
    except psycopg.OperationalError:
        raise
    except psycopg.Error:
        logger.exception("poison execution could not be settled; left for recovery", extra=extra)
        return None
    logger.warning("poison execution settled", extra={**extra, "status": status})
    return status
