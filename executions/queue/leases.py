"""Leases and fencing: who holds an execution, and the errors a holder meets when it no longer does
(docs/worker-protocol.md#fencing, docs/adr/0002-fencing-tokens.md).

Invariants: a holder is (execution id, request id, fencing token, lease owner); every write after a
claim names all four and requires RUNNING and an unexpired lease by database time
(executions/sql/fence.py); one that matches no row raises `ExecutionSuperseded`, which the
dispatcher settles and never retries (a retry would fence out the winner). An expired lease never
revives: `leases_renew` renews every lease of a process in one statement, its own transaction,
and reports which came back lost. Like every protocol statement it is a plan (steps.py).
"""

import os
import socket
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field

from .. import sql
from .steps import Query, Steps, as_plan


@dataclass(frozen=True)
class Fence:
    """The coordinates of one holder of one execution."""

    execution_id: uuid.UUID
    request_id: uuid.UUID
    token: int
    owner: str
    # The two ids as text, made once: a run's rows, keys and log lines want them a dozen times.
    execution_text: str = field(init=False, repr=False, compare=False)
    request_text: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "execution_text", str(self.execution_id))
        object.__setattr__(self, "request_text", str(self.request_id))

    def params(self) -> dict:
        return {
            "execution_id": self.execution_id,
            "request_id": self.request_id,
            "token": self.token,
            "owner": self.owner,
        }

    def log_extra(self, **more: object) -> dict:
        return {
            "execution_id": self.execution_text,
            "request_id": self.request_text,
            "token": self.token,
            **more,
        }


class ExecutionSuperseded(Exception):
    """Another holder owns this execution (a newer token, a lost lease, or a cancellation).

    Not a failed attempt: the dispatcher settles it and never retries it.
    """

    def __init__(self, execution_id: uuid.UUID | str, *, step: str, token: int | None = None):
        self.execution_id = str(execution_id)
        self.step = step
        self.token = token
        super().__init__(
            f"execution {self.execution_id} is held by another holder (token {token} is stale or "
            f"its lease expired); refused at {step}. This dispatch is superseded, not failed."
        )


class ExecutionInterrupted(Exception):
    """The holder was told to stop (shutdown past the drain, or a lost lease) between two steps.

    Nothing more is written; the lease and the checkpoints let another worker recover it.
    """

    def __init__(self, execution_id: uuid.UUID | str, *, step: str) -> None:
        self.execution_id = str(execution_id)
        self.step = step
        super().__init__(f"execution {self.execution_id} interrupted before {step}")


def lease_owner_name() -> str:
    """A lease owner unique to this process: host, process id and a random suffix."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


@as_plan()
def leases_renew(
    *, owner: str, held: Iterable[Fence], lease_seconds: float
) -> Steps[set[tuple[uuid.UUID, int]]]:
    """Renew every held lease in one statement; the plan returns the (execution id, token)
    renewed. A held lease missing from the result is lost: its token is stale or it had expired.
    """
    fences = sorted(held, key=lambda f: f.execution_id)
    if not fences:
        return set()
    rows = yield Query(
        sql.RENEW_LEASES,
        {
            "execution_ids": [f.execution_id for f in fences],
            "request_ids": [f.request_id for f in fences],
            "tokens": [f.token for f in fences],
            "owner": owner,
            "lease_seconds": lease_seconds,
        },
    )
    return {(row[0], row[1]) for row in rows}


def lease_is_held(*, fence: Fence) -> Steps[bool]:
    """True while this holder's lease is valid by database time (a fenced read; a step of a
    caller's plan)."""
    row = yield Query(sql.LEASE_PROBE, fence.params(), fetch="one")
    return row is not None


@as_plan()
def lease_held(*, fence: Fence) -> Steps[bool]:
    """`lease_is_held` as a plan of its own: may a call still go (runner._call_if_held)?"""
    return (yield from lease_is_held(fence=fence))
