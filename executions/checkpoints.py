"""Checkpoints: the durable record of each action of an execution, written around its adapter call.

Invariants and transaction boundaries:
- before an adapter is called, its RUNNING checkpoint (input hash, external key, effect,
  attempt) is committed by `checkpoint_start`, one statement in its own transaction; after the
  call, `checkpoint_succeed` commits SUCCEEDED with the validated output before the next action
  starts. No transaction is open while the adapter runs;
- both lock the execution row and check the fence against the database clock inside the
  statement that commits, so a stale holder can neither start nor save a checkpoint
  (`ExecutionSuperseded`);
- the external key is always "<executionId>:<actionId>", the same on every attempt;
  `checkpoint.attempt` counts the calls of that action (+1 per call);
- `checkpoint_settle` (FAILED or UNKNOWN) never commits by itself: it is the first statement of
  the caller's retry or failure transaction (executions/finalize.py).
"""

from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from . import sql
from .leases import ExecutionSuperseded, Fence


def external_key(execution_id: object, action_id: str) -> str:
    """The stable key sent to providers for one action of one execution, on every attempt."""
    return f"{execution_id}:{action_id}"


def checkpoint_start(
    *,
    conn: psycopg.Connection,
    fence: Fence,
    action_id: str,
    sequence: int,
    capability: str,
    capability_version: int,
    effect: str,
    input_hash: str,
    previous_attempt: int,
) -> int:
    """Commit the RUNNING checkpoint of the next attempt; return its attempt number.

    `previous_attempt` is the attempt of the checkpoint this holder loaded (0 when there was
    none); the write applies only if the checkpoint is still that one.
    """
    row = conn.execute(
        sql.CHECKPOINT_START,
        {
            **fence.params(),
            "action_id": action_id,
            "sequence": sequence,
            "capability": capability,
            "capability_version": capability_version,
            "effect": effect,
            "input_hash": input_hash,
            "external_key": external_key(fence.execution_id, action_id),
            "previous_attempt": previous_attempt,
        },
    ).fetchone()
    if row is None:
        raise ExecutionSuperseded(fence.execution_id, step=f"start {action_id}", token=fence.token)
    return row[0]


def checkpoint_succeed(
    *,
    conn: psycopg.Connection,
    fence: Fence,
    action_id: str,
    attempt: int,
    output: dict[str, Any],
) -> None:
    """Commit SUCCEEDED with the validated output of this holder's attempt."""
    row = conn.execute(
        sql.CHECKPOINT_SUCCEED,
        {**fence.params(), "action_id": action_id, "attempt": attempt, "output": Jsonb(output)},
    ).fetchone()
    if row is None:
        raise ExecutionSuperseded(fence.execution_id, step=f"save {action_id}", token=fence.token)


def checkpoint_settle(
    *,
    conn: psycopg.Connection,
    fence: Fence,
    action_id: str,
    attempt: int,
    status: str,
    error_code: str,
    error_detail: str | None,
    output: dict[str, Any] | None = None,
) -> None:
    """Mark this holder's attempt FAILED or UNKNOWN, inside the caller's transaction."""
    row = conn.execute(
        sql.CHECKPOINT_SETTLE,
        {
            **fence.params(),
            "action_id": action_id,
            "attempt": attempt,
            "status": status,
            "error_code": error_code,
            "error_detail": error_detail,
            "output": Jsonb(output) if output is not None else None,
        },
    ).fetchone()
    if row is None:
        raise ExecutionSuperseded(fence.execution_id, step=f"settle {action_id}", token=fence.token)
