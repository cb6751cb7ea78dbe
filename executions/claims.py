"""Claiming executions and loading what a holder needs to run one.

Invariants and transaction boundaries:
- `executions_claim` is one statement, hence one transaction, committed (autocommit) before any
  evaluation or adapter call: it takes only due rows (PENDING, due RETRY_WAIT, RUNNING with an
  expired lease) with FOR UPDATE SKIP LOCKED, in (next_attempt_at, created_at, id) order, at most
  `limit` (the caller's free slots), and gives each attempts + 1, token + 1, this owner and a
  lease from the database clock; a takeover of an expired lease also appends LEASE_TAKEN_OVER
  (previous owner, token and lease expiry; new owner and token) in that same statement;
- the claim also returns the principal of whoever caused this dispatch (None: system; see
  sql.CLAIM_EXECUTIONS), the accepted request snapshot and, for a reclaimed execution, its
  checkpoints, read under the new token in the same statement, so the holder starts without
  another round trip; `execution_load` is the same read on its own, fenced: a stale holder gets
  `ExecutionSuperseded`, never data;
- flows are immutable once published, so their definitions are read once per process and cached.
"""

import threading
import uuid
from dataclasses import dataclass, field
from typing import Any

import psycopg

from . import faultpoints, sql
from .leases import ExecutionSuperseded, Fence


@dataclass(frozen=True)
class CheckpointRecord:
    """A checkpoint as loaded at the start of a run."""

    action_id: str
    sequence: int
    capability: str
    capability_version: int
    effect: str
    status: str
    input_hash: str
    external_key: str
    attempt: int
    output: dict[str, Any] | None
    error_code: str | None


@dataclass(frozen=True)
class Snapshot:
    """The accepted request snapshot and the checkpoints of one execution."""

    data: dict[str, Any]
    state: str
    revision: int
    version: int
    owner: str
    scope: str
    accepted_revision: int
    checkpoints: dict[str, CheckpointRecord] = field(default_factory=dict)


@dataclass(frozen=True)
class Claim:
    """One execution this process has just claimed: its holder (`fence`, carried unchanged to
    every later write), what to run, and the snapshot read under that token."""

    fence: Fence
    flow_id: int
    transition_id: str
    attempts: int
    # Who caused this dispatch ({subject, scope, roles}); None: system (a takeover after an
    # expired lease, a wait or callback past its deadline, an operator's requeue).
    principal: dict[str, Any] | None
    snapshot: Snapshot | None = None
    # Consecutive takeovers after lease expiry without progress, this claim included: above
    # WORKER_MAX_RECLAIMS the holder settles the execution (`poisoned`) instead of running it.
    reclaims: int = 0
    # Whether this claim took the execution over from a holder whose lease expired (the claim
    # appended LEASE_TAKEN_OVER for it).
    taken_over: bool = False

    def poisoned(self, max_reclaims: int) -> bool:
        return self.reclaims > max_reclaims

    @property
    def execution_id(self) -> uuid.UUID:
        return self.fence.execution_id


def executions_claim(
    *,
    conn: psycopg.Connection,
    owner: str,
    limit: int,
    lease_seconds: float,
    outage: bool = False,
) -> list[Claim]:
    """Claim up to `limit` due executions for `owner` (one statement, committed on return).

    `outage`: this process saw the database unreachable within the last lease, so the leases it
    takes over may have lapsed for that reason; they do not count toward the poison cap.
    """
    if limit <= 0:
        return []
    rows = conn.execute(
        sql.CLAIM_EXECUTIONS,
        {"owner": owner, "limit": limit, "lease_seconds": lease_seconds, "outage": outage},
    ).fetchall()
    if rows:
        faultpoints.reach(faultpoints.CLAIM_COMMITTED)
    return [_claim(row, owner) for row in rows]


def _claim(row: tuple, lease_owner: str) -> Claim:
    (execution_id, request_id, flow_id, transition_id, attempts, token, principal) = row[:7]
    return Claim(
        fence=Fence(execution_id, request_id, token, lease_owner),
        flow_id=flow_id,
        transition_id=transition_id,
        attempts=attempts,
        principal=principal or None,
        snapshot=_snapshot(row[7:15]),
        reclaims=row[15],
        taken_over=row[16],
    )


def _snapshot(row: tuple) -> Snapshot:
    data, state, revision, version, owner, scope, accepted_revision, checkpoints = row
    return Snapshot(
        data=data,
        state=state,
        revision=revision,
        version=version,
        owner=owner,
        scope=scope,
        accepted_revision=accepted_revision,
        checkpoints={c["action_id"]: CheckpointRecord(**c) for c in checkpoints or ()},
    )


def execution_load(*, conn: psycopg.Connection, fence: Fence) -> Snapshot:
    """Load the request snapshot and checkpoints, as this holder (fenced read)."""
    row = conn.execute(sql.LOAD_EXECUTION, fence.params()).fetchone()
    if row is None:
        raise ExecutionSuperseded(fence.execution_id, step="load", token=fence.token)
    return _snapshot(row)


class FlowCache:
    """Flow definitions by id. Published flows never change, so an entry never goes stale."""

    def __init__(self) -> None:
        self._definitions: dict[int, dict[str, Any]] = {}
        self._lock = threading.Lock()

    def cached(self, flow_id: int) -> dict[str, Any] | None:
        """The definition if this process has read it already (no connection needed)."""
        return self._definitions.get(flow_id)  # one dict read: atomic, no lock

    def get(self, *, conn: psycopg.Connection, flow_id: int) -> dict[str, Any]:
        found = self.cached(flow_id)
        if found is not None:
            return found
        row = conn.execute(sql.FLOW_DEFINITION, {"flow_id": flow_id}).fetchone()
        if row is None:  # impossible: executions reference their flow (PROTECT)
            raise LookupError(f"flow {flow_id} not found")
        with self._lock:
            return self._definitions.setdefault(flow_id, row[0])
