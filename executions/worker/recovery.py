"""The recovery table (docs/worker-protocol.md#recovery) and what the worker does with each
outcome (INTEGRATIONS.md#what-the-worker-does-with-each-class), as pure decisions.

Each function takes what the runner knows (a checkpoint, an effect, an attempt, hashes, an
adapter's result) and returns one `Decision`, a `Verb` with its code; the runner applies it and
nothing here reads or writes anything. `before_call` decides for an action that already has a
checkpoint (a foreign result is never used, an uncertain non-idempotent write never repeated, an
operator's REPLAY_AUTHORIZED grants exactly one more attempt); `after_call` for the answer.
"""

import enum
from dataclasses import dataclass
from typing import Any

from actions.base import ActionResult, Outcome
from orquestador import errors

from ..flows.canonical import sha256_hex
from ..models import CheckpointStatus, Effect
from ..queue.claims import CheckpointRecord
from ..queue.finalize import AttemptSettlement

MAX_DETAIL_CHARS = 500  # characters of an internal error detail kept on a row
# Execution error codes an adapter may report as its own PERMANENT refusal; any other adapter
# code becomes PERMANENT_FAILURE on the execution (the checkpoint keeps the adapter's code).
ADAPTER_EXECUTION_CODES = frozenset(
    {errors.INPUT_INVALID, errors.OUTPUT_INVALID, errors.CONTRACT_MISMATCH}
)
# An asynchronous provider's ACCEPTED call is as uncertain as a RUNNING one once its callback is
# overdue: it may or may not have been carried out.
UNCERTAIN = (CheckpointStatus.RUNNING, CheckpointStatus.UNKNOWN, CheckpointStatus.ACCEPTED)


class Verb(enum.StrEnum):
    REUSE = "reuse"  # a SUCCEEDED checkpoint that still matches: its output, no call
    PROCEED = "proceed"  # go on: call the adapter, save its output, or start the actions
    RETRY = "retry"  # settle the attempt and schedule the next one (RETRY_WAIT)
    FAIL = "fail"  # FAILED, request released; with a write outstanding, finalize.py reconciles
    RECONCILE = "reconcile"  # RECONCILIATION_REQUIRED at once, the request kept blocked
    INTERRUPT = "interrupt"  # told to stop mid-call: write nothing, RUNNING left for the lease


@dataclass(frozen=True)
class Decision:
    verb: Verb
    code: str | None = None  # the execution's error code (FAIL, RECONCILE, RETRY)
    detail: str | None = None
    settlement: AttemptSettlement | None = None  # how to settle the attempt that just ended
    output: dict[str, Any] | None = None  # REUSE: the recovered output; PROCEED: the one to save
    previous_attempt: int = 0  # PROCEED before a call: the attempt of the checkpoint found
    retry_after: float | None = None  # RETRY: seconds the provider asked for

    @property
    def ends_run(self) -> bool:
        return self.verb not in (Verb.REUSE, Verb.PROCEED)


PROCEED = Decision(Verb.PROCEED)


def short(text: str | None) -> str | None:
    if text is None:
        return None
    return text if len(text) <= MAX_DETAIL_CHARS else text[: MAX_DETAIL_CHARS - 1] + "…"


def fail(code: str, detail: str | None, settlement: AttemptSettlement | None = None) -> Decision:
    return Decision(Verb.FAIL, code, short(detail), settlement)


def reconcile(
    code: str, detail: str | None, settlement: AttemptSettlement | None = None
) -> Decision:
    return Decision(Verb.RECONCILE, code, short(detail), settlement)


def input_hash(action_input: Any) -> str:
    """The hash recorded on a checkpoint: SHA-256 of the input's canonical JSON, in hex."""
    return sha256_hex(action_input)


# ------------------------------------------------------------------------------
# Before the actions
# ------------------------------------------------------------------------------
def before_run(
    *,
    transition_found: bool,
    transition_id: str,
    flow_id: int,
    revision: int,
    accepted_revision: int,
) -> Decision:
    """The pinned flow must have the transition; the request must still be at the accepted
    revision (otherwise the run stops before any adapter call)."""
    if not transition_found:
        return fail(
            errors.CONTRACT_MISMATCH,
            f"transition {transition_id!r} is not in the pinned flow {flow_id}",
        )
    if revision != accepted_revision:
        return fail(
            errors.REQUEST_MODIFIED,
            f"the request is at revision {revision}, not the accepted revision {accepted_revision}",
        )
    return PROCEED


# ------------------------------------------------------------------------------
# Before an adapter call
# ------------------------------------------------------------------------------
def before_call(
    checkpoint: CheckpointRecord | None,
    *,
    action_id: str,
    input_hash: str,
    external_key: str,
    effect: str,
    max_attempts: int,
    input_problem: str | None,
) -> Decision:
    """What to do with an action, given the checkpoint it already has (None: first call)."""
    previous_attempt = 0
    if checkpoint is not None:
        expected = (input_hash, external_key, effect)
        found = (checkpoint.input_hash, checkpoint.external_key, checkpoint.effect)
        if expected != found:
            names = ("input hash", "external key", "effect")
            differ = [n for n, a, b in zip(names, expected, found, strict=True) if a != b]
            return reconcile(
                errors.CONTRACT_MISMATCH,
                f"action {action_id!r}: the checkpoint's {', '.join(differ)} differ from what "
                "would be sent now",
            )
        if checkpoint.status == CheckpointStatus.SUCCEEDED:
            return Decision(Verb.REUSE, output=checkpoint.output or {})
        if checkpoint.status in UNCERTAIN and effect == Effect.NON_IDEMPOTENT_WRITE:
            return reconcile(
                errors.UNCERTAIN_WRITE,
                f"action {action_id!r} (NON_IDEMPOTENT_WRITE) was {checkpoint.status} at "
                f"attempt {checkpoint.attempt}; it is never repeated without an operator",
            )
        replay = (
            checkpoint.status == CheckpointStatus.FAILED
            and checkpoint.error_code == errors.REPLAY_AUTHORIZED
        )
        if checkpoint.attempt >= max_attempts and not replay:
            return fail(
                errors.RETRIES_EXHAUSTED,
                f"action {action_id!r} was {checkpoint.status} after {checkpoint.attempt} of "
                f"{max_attempts} attempts",
            )
        previous_attempt = checkpoint.attempt
    if input_problem is not None:
        return fail(errors.INPUT_INVALID, f"action {action_id!r} input {input_problem}")
    return Decision(Verb.PROCEED, previous_attempt=previous_attempt)


# ------------------------------------------------------------------------------
# After an adapter call
# ------------------------------------------------------------------------------
def after_call(
    result: ActionResult,
    *,
    action_id: str,
    attempt: int,
    effect: str,
    max_attempts: int,
    output_problem: str | None,
    cancelled: bool,
) -> Decision:
    """What to do with an adapter's result. `output_problem` is why a SUCCEEDED result's output
    breaks the contract (None: valid); `cancelled`, whether the holder was told to stop."""
    detail = short(result.error_detail)
    if result.outcome == Outcome.SUCCEEDED:
        output = result.output if result.output is not None else {}
        if output_problem is None:
            return Decision(Verb.PROCEED, output=output)
        # A read with a bad output had no effect; a write with one did happen, but its result
        # cannot be trusted: an operator decides.
        is_read = effect == Effect.READ_ONLY
        settlement = AttemptSettlement(
            action_id=action_id,
            attempt=attempt,
            status=CheckpointStatus.FAILED if is_read else CheckpointStatus.UNKNOWN,
            error_code=errors.OUTPUT_INVALID,
            error_detail=short(output_problem),
            output=None if is_read or not isinstance(output, dict) else output,
        )
        ending = fail if is_read else reconcile
        return ending(
            errors.OUTPUT_INVALID, f"action {action_id!r} output {output_problem}", settlement
        )
    if result.outcome == Outcome.PERMANENT:
        code = result.error_code or errors.PERMANENT_FAILURE
        return fail(
            code if code in ADAPTER_EXECUTION_CODES else errors.PERMANENT_FAILURE,
            f"action {action_id!r}: {code}: {detail or 'refused by the provider'}",
            AttemptSettlement(action_id, attempt, CheckpointStatus.FAILED, code, detail),
        )
    if result.outcome == Outcome.UNKNOWN and effect == Effect.NON_IDEMPOTENT_WRITE:
        return reconcile(
            errors.UNCERTAIN_WRITE,
            f"action {action_id!r}: the outcome of a NON_IDEMPOTENT_WRITE is unknown"
            + (f" ({detail})" if detail else ""),
            AttemptSettlement(
                action_id,
                attempt,
                CheckpointStatus.UNKNOWN,
                result.error_code or errors.UNCERTAIN_WRITE,
                detail,
            ),
        )
    # TRANSIENT (no effect, or a safe one), or UNKNOWN of a READ_ONLY/IDEMPOTENT_WRITE.
    if cancelled:
        # Stopped mid-call (lease lost or shutdown): leave the RUNNING checkpoint for recovery
        # rather than spend an attempt on an interruption.
        return Decision(Verb.INTERRUPT)
    settlement = AttemptSettlement(
        action_id=action_id,
        attempt=attempt,
        status=(
            CheckpointStatus.FAILED
            if result.outcome == Outcome.TRANSIENT
            else CheckpointStatus.UNKNOWN
        ),
        error_code=result.error_code or errors.TRANSIENT_FAILURE,
        error_detail=detail,
    )
    if attempt < max_attempts:
        return Decision(
            Verb.RETRY, settlement.error_code, None, settlement, retry_after=result.retry_after
        )
    return fail(
        errors.RETRIES_EXHAUSTED,
        f"action {action_id!r} failed {attempt} of {max_attempts} attempts: "
        f"{settlement.error_code}" + (f" ({detail})" if detail else ""),
        settlement,
    )


# ------------------------------------------------------------------------------
# At the final commit
# ------------------------------------------------------------------------------
def finalize_refused(*, request_unchanged: bool, unsettled: list[str]) -> Decision:
    """A final commit matched nothing while the holder still holds its lease: say why.

    `request_unchanged`: the request is still blocked by this execution at the state, revision
    and version loaded; `unsettled`: the expected actions whose checkpoint is missing or not
    SUCCEEDED ("action STATUS").
    """
    if not request_unchanged:
        return fail(
            errors.REQUEST_MODIFIED,
            "the request's state, revision or version changed since the execution was loaded",
        )
    if unsettled:
        # Something other than this holder changed its checkpoints: their results are foreign.
        return reconcile(
            errors.CONTRACT_MISMATCH,
            "at the final commit these checkpoints are not SUCCEEDED: " + ", ".join(unsettled),
        )
    # Both changed back between the commit and the probe: nothing to trust either way.
    return fail(errors.REQUEST_MODIFIED, "the request or its checkpoints changed at the commit")
