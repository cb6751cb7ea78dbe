"""Claiming executions and loading what a holder needs to run one (docs/worker-protocol.md#claim,
docs/adr/0001-claims-with-skip-locked.md).

Invariants: `executions_claim` is one statement, committed before any evaluation or call: due rows
only, FOR UPDATE SKIP LOCKED, in claim order (executions/sql/fairness.py), at most `limit`, each
with attempts + 1, token + 1, this owner and a database-clock lease, a takeover audited; it returns
the dispatch principal, the stored trace context, the accepted snapshot and a reclaimed execution's
checkpoints; `execution_load` is that read alone, fenced. Each row is read by name into one
`Dispatch`, carried to its last write; definitions are kept by executions/flows/cache.py.
"""

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

# Django's: no lock taken on first access, as functools' takes one before Python 3.12 (three
# per execution, on the worker's hot path).
from django.utils.functional import cached_property
from psycopg.rows import kwargs_row, scalar_row

from orquestador.tracing import trace_id_of

from .. import sql
from . import faultpoints
from .leases import ExecutionSuperseded, Fence
from .steps import Query, Steps, as_plan


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
    # The forward path's error code once the execution compensates
    # (executions/queue/compensation.py): the holder then runs the compensations instead of the
    # actions.
    compensation_cause: str | None = None


@dataclass(frozen=True)
class Place:
    """A route's place granted with the claim (sql.CLAIM_PASSED): the call of `action_id`'s
    attempt `attempt`, under the claim's token; the run uses it instead of taking one."""

    call_id: int
    action_id: str
    attempt: int


SYSTEM_PRINCIPAL = "system"  # who a dispatch runs for without a principal (timeouts, recovery)


@dataclass(frozen=True)
class Dispatch:
    """One claimed execution, as the one object carried from the claim to its last write and
    its result: the holder (`fence`, unchanged in every fenced write), what to run, and the
    snapshot read under that token."""

    fence: Fence
    flow_id: int
    transition_id: str
    attempts: int
    # Who caused this dispatch ({subject, scope, roles}); None: system (a takeover after an
    # expired lease, a wait or callback past its deadline, an operator's requeue).
    principal: dict[str, Any] | None
    # None: not read yet (a package posted to the worker endpoint); the run loads it, fenced.
    snapshot: Snapshot | None = None
    # Consecutive takeovers after lease expiry without progress, this claim included: above
    # WORKER_MAX_RECLAIMS the holder settles the execution (`poisoned`) instead of running it.
    reclaims: int = 0
    # Whether this claim took the execution over from a holder whose lease expired (the claim
    # appended LEASE_TAKEN_OVER for it).
    taken_over: bool = False
    # The W3C trace context stored at the acceptance ({traceparent, tracestate}), which every
    # run continues (executions/worker/spans.py); None: tracing was off then.
    trace_context: dict[str, str] | None = None
    # A route's place granted with the claim (a call's end passed it on: CLAIM_PASSED).
    place: Place | None = None

    def poisoned(self, max_reclaims: int) -> bool:
        return self.reclaims > max_reclaims

    @property
    def execution_id(self) -> uuid.UUID:
        return self.fence.execution_id

    # Computed once per dispatch: every log line and audit event of the run starts with them.
    @cached_property
    def log_extra(self) -> dict[str, Any]:
        extra = self.fence.log_extra(attempt=self.attempts)
        trace_id = trace_id_of(self.trace_context)
        return extra if trace_id is None else {**extra, "trace_id": trace_id}

    @cached_property
    def principal_name(self) -> str:
        """`sub@tenant` of the principal, as adapters forward it; `system` without one."""
        principal = self.principal
        if not principal:
            return SYSTEM_PRINCIPAL
        subject = principal.get("subject")
        tenant = principal.get("tenant", principal.get("scope"))
        if not isinstance(subject, str) or not isinstance(tenant, str):
            return SYSTEM_PRINCIPAL
        return f"{subject}@{tenant}"

    @cached_property
    def audit(self) -> dict[str, Any]:
        """What every audit event of this dispatch's run starts with (never mutated)."""
        return {"transitionId": self.transition_id, "principal": self.principal_name}


@as_plan()
def executions_claim(
    *,
    owner: str,
    limit: int,
    lease_seconds: float,
    outage: bool = False,
    fairness: str = "queue",
) -> Steps[list[Dispatch]]:
    """Claim up to `limit` due executions for `owner` (one statement, committed on return).

    `outage`: this process saw the database unreachable within the last lease, so the leases it
    takes over may have lapsed for that reason; they do not count toward the poison cap.
    `fairness` (WORKER_FAIRNESS): `queue`, oldest first; `tenant`, by rank within the tenant,
    then by age (executions/sql/fairness.py).
    """
    if limit <= 0:
        return []
    rows: list[Dispatch] = yield Query(
        CLAIMS[fairness],
        {"owner": owner, "limit": limit, "lease_seconds": lease_seconds, "outage": outage},
        row_factory=kwargs_row(_dispatch_of(owner)),
    )
    if rows:
        faultpoints.reach(faultpoints.CLAIM_COMMITTED)
    return rows


@as_plan()
def execution_claim_passed(
    *, owner: str, route: str, call_id: int, lease_seconds: float, outage: bool = False
) -> Steps[list[Dispatch]]:
    """End call `call_id` of `route` (a route with max_in_flight) and claim for `owner` the
    oldest execution parked for a place, with that place granted (its dispatch's `place`): one
    statement. None parked: the call is ended, nothing claimed (sql.CLAIM_PASSED)."""
    rows: list[Dispatch] = yield Query(
        sql.CLAIM_PASSED,
        {
            "owner": owner,
            "route": route,
            "call_id": call_id,
            "lease_seconds": lease_seconds,
            "outage": outage,
        },
        row_factory=kwargs_row(_dispatch_of(owner)),
    )
    if rows:
        faultpoints.reach(faultpoints.CLAIM_COMMITTED)
    return rows


# The claim statement of each WORKER_FAIRNESS value.
CLAIMS = {"queue": sql.CLAIM_EXECUTIONS, "tenant": sql.CLAIM_EXECUTIONS_BY_TENANT}


def _dispatch_of(owner: str) -> Callable[..., Dispatch]:
    """The claim's row, by column name (sql.CLAIM_EXECUTIONS), as the dispatch of `owner`."""

    def dispatch(
        *,
        id: uuid.UUID,  # the columns' names, as sql.CLAIM_EXECUTIONS returns them
        request_id: uuid.UUID,
        fencing_token: int,
        flow_id: int,
        transition_id: str,
        attempts: int,
        dispatch_principal: dict[str, Any] | None,
        reclaims: int,
        taken_over: bool,
        trace_context: dict[str, str] | None = None,
        place_call_id: int | None = None,
        place_action_id: str | None = None,
        place_attempt: int | None = None,
        **snapshot: Any,
    ) -> Dispatch:
        return Dispatch(
            fence=Fence(id, request_id, fencing_token, owner),
            flow_id=flow_id,
            transition_id=transition_id,
            attempts=attempts,
            principal=dispatch_principal or None,
            snapshot=_snapshot(**snapshot),
            reclaims=reclaims,
            taken_over=taken_over,
            trace_context=trace_context,
            place=Place(place_call_id, place_action_id, place_attempt)
            if place_call_id is not None
            and place_action_id is not None
            and place_attempt is not None
            else None,
        )

    return dispatch


def _snapshot(*, checkpoints: list[dict[str, Any]] | None, **request: Any) -> Snapshot:
    """The snapshot columns (data, state, revision, version, owner, scope, accepted_revision)
    and the checkpoints, aggregated as JSON objects with CheckpointRecord's field names."""
    return Snapshot(
        **request,
        checkpoints={c["action_id"]: CheckpointRecord(**c) for c in checkpoints or ()},
    )


@as_plan()
def execution_load(*, fence: Fence) -> Steps[Snapshot]:
    """Load the request snapshot and checkpoints, as this holder (fenced read)."""
    snapshot = yield Query(
        sql.LOAD_EXECUTION, fence.params(), fetch="one", row_factory=kwargs_row(_snapshot)
    )
    if snapshot is None:
        raise ExecutionSuperseded(fence.execution_id, step="load", token=fence.token)
    return snapshot


@as_plan()
def flow_definition_load(*, flow_id: int) -> Steps[dict[str, Any]]:
    """A published flow's definition (read once per process: executions/flows/cache.py)."""
    definition = yield Query(
        sql.FLOW_DEFINITION, {"flow_id": flow_id}, fetch="one", row_factory=scalar_row
    )
    if definition is None:  # impossible: executions reference their flow (PROTECT)
        raise LookupError(f"flow {flow_id} not found")
    return definition
