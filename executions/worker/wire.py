"""What crosses the worker runtime boundary (docs/worker-protocol.md#runtime-spi), and its one JSON
form.

Going in, an `ExecutionPackage`: the claim's `Dispatch` (the holder and what to run, never code)
and why it runs. Coming out, an `ExecutionResult`: the same dispatch and where the run left the
execution (`RunOutcome`), folded into the SPI's `completed` / `suspended` / `failed`;
`dispatch_once` adds `superseded` and `interrupted` for a dispatch that ended without a result.
Both are typed values in-process; their JSON form is made here, and only the remote runtime and
the worker endpoint make or read it, so the JSON field names below are written once. They are
public (a worker endpoint of another release reads them): never rename them.

Invariants:
- the holder is one `Fence` in one `Dispatch` end to end (claim -> slot -> run -> every write
  -> result, with a package between slot and run only where it crosses to a remote runtime);
  the JSON carries it as `executionId`, `requestId`, `fencingToken`, `leaseOwner`;
- reading is strict: `package_read` refuses unknown fields and wrong types with a
  `PackageInvalid` naming the field, and `result_read` refuses anything that is not a result for
  the expected execution with a `ResultInvalid`.
"""

import datetime
import enum
import json
import uuid
from dataclasses import dataclass, field
from typing import Any

from orquestador.tracing import MAX_TRACESTATE_LENGTH

from ..models import ExecutionStatus
from ..queue.claims import Dispatch
from ..queue.leases import Fence

MAX_TEXT_LENGTH = 255  # characters of transitionId and leaseOwner
TRACE_CONTEXT = "traceContext"  # the metadata key of the execution's stored trace context
SUPERSEDED = "superseded"  # the wire code of a superseded refusal
INTERRUPTED = "interrupted"  # the wire code of a holder told to stop between two steps
# The version of the package and result JSON below. A reader refuses any other (a package with a
# 400 naming it, a result as garbled), so a rolling deploy that mixes versions fails loudly.
FORMAT_VERSION = 1
PACKAGE_KEYS = frozenset(
    {
        "formatVersion",
        "executionId",
        "requestId",
        "flowId",
        "transitionId",
        "fencingToken",
        "leaseOwner",
        "attempts",
        "principal",
        "resumeEvent",
        "metadata",
    }
)


class PackageInvalid(Exception):
    """A posted body is not an acceptable package; the message says why and is safe to show."""


class ResultInvalid(Exception):
    """An endpoint's answer is not a result for the execution it was sent."""


# ------------------------------------------------------------------------------
# Going in
# ------------------------------------------------------------------------------
@dataclass(frozen=True)
class ExecutionPackage:
    """What a runtime runs: one dispatch (its identity and resume coordinates: the holder, the
    flow and transition, the attempt and principal) and why it runs now."""

    dispatch: Dispatch
    resume_event: dict[str, Any] | None = None
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def execution_id(self) -> uuid.UUID:
        return self.dispatch.execution_id


def principal_tenant(principal: dict[str, Any] | None) -> str | None:
    if not principal:
        return None
    tenant = principal.get("tenant", principal.get("scope"))
    return tenant if isinstance(tenant, str) else None


def package_json(package: ExecutionPackage) -> str:
    """The package as the remote runtime posts it (the snapshot stays behind: the endpoint
    loads it under the same fence)."""
    dispatch = package.dispatch
    return json.dumps(
        {
            "formatVersion": FORMAT_VERSION,
            "executionId": dispatch.fence.execution_text,
            "requestId": dispatch.fence.request_text,
            "flowId": dispatch.flow_id,
            "transitionId": dispatch.transition_id,
            "fencingToken": dispatch.fence.token,
            "leaseOwner": dispatch.fence.owner,
            "attempts": dispatch.attempts,
            "principal": dispatch.principal,
            "resumeEvent": package.resume_event,
            "metadata": _with_trace_context(package.metadata, dispatch.trace_context),
        },
        separators=(",", ":"),
    )


def _with_trace_context(
    metadata: dict[str, Any], trace_context: dict[str, str] | None
) -> dict[str, Any]:
    """The package's metadata, with the execution's stored trace context as `traceContext` so
    the endpoint's run continues its trace (docs/operations.md#traces)."""
    return metadata if trace_context is None else {**metadata, TRACE_CONTEXT: trace_context}


def _trace_context(metadata: dict[str, Any]) -> dict[str, str] | None:
    """The `traceContext` of posted metadata: the W3C fields only, each a bounded string."""
    found = metadata.get(TRACE_CONTEXT)
    if found is None:
        return None
    if not isinstance(found, dict) or not isinstance(found.get("traceparent"), str):
        raise PackageInvalid("metadata.traceContext must be an object with a traceparent string")
    kept = {k: v for k, v in found.items() if k in ("traceparent", "tracestate")}
    if not all(isinstance(v, str) and len(v) <= MAX_TRACESTATE_LENGTH for v in kept.values()):
        raise PackageInvalid(
            f"metadata.traceContext values must be strings of at most {MAX_TRACESTATE_LENGTH} "
            "characters"
        )
    return kept


def _uuid(raw: dict[str, Any], key: str) -> uuid.UUID:
    value = raw.get(key)
    try:
        if not isinstance(value, str):
            raise ValueError
        return uuid.UUID(value)
    except ValueError:
        raise PackageInvalid(f"{key} must be a UUID string") from None


def _integer(raw: dict[str, Any], key: str, *, minimum: int) -> int:
    value = raw.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise PackageInvalid(f"{key} must be an integer of at least {minimum}")
    return value


def _text(raw: dict[str, Any], key: str) -> str:
    value = raw.get(key)
    if not isinstance(value, str) or not value or len(value) > MAX_TEXT_LENGTH:
        raise PackageInvalid(f"{key} must be a string of 1 to {MAX_TEXT_LENGTH} characters")
    return value


def _object(raw: dict[str, Any], key: str) -> dict[str, Any] | None:
    value = raw.get(key)
    if value is not None and not isinstance(value, dict):
        raise PackageInvalid(f"{key} must be an object or null")
    return value


def package_read(raw: dict[str, Any]) -> ExecutionPackage:
    """Validate a package field by field; raise PackageInvalid saying what is wrong."""
    unknown = sorted(set(raw) - PACKAGE_KEYS)
    if unknown:
        raise PackageInvalid(f"unknown fields: {', '.join(k[:40] for k in unknown[:5])}")
    version = raw.get("formatVersion")
    if version != FORMAT_VERSION:
        raise PackageInvalid(
            f"formatVersion {str(version)[:20]} is not supported (this worker reads "
            f"formatVersion {FORMAT_VERSION})"
        )
    resume_event = _object(raw, "resumeEvent")
    if resume_event is not None and not (
        isinstance(resume_event.get("eventId"), str) and isinstance(resume_event.get("event"), str)
    ):
        raise PackageInvalid("resumeEvent must be an object with eventId and event strings")
    metadata = _object(raw, "metadata") or {}
    dispatch = Dispatch(
        fence=Fence(
            execution_id=_uuid(raw, "executionId"),
            request_id=_uuid(raw, "requestId"),
            token=_integer(raw, "fencingToken", minimum=0),
            owner=_text(raw, "leaseOwner"),
        ),
        flow_id=_integer(raw, "flowId", minimum=1),
        transition_id=_text(raw, "transitionId"),
        attempts=_integer(raw, "attempts", minimum=1) if "attempts" in raw else 1,
        # Honoured only because the caller has already presented the endpoint's token.
        principal=_object(raw, "principal"),
        trace_context=_trace_context(metadata),
    )
    return ExecutionPackage(
        dispatch,
        # The event itself is already durable (its wait's checkpoint); this says why it runs.
        resume_event=resume_event,
        metadata={k: v for k, v in metadata.items() if k != TRACE_CONTEXT},
    )


def cancel_json(execution_id: uuid.UUID, token: int, reason: str | None) -> str:
    return json.dumps({"executionId": str(execution_id), "fence": token, "reason": reason})


def cancel_read(raw: dict[str, Any]) -> tuple[uuid.UUID, int | None, str | None]:
    """(execution id, token or None, reason) of a posted cancel; PackageInvalid if malformed."""
    execution_id = _uuid(raw, "executionId")
    token = _integer(raw, "fence", minimum=0) if raw.get("fence") is not None else None
    reason = raw.get("reason")
    if reason is not None and not isinstance(reason, str):
        raise PackageInvalid("reason must be a string or null")
    return execution_id, token, (reason or "")[:MAX_TEXT_LENGTH] or None


# ------------------------------------------------------------------------------
# Coming out
# ------------------------------------------------------------------------------
@dataclass(frozen=True)
class RunOutcome:
    """Where one run left its execution."""

    status: ExecutionStatus  # SUCCEEDED, SUSPENDED, RETRY_WAIT, FAILED, RECONCILIATION_REQUIRED
    error_code: str | None = None
    target_state: str | None = None
    outcome: str | None = None
    next_attempt_at: datetime.datetime | None = None  # RETRY_WAIT: when due; SUSPENDED: deadline
    waiting_on: str | None = None  # SUSPENDED: the wait action (or asynchronous action)
    waiting_for: str | None = None  # SUSPENDED: its event (`callback` for a provider's answer)


class Ending(enum.StrEnum):
    """How a dispatch ended. The first three are the SPI's results; the last two are refusals
    that carry no run (the execution was left as it was)."""

    COMPLETED = "completed"
    SUSPENDED = "suspended"
    FAILED = "failed"
    SUPERSEDED = SUPERSEDED
    INTERRUPTED = INTERRUPTED


# The SPI's three results (docs/worker-protocol.md#runtime-spi): `completed`, `suspended` only for a
# wait, and `failed` for everything else, whose folded state says which (a retry that is due later,
# FAILED, CANCELLED or RECONCILIATION_REQUIRED).
_ENDING_OF = {
    ExecutionStatus.SUCCEEDED: Ending.COMPLETED,
    ExecutionStatus.SUSPENDED: Ending.SUSPENDED,
    # Parked by a route limit (executions/worker/limiter.py): suspended on `throttled`, due
    # at nextAttemptAt or when a call in flight ends.
    ExecutionStatus.PENDING: Ending.SUSPENDED,
    ExecutionStatus.RETRY_WAIT: Ending.FAILED,
    ExecutionStatus.FAILED: Ending.FAILED,
    ExecutionStatus.CANCELLED: Ending.FAILED,
    ExecutionStatus.COMPENSATED: Ending.FAILED,  # the transition failed; its writes were undone
    ExecutionStatus.RECONCILIATION_REQUIRED: Ending.FAILED,
}


@dataclass(frozen=True)
class ExecutionResult:
    """How one dispatch ended and, unless it was refused, where the run left the execution."""

    dispatch: Dispatch
    status: Ending
    run: RunOutcome | None = None  # None exactly when superseded or interrupted

    @classmethod
    def of(cls, dispatch: Dispatch, run: RunOutcome) -> "ExecutionResult":
        return cls(dispatch, _ENDING_OF[run.status], run)

    @property
    def execution_id(self) -> uuid.UUID:
        return self.dispatch.execution_id

    @property
    def execution_status(self) -> ExecutionStatus | None:
        """The status the run left (None when the dispatch was refused)."""
        return self.run.status if self.run is not None else None

    # The folded state and its mirrors, as the SPI names them.
    @property
    def state(self) -> dict[str, Any]:
        run = self.run
        if run is None:
            return {}
        due = run.next_attempt_at
        return {
            "executionStatus": str(run.status),
            "errorCode": run.error_code,
            "targetState": run.target_state,
            "outcome": run.outcome,
            "nextAttemptAt": due.isoformat() if due is not None else None,
        }

    @property
    def output(self) -> dict[str, Any] | None:
        if self.status != Ending.COMPLETED or self.run is None:
            return None
        return {"outcome": self.run.outcome, "targetState": self.run.target_state}

    @property
    def error(self) -> dict[str, Any] | None:
        if self.status != Ending.FAILED or self.run is None:
            return None
        return {"code": self.run.error_code}

    @property
    def suspended_on(self) -> dict[str, Any] | None:
        if self.status != Ending.SUSPENDED or self.run is None:
            return None
        due = self.run.next_attempt_at
        return {
            "actionId": self.run.waiting_on,
            "event": self.run.waiting_for,
            "deadline": due.isoformat() if due is not None else None,
        }


def result_wire(result: ExecutionResult) -> dict[str, Any]:
    """The JSON of a result (completed, suspended or failed)."""
    return {
        "formatVersion": FORMAT_VERSION,
        "executionId": str(result.execution_id),
        "status": str(result.status),
        "state": result.state,
        "output": result.output,
        "error": result.error,
        "suspendedOn": result.suspended_on,
    }


def _optional_text(state: dict[str, Any], key: str) -> str | None:
    value = state.get(key)
    if value is not None and not isinstance(value, str):
        raise ResultInvalid(f"the result's state.{key} is not a string")
    return value


def result_read(raw: Any, *, dispatch: Dispatch) -> ExecutionResult:
    """Read an endpoint's result for `dispatch`; anything else raises ResultInvalid."""
    if not isinstance(raw, dict):
        raise ResultInvalid("the result is not a JSON object")
    if raw.get("formatVersion") != FORMAT_VERSION:
        raise ResultInvalid(
            f"the result's formatVersion {str(raw.get('formatVersion'))[:20]} is not "
            f"{FORMAT_VERSION}"
        )
    if raw.get("executionId") != str(dispatch.execution_id):
        raise ResultInvalid("the result is for another execution")
    state = raw.get("state")
    if not isinstance(state, dict):
        raise ResultInvalid("the result has no state object")
    try:
        status = ExecutionStatus(state.get("executionStatus", ""))
        ending = _ENDING_OF[status]
    except (ValueError, KeyError):
        raise ResultInvalid("the result's state has no resting executionStatus") from None
    if raw.get("status") != ending:
        raise ResultInvalid(f"the result's status {str(raw.get('status'))[:40]!r} is not {ending}")
    for key in ("output", "error", "suspendedOn"):
        if raw.get(key) is not None and not isinstance(raw[key], dict):
            raise ResultInvalid(f"the result has a {key!r} that is no object")
    due = None
    next_attempt_at = _optional_text(state, "nextAttemptAt")
    if next_attempt_at is not None:
        try:
            due = datetime.datetime.fromisoformat(next_attempt_at)
        except ValueError:
            raise ResultInvalid("the result's state.nextAttemptAt is not a timestamp") from None
    suspended_on = raw.get("suspendedOn") or {}
    run = RunOutcome(
        status=status,
        error_code=_optional_text(state, "errorCode"),
        target_state=_optional_text(state, "targetState"),
        outcome=_optional_text(state, "outcome"),
        next_attempt_at=due,
        waiting_on=_optional_text(suspended_on, "actionId"),
        waiting_for=_optional_text(suspended_on, "event"),
    )
    return ExecutionResult(dispatch, ending, run)


def refusal_wire(code: str, execution_id: uuid.UUID) -> dict[str, str]:
    """The exact 409 body of a superseded or interrupted dispatch."""
    return {"code": code, "executionId": str(execution_id)}
