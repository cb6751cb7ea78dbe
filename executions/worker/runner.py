"""Run one claimed execution, action by action, with the recovery rules of SPEC §3.

Invariants (each step names the module that keeps it):
- the holder loads the accepted snapshot and the pinned flow with a fenced read (claims.py); a
  request whose revision is no longer the accepted one stops the run before any adapter call
  (REQUEST_MODIFIED);
- per action: map the input from the accepted data and earlier outputs (recovered ones
  included), resolve the trusted binding (INTEGRATION_UNAVAILABLE before any call), validate the
  input, commit the RUNNING checkpoint, call the adapter with no transaction open, validate the
  output, commit SUCCEEDED (checkpoints.py); the next action starts only after that commit;
- recovery, for an action that already has a checkpoint:
  * its input hash, external key and effect must match what would be sent now, or the run stops
    with CONTRACT_MISMATCH and goes to reconciliation; a foreign result is never used;
  * SUCCEEDED is reused without calling the adapter;
  * FAILED means the earlier attempt certainly had no effect: retried with the same key while
    attempt < max_attempts; an operator's REPLAY_AUTHORIZED grants exactly one more attempt;
  * RUNNING or UNKNOWN: retried with the same key within max_attempts for READ_ONLY and
    IDEMPOTENT_WRITE; never repeated for NON_IDEMPOTENT_WRITE (RECONCILIATION_REQUIRED,
    UNCERTAIN_WRITE, request kept blocked);
- outcomes: TRANSIENT (and UNKNOWN of a safe effect) schedules a retry while attempts remain;
  exhausting them ends FAILED (RETRIES_EXHAUSTED) unless a write is outstanding. PERMANENT and
  every other failure end FAILED with the request released, or RECONCILIATION_REQUIRED when any
  write is SUCCEEDED, RUNNING or UNKNOWN (finalize.py decides under the request lock). UNKNOWN of
  a NON_IDEMPOTENT_WRITE goes to reconciliation at once. An adapter that raises is an UNKNOWN
  outcome: nobody can say what it did;
- finalisation: the pure evaluator decides; updates apply to a copy of the accepted data, which
  must pass the flow's dataSchema and the size limit; then one fenced transaction
  (finalize.py). A final commit that fails leaves RUNNING and the checkpoints for recovery;
- a holder told to stop (lost lease, shutdown past the drain) writes nothing more
  (`ExecutionInterrupted`); a fenced write that matches nothing raises `ExecutionSuperseded`.

Transactions: none is open while an adapter runs; each write above is its own transaction. The
hot-path writes (start, save, finalise) of concurrent runs are grouped into shared statements
(executions/worker/groupcommit.py), each run fenced on its own.
"""

import logging
import random
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jsonschema
import psycopg

from actions.base import ActionContext, ActionResult, Binding, Outcome
from actions.registry import IntegrationUnavailable
from orquestador import errors

from ..checkpoints import StartItem, SucceedItem, external_key
from ..claims import CheckpointRecord, FlowCache, Snapshot, execution_load
from ..finalize import (
    AttemptSettlement,
    FinalizeItem,
    FinalizeRefused,
    execution_fail,
    execution_schedule_retry,
    finalize_refusal,
)
from ..flows.canonical import compact_size, sha256_hex
from ..flows.checks import DRAFT
from ..flows.evaluator import (
    DecisionError,
    UpdateError,
    apply_updates,
    build_context,
    decide,
)
from ..flows.evaluator import resolve_input as map_input
from ..flows.publication import DataError, find_transition, validate_data
from ..leases import ExecutionInterrupted, ExecutionSuperseded, Fence
from ..models import CheckpointStatus, Effect, ExecutionStatus
from .config import WorkerConfig
from .groupcommit import GroupWrites
from .retry import retry_delay_seconds
from .wire import RunOutcome

logger = logging.getLogger("executions.worker")

WORKER_ACTOR = "system:worker"  # the audit actor of everything the worker writes
MAX_DETAIL_CHARS = 500  # characters of an internal error detail kept on a row
SAFE_EFFECTS = (Effect.READ_ONLY, Effect.IDEMPOTENT_WRITE)
# Execution error codes an adapter may report as its own PERMANENT refusal; any other adapter
# code becomes PERMANENT_FAILURE on the execution (the checkpoint keeps the adapter's code).
_ADAPTER_EXECUTION_CODES = frozenset(
    {errors.INPUT_INVALID, errors.OUTPUT_INVALID, errors.CONTRACT_MISMATCH}
)

Resolver = Callable[[str, int], Binding]


@dataclass
class RunnerDeps:
    """What a run needs besides its connection and holder; shared by every run of a process."""

    config: WorkerConfig
    resolve: Resolver
    flows: FlowCache
    rng: random.Random
    writes: GroupWrites


class _Stop(Exception):
    """Internal: the run ended (failed, retried or reconciled) with this outcome."""

    def __init__(self, outcome: RunOutcome) -> None:
        self.outcome = outcome


_validators: dict[tuple[int, bool], tuple[dict, jsonschema.protocols.Validator]] = {}
_validators_lock = threading.Lock()


def _validator(schema: dict, *, formats: bool = True) -> jsonschema.protocols.Validator:
    """A compiled validator per schema object (contracts and cached flows live long).

    Contract schemas check `format`; a flow's dataSchema does not, exactly as
    flows.validate_data (formats are annotations in Draft 2020-12), so the fast path and the
    precise check always agree.
    """
    key = (id(schema), formats)
    with _validators_lock:
        cached = _validators.get(key)
        if cached is not None and cached[0] is schema:
            return cached[1]
        if formats:
            cls = jsonschema.validators.validator_for(schema)
            validator = cls(schema, format_checker=cls.FORMAT_CHECKER)
        else:
            validator = DRAFT(schema)
        _validators[key] = (schema, validator)  # keeps `schema` alive: ids stay unique
        return validator


def _schema_problem(schema: dict, instance: Any) -> str | None:
    validator = _validator(schema)
    if validator.is_valid(instance):  # the common case, without building any error
        return None
    error = jsonschema.exceptions.best_match(validator.iter_errors(instance))
    if error is None:
        return None
    return _short(f"{error.json_path}: {error.message}")


def _short(text: str | None) -> str | None:
    if text is None:
        return None
    return text if len(text) <= MAX_DETAIL_CHARS else text[: MAX_DETAIL_CHARS - 1] + "…"


def _data_acceptable(definition: dict, data: Any) -> bool:
    """Fast path of flows.validate_data: within the size limit and valid, with a cached validator.

    On False the caller asks flows.validate_data for the precise DataError.
    """
    try:
        if compact_size(data) > errors.MAX_DATA_BYTES:
            return False
    except (TypeError, ValueError):
        return False
    return _validator(definition["dataSchema"], formats=False).is_valid(data)


class _Run:
    def __init__(
        self,
        *,
        conn: psycopg.Connection,
        fence: Fence,
        attempts: int,
        deps: RunnerDeps,
        cancelled: threading.Event,
        transition_id: str,
    ) -> None:
        self.conn, self.fence, self.deps, self.cancelled = conn, fence, deps, cancelled
        self.attempts = attempts
        self.transition_id = transition_id
        self.log_extra = fence.log_extra(attempt=attempts)

    # -- endings ---------------------------------------------------------------------------

    def fail(
        self,
        code: str,
        detail: str | None,
        *,
        settlement: AttemptSettlement | None = None,
        reconcile: bool = False,
    ) -> "_Stop":
        status = execution_fail(
            conn=self.conn,
            fence=self.fence,
            error_code=code,
            error_detail=_short(detail),
            settlement=settlement,
            reconcile=reconcile,
            actor=WORKER_ACTOR,
            payload={"transitionId": self.transition_id},
        )
        event = (
            "reconciliation required"
            if status == ExecutionStatus.RECONCILIATION_REQUIRED
            else "execution failed"
        )
        logger.warning(
            event,
            extra={
                **self.log_extra,
                "status": status,
                "error_code": code,
                "action_id": settlement.action_id if settlement else None,
                "detail": _short(detail),
            },
        )
        return _Stop(RunOutcome(status=ExecutionStatus(status), error_code=code))

    def retry(self, settlement: AttemptSettlement, *, retry_after: float | None) -> "_Stop":
        delay = retry_delay_seconds(
            attempt=settlement.attempt,
            retry_after=retry_after,
            config=self.deps.config,
            rng=self.deps.rng,
        )
        due = execution_schedule_retry(
            conn=self.conn,
            fence=self.fence,
            settlement=settlement,
            delay_seconds=delay,
            actor=WORKER_ACTOR,
            payload={
                "transitionId": self.transition_id,
                "actionId": settlement.action_id,
                "attempt": settlement.attempt,
                "errorCode": settlement.error_code,
                "delaySeconds": round(delay, 3),
            },
        )
        logger.info(
            "retry scheduled",
            extra={
                **self.log_extra,
                "action_id": settlement.action_id,
                "action_attempt": settlement.attempt,
                "error_code": settlement.error_code,
                "delay_seconds": round(delay, 3),
            },
        )
        return _Stop(
            RunOutcome(
                status=ExecutionStatus.RETRY_WAIT,
                error_code=settlement.error_code,
                next_attempt_at=due,
            )
        )

    def check_not_cancelled(self, step: str) -> None:
        if self.cancelled.is_set():
            raise ExecutionInterrupted(self.fence.execution_id, step=step)

    # -- the run ---------------------------------------------------------------------------

    def run(self, *, flow_id: int, snapshot: Snapshot | None) -> RunOutcome:
        if snapshot is None:
            snapshot = execution_load(conn=self.conn, fence=self.fence)
        definition = self.deps.flows.get(conn=self.conn, flow_id=flow_id)
        transition = find_transition(definition, self.transition_id)
        try:
            if transition is None:
                raise self.fail(
                    errors.CONTRACT_MISMATCH,
                    f"transition {self.transition_id!r} is not in the pinned flow {flow_id}",
                )
            if snapshot.revision != snapshot.accepted_revision:
                raise self.fail(
                    errors.REQUEST_MODIFIED,
                    f"the request is at revision {snapshot.revision}, not the accepted "
                    f"revision {snapshot.accepted_revision}",
                )
            outputs: dict[str, dict[str, Any]] = {}
            for sequence, action in enumerate(transition.get("actions", [])):
                outputs[action["id"]] = self.action(sequence, action, snapshot, outputs)
            return self.finish(definition, transition, snapshot, outputs)
        except _Stop as stop:
            return stop.outcome

    def action(
        self,
        sequence: int,
        action: dict[str, Any],
        snapshot: Snapshot,
        outputs: dict[str, dict[str, Any]],
    ) -> dict[str, Any]:
        action_id = action["id"]
        capability, version = action["capability"], action["version"]
        action_input = map_input(action, build_context(snapshot.data, outputs))
        try:
            binding = self.deps.resolve(capability, version)
        except IntegrationUnavailable as exc:
            raise self.fail(
                errors.INTEGRATION_UNAVAILABLE, f"action {action_id!r}: {exc}"
            ) from None
        contract = binding.contract
        input_hash = sha256_hex(action_input)
        key = external_key(self.fence.execution_id, action_id)

        previous = snapshot.checkpoints.get(action_id)
        previous_attempt = 0
        if previous is not None:
            reused = self.recover(previous, binding, input_hash=input_hash, key=key)
            if reused is not None:
                return reused
            previous_attempt = previous.attempt

        problem = _schema_problem(contract.input_schema, action_input)
        if problem is not None:
            raise self.fail(errors.INPUT_INVALID, f"action {action_id!r} input {problem}")

        self.check_not_cancelled(f"start {action_id}")
        attempt = self.deps.writes.starts.submit(
            self.conn,
            StartItem(
                fence=self.fence,
                action_id=action_id,
                sequence=sequence,
                capability=capability,
                capability_version=version,
                effect=binding.effect,
                input_hash=input_hash,
                previous_attempt=previous_attempt,
            ),
        )
        if attempt is None:
            raise ExecutionSuperseded(
                self.fence.execution_id, step=f"start {action_id}", token=self.fence.token
            )
        extra = {**self.log_extra, "action_id": action_id, "action_attempt": attempt}
        logger.info("action started", extra={**extra, "capability": contract.key})
        ctx = ActionContext(
            input=action_input,
            request_id=str(self.fence.request_id),
            execution_id=str(self.fence.execution_id),
            action_id=action_id,
            owner=snapshot.owner,
            scope=snapshot.scope,
            external_key=key,
            attempt=attempt,
            cancelled=self.cancelled,
        )
        try:
            result = binding.adapter.call(ctx, binding)
        except Exception:
            # Whatever the adapter did before raising is unknown, so is its effect.
            logger.exception("adapter raised", extra=extra)
            result = ActionResult(
                outcome=Outcome.UNKNOWN,
                error_code=errors.UNCERTAIN_WRITE,
                error_detail=f"adapter {binding.adapter.name} raised unexpectedly",
            )
        return self.settle(action_id, attempt, binding, result, extra)

    def recover(
        self, previous: CheckpointRecord, binding: Binding, *, input_hash: str, key: str
    ) -> dict[str, Any] | None:
        """Apply the recovery rules to an existing checkpoint; return a reusable output."""
        action_id = previous.action_id
        expected = (input_hash, key, binding.effect)
        found = (previous.input_hash, previous.external_key, previous.effect)
        if expected != found:
            names = ("input hash", "external key", "effect")
            differ = [n for n, a, b in zip(names, expected, found, strict=True) if a != b]
            raise self.fail(
                errors.CONTRACT_MISMATCH,
                f"action {action_id!r}: the checkpoint's {', '.join(differ)} differ from what "
                "would be sent now",
                reconcile=True,
            )
        if previous.status == CheckpointStatus.SUCCEEDED:
            logger.info(
                "action reused",
                extra={
                    **self.log_extra,
                    "action_id": action_id,
                    "action_attempt": previous.attempt,
                },
            )
            return previous.output or {}
        uncertain = previous.status in (CheckpointStatus.RUNNING, CheckpointStatus.UNKNOWN)
        if uncertain and binding.effect == Effect.NON_IDEMPOTENT_WRITE:
            raise self.fail(
                errors.UNCERTAIN_WRITE,
                f"action {action_id!r} (NON_IDEMPOTENT_WRITE) was {previous.status} at attempt "
                f"{previous.attempt}; it is never repeated without an operator",
                reconcile=True,
            )
        replay = (
            previous.status == CheckpointStatus.FAILED
            and previous.error_code == errors.REPLAY_AUTHORIZED
        )
        if previous.attempt >= binding.contract.max_attempts and not replay:
            raise self.fail(
                errors.RETRIES_EXHAUSTED,
                f"action {action_id!r} was {previous.status} after {previous.attempt} of "
                f"{binding.contract.max_attempts} attempts",
            )
        return None

    def settle(
        self,
        action_id: str,
        attempt: int,
        binding: Binding,
        result: ActionResult,
        extra: dict[str, Any],
    ) -> dict[str, Any]:
        effect = binding.effect
        contract = binding.contract
        detail = _short(result.error_detail)
        if result.outcome == Outcome.SUCCEEDED:
            output = result.output if result.output is not None else {}
            problem = (
                "is not a JSON object"
                if not isinstance(output, dict)
                else _schema_problem(contract.output_schema, output)
            )
            if problem is None:
                saved = self.deps.writes.successes.submit(
                    self.conn, SucceedItem(self.fence, action_id, attempt, output, effect)
                )
                if saved is None:
                    raise ExecutionSuperseded(
                        self.fence.execution_id, step=f"save {action_id}", token=self.fence.token
                    )
                logger.info("action succeeded", extra=extra)
                return output
            # A read with a bad output had no effect; a write with one did happen, but its
            # result cannot be trusted: an operator decides.
            is_read = effect == Effect.READ_ONLY
            raise self.fail(
                errors.OUTPUT_INVALID,
                f"action {action_id!r} output {problem}",
                settlement=AttemptSettlement(
                    action_id=action_id,
                    attempt=attempt,
                    status=CheckpointStatus.FAILED if is_read else CheckpointStatus.UNKNOWN,
                    error_code=errors.OUTPUT_INVALID,
                    error_detail=_short(problem),
                    output=None if is_read or not isinstance(output, dict) else output,
                ),
                reconcile=not is_read,
            )
        if result.outcome == Outcome.PERMANENT:
            code = result.error_code or errors.PERMANENT_FAILURE
            raise self.fail(
                code if code in _ADAPTER_EXECUTION_CODES else errors.PERMANENT_FAILURE,
                f"action {action_id!r}: {code}: {detail or 'refused by the provider'}",
                settlement=AttemptSettlement(
                    action_id, attempt, CheckpointStatus.FAILED, code, detail
                ),
            )
        if result.outcome == Outcome.UNKNOWN and effect == Effect.NON_IDEMPOTENT_WRITE:
            raise self.fail(
                errors.UNCERTAIN_WRITE,
                f"action {action_id!r}: the outcome of a NON_IDEMPOTENT_WRITE is unknown"
                + (f" ({detail})" if detail else ""),
                settlement=AttemptSettlement(
                    action_id,
                    attempt,
                    CheckpointStatus.UNKNOWN,
                    result.error_code or errors.UNCERTAIN_WRITE,
                    detail,
                ),
                reconcile=True,
            )
        # TRANSIENT (no effect, or a safe one), or UNKNOWN of a READ_ONLY/IDEMPOTENT_WRITE.
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
        if self.cancelled.is_set():
            # Stopped mid-call (lease lost or shutdown): leave the RUNNING checkpoint for
            # recovery rather than spend an attempt on an interruption.
            raise ExecutionInterrupted(self.fence.execution_id, step=f"settle {action_id}")
        if attempt < contract.max_attempts:
            raise self.retry(settlement, retry_after=result.retry_after)
        raise self.fail(
            errors.RETRIES_EXHAUSTED,
            f"action {action_id!r} failed {attempt} of {contract.max_attempts} attempts: "
            f"{settlement.error_code}" + (f" ({detail})" if detail else ""),
            settlement=settlement,
        )

    def finish(
        self,
        definition: dict[str, Any],
        transition: dict[str, Any],
        snapshot: Snapshot,
        outputs: dict[str, dict[str, Any]],
    ) -> RunOutcome:
        context = build_context(snapshot.data, outputs)
        try:
            decision = decide(transition, context)
            data = apply_updates(transition, snapshot.data, context)
            if not _data_acceptable(definition, data):
                validate_data(definition, data)  # raises DataError with the precise problem
        except (DecisionError, UpdateError, DataError) as exc:
            raise self.fail(exc.code, exc.detail) from None
        self.check_not_cancelled("finalize")
        action_ids = [a["id"] for a in transition.get("actions", [])]
        revision = self.deps.writes.finals.submit(
            self.conn,
            FinalizeItem(
                fence=self.fence,
                from_state=snapshot.state,
                accepted_revision=snapshot.accepted_revision,
                request_version=snapshot.version,
                action_ids=action_ids,
                data=data,
                target_state=decision.target,
                result={"outcome": decision.outcome, "targetState": decision.target},
                payload={
                    "transitionId": self.transition_id,
                    "actionIds": action_ids,
                    "hitPolicy": decision.hit_policy,
                    "ruleIds": list(decision.rule_ids),
                },
            ),
        )
        if revision is None:
            refusal = finalize_refusal(conn=self.conn, fence=self.fence)
            if isinstance(refusal, FinalizeRefused):
                raise self.fail(errors.REQUEST_MODIFIED, str(refusal)) from None
            raise refusal
        logger.info(
            "execution completed",
            extra={
                **self.log_extra,
                "status": ExecutionStatus.SUCCEEDED,
                "target_state": decision.target,
                "outcome": decision.outcome,
            },
        )
        return RunOutcome(
            status=ExecutionStatus.SUCCEEDED,
            target_state=decision.target,
            outcome=decision.outcome,
        )


def execution_run(
    *,
    conn: psycopg.Connection,
    fence: Fence,
    flow_id: int,
    transition_id: str,
    attempts: int,
    deps: RunnerDeps,
    cancelled: threading.Event,
    snapshot: Snapshot | None = None,
) -> RunOutcome:
    """Run one claimed execution to its next resting state, as the holder `fence`.

    `snapshot` is what the claim read under this token, if the caller has it; otherwise it is
    loaded here with a fenced read. Raises ExecutionSuperseded when another holder owns it,
    ExecutionInterrupted when told to stop; both leave everything this holder committed in place.
    """
    return _Run(
        conn=conn,
        fence=fence,
        attempts=attempts,
        deps=deps,
        cancelled=cancelled,
        transition_id=transition_id,
    ).run(flow_id=flow_id, snapshot=snapshot)


__all__ = ["RunOutcome", "RunnerDeps", "execution_run"]
