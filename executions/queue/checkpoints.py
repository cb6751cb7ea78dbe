"""Checkpoints: the durable record of each action, written around its adapter call
(docs/worker-protocol.md#actions-and-checkpoints).

Before any adapter is called, reads included, `checkpoints_start` commits its RUNNING checkpoint
(input hash, external key "<executionId>:<actionId>", effect, attempt + 1) in its own transaction;
`checkpoints_succeed` commits SUCCEEDED with the output before the next action; no transaction is
open during the call. Each takes one or many holders (grouped by the worker), each fenced inside
the committing statement: a stale one is missing from the result (`ExecutionSuperseded`).
`checkpoint_settle` never commits alone: it opens the caller's retry or failure transaction.
"""

import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from psycopg.types.json import Jsonb

from .. import sql
from ..models import Effect
from . import faultpoints
from .leases import ExecutionSuperseded, Fence
from .steps import Query, Steps, as_plan


def external_key(execution_id: object, action_id: str) -> str:
    """The stable key sent to providers for one action of one execution, on every attempt."""
    return f"{execution_id}:{action_id}"


@dataclass(frozen=True)
class StartItem:
    """One holder's request to start the next attempt of one action."""

    fence: Fence
    action_id: str
    sequence: int
    capability: str
    capability_version: int
    effect: str
    input_hash: str
    previous_attempt: int  # the attempt of the checkpoint the holder loaded; 0 for none

    @property
    def attempt(self) -> int:
        """The attempt this start writes (known before the write returns)."""
        return self.previous_attempt + 1

    def row(self) -> dict[str, Any]:
        return {
            **_coordinates(self.fence),
            "action_id": self.action_id,
            "sequence": self.sequence,
            "capability": self.capability,
            "capability_version": self.capability_version,
            "effect": self.effect,
            "input_hash": self.input_hash,
            "external_key": external_key(self.fence.execution_text, self.action_id),
            "attempt": self.attempt,
        }


@dataclass(frozen=True)
class SucceedItem:
    """One holder's validated output of its current attempt."""

    fence: Fence
    action_id: str
    attempt: int
    output: dict[str, Any]
    effect: str = "NON_IDEMPOTENT_WRITE"  # of the action; decides the commit's durability

    def row(self) -> dict[str, Any]:
        return {
            **_coordinates(self.fence),
            "action_id": self.action_id,
            "attempt": self.attempt,
            "output": self.output,
        }


def _durability(effects: Iterable[str]) -> str:
    """synchronous_commit for a checkpoint write: off only when every action in it is a read.

    A read's checkpoint lost with a database crash (the last few hundred milliseconds of
    asynchronous commits) only means the read runs again. A write's checkpoint is what stops a
    write from being repeated blindly, so it is flushed before the adapter is called. WAL is
    flushed in order: any later synchronous commit makes every earlier one durable too.
    """
    return "off" if all(effect == Effect.READ_ONLY for effect in effects) else "on"


def _coordinates(fence: Fence) -> dict[str, Any]:
    return {
        "execution_id": fence.execution_text,
        "request_id": fence.request_text,
        "token": fence.token,
        "owner": fence.owner,
    }


@as_plan()
def checkpoints_start(*, items: Sequence[StartItem]) -> Steps[dict[uuid.UUID, int]]:
    """Commit RUNNING checkpoints for one or many holders in one statement.

    The plan returns the attempt number by execution id; a holder missing from it was
    superseded.
    """
    rows = yield Query(
        sql.CHECKPOINT_START,
        {
            "items": Jsonb([item.row() for item in items]),
            "synchronous_commit": _durability(item.effect for item in items),
        },
    )
    faultpoints.reach(faultpoints.CHECKPOINT_STARTED, [item.action_id for item in items])
    return {row[0]: row[1] for row in rows}


@as_plan()
def checkpoints_succeed(*, items: Sequence[SucceedItem]) -> Steps[set[uuid.UUID]]:
    """Commit SUCCEEDED checkpoints for one or many holders in one statement.

    The plan returns the execution ids saved; a holder missing from it was superseded.
    """
    action_ids = [item.action_id for item in items]
    faultpoints.reach(faultpoints.CHECKPOINT_SUCCEEDING, action_ids)
    saved = yield Query(
        sql.CHECKPOINT_SUCCEED,
        {
            "items": Jsonb([item.row() for item in items]),
            "synchronous_commit": _durability(item.effect for item in items),
        },
    )
    faultpoints.reach(faultpoints.CHECKPOINT_SUCCEEDED, action_ids)
    return {row[0] for row in saved}


def checkpoint_settle(
    *,
    fence: Fence,
    action_id: str,
    attempt: int,
    status: str,
    error_code: str,
    error_detail: str | None,
    output: dict[str, Any] | None = None,
) -> Steps[None]:
    """Mark this holder's attempt FAILED or UNKNOWN: steps of the caller's transaction."""
    row = yield Query(
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
        fetch="one",
    )
    if row is None:
        raise ExecutionSuperseded(fence.execution_id, step=f"settle {action_id}", token=fence.token)
