"""Run one claimed execution, action by action, with the recovery rules of SPEC §3.

Invariants (each step names the module that keeps it):
- the holder loads the accepted snapshot and the pinned flow with a fenced read (claims.py); a
  request whose revision is no longer the accepted one stops the run before any adapter call
  (REQUEST_MODIFIED);
- per action: map the input from the accepted data and earlier outputs (recovered ones
  included), resolve the trusted binding (INTEGRATION_UNAVAILABLE before any call), validate the
  input, commit the RUNNING checkpoint, call the adapter with no transaction open, validate the
  output, commit SUCCEEDED (checkpoints.py); the next action starts only after that commit;
- every write (IDEMPOTENT_WRITE and NON_IDEMPOTENT_WRITE) is called only once its RUNNING
  checkpoint is committed, since it is the durable record that the write may have happened:
  recovery never repeats a non-idempotent one, and a cancellation or the poison cap sends either
  kind to reconciliation instead of releasing the request; its SUCCEEDED checkpoint is committed
  on its own right after the call, the last action's included;
- a READ_ONLY call has no effect to record, so its start is withheld (groupcommit
  `submit_withheld`) and the call begins at once, with the attempt the start would write
  (`StartItem.attempt`, known beforehand). A call that outlasts READ_START_DELAY_SECONDS gets its
  RUNNING checkpoint while it runs (sent by another thread), so a slow read shows as running and
  a crash during it counts against max_attempts like any read found RUNNING; the run waits for
  that start before it writes anything after the call, so a holder superseded meanwhile writes
  nothing more (`ExecutionSuperseded`). A quicker call's start is taken back: the read is
  recorded once, SUCCEEDED (`CallRecord`, one statement), or, when it is the last action, in the
  final commit itself; one that did not succeed has its start written after the call, to be
  settled from as any other attempt. A crash before that record commits leaves no checkpoint:
  the read runs again, bounded by the poison cap (WORKER_MAX_RECLAIMS), not max_attempts. A lost
  lease still stops a call through the stop signal;
- what a run does with an existing checkpoint, an adapter's result (one that raises is UNKNOWN)
  or a refused final commit is a pure decision of executions/worker/recovery.py (the SPEC §3
  table); this module applies it, and writes every ending through endings.py, after deciding;
- finalisation: the pure evaluator decides; updates apply to a copy of the accepted data, which
  must pass the flow's dataSchema and the size limit; then one fenced transaction
  (finalize.py), carrying the last read's checkpoint. A final commit that fails or is refused,
  or a run that ends otherwise after that read, has the read's SUCCEEDED checkpoint committed
  on its own first (`save_carried`), so recovery reuses it (SPEC §3); a final commit that fails
  leaves RUNNING and the checkpoints for recovery;
- a holder told to stop (lost lease, shutdown past the drain) writes nothing more
  (`ExecutionInterrupted`); a fenced write that matches nothing raises `ExecutionSuperseded`.

Transactions: none is open while an adapter runs; each write above is its own transaction. The
hot-path writes (start, save, record, finalise) of concurrent runs are grouped into shared
statements (executions/worker/groupcommit.py), each run fenced on its own.
"""

import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, NoReturn, TypeVar

import psycopg

from actions.base import ActionContext, ActionResult, Binding, Outcome
from actions.registry import IntegrationUnavailable
from orquestador import errors

from ..checkpoints import CallRecord, StartItem, SucceedItem, external_key
from ..claims import Dispatch, FlowCache, Snapshot, execution_load
from ..finalize import (
    FinalizeItem,
    finalize_refusal,
)
from ..flows.evaluator import (
    DecisionError,
    UpdateError,
    apply_updates,
    build_context,
    decide,
)
from ..flows.evaluator import resolve_input as map_input
from ..flows.publication import DataError, find_transition, validate_data
from ..flows.schemas import contract_problem
from ..leases import ExecutionInterrupted, ExecutionSuperseded
from ..models import CheckpointStatus, Effect, ExecutionStatus
from ..waits import (
    CALLBACK_EVENT,
    call_accept,
    is_wait,
    wait_checkpoint_expire,
    wait_deadline,
    wait_reach,
    wait_resuspend,
    wait_time_out_continue,
)
from . import recovery
from .config import WorkerConfig
from .endings import RunScope, run_end
from .groupcommit import Database, GroupWrites, Pending, borrowed
from .holdings import Holding
from .recovery import Decision, Verb
from .wire import RunOutcome
from .writeretry import fenced_write

logger = logging.getLogger("executions.worker")

# A run's deadline (stuck runs): the timeouts of the actions it still has to call, plus this
# many leases for its own writes (each may retry for half a lease) and the scheduling around them.
DEADLINE_MARGIN_LEASES = 2
# How long a read's RUNNING checkpoint is withheld while its call runs: a call that returns
# sooner is recorded once, SUCCEEDED (in the final commit when it is the last action); one that
# outlasts it gets its RUNNING checkpoint while it runs, so a slow read shows as running and a
# crash during it counts against max_attempts.
READ_START_DELAY_SECONDS = 0.5

Resolver = Callable[[str, int], Binding]
Value = TypeVar("Value")  # what one of a run's read-through attributes holds


@dataclass
class RunnerDeps:
    """What a run needs besides its connection and holder; shared by every run of a process."""

    config: WorkerConfig
    resolve: Resolver
    flows: FlowCache
    rng: random.Random
    writes: GroupWrites


class _Ended(Exception):
    """Internal: a decision ended the run (fail, retry, reconcile); `_Run.run` applies it."""

    def __init__(self, decision: Decision) -> None:
        self.decision = decision


def _stop_unless_proceeding(decision: Decision) -> Decision:
    if decision.ends_run:
        raise _Ended(decision)
    return decision


class _Suspended(Exception):
    """Internal: the run reached a wait and the execution is SUSPENDED (already written)."""

    def __init__(self, outcome: RunOutcome) -> None:
        self.outcome = outcome


class _Of(Generic[Value]):
    """An attribute of a run that is its dispatch's or its holding's, read when asked."""

    def __init__(self, read: Callable[["_Run"], Value]) -> None:
        self._read = read

    def __get__(self, run: "_Run", owner: type | None = None) -> Value:
        return self._read(run)


class _Run:
    """One run of one dispatch. Its coordinates are read from the dispatch (`fence`, `attempts`,
    `principal`, `log_extra`, `audit`) and its stop signal from the slot's holding, never copied."""

    def __init__(
        self, dispatch: Dispatch, *, holding: Holding, db: Database, deps: RunnerDeps
    ) -> None:
        self.holding = holding
        self.deps = deps
        self.scope = RunScope(dispatch, db, deps.config, deps.rng)
        # The output of the action that just succeeded, until its checkpoint is committed.
        self.carried: CallRecord | None = None

    # Read from the dispatch and the slot's holding when asked, never copied into the run.
    dispatch = _Of(lambda run: run.scope.dispatch)
    db = _Of(lambda run: run.scope.db)
    fence = _Of(lambda run: run.scope.dispatch.fence)
    attempts = _Of(lambda run: run.scope.dispatch.attempts)
    transition_id = _Of(lambda run: run.scope.dispatch.transition_id)
    principal = _Of(lambda run: run.scope.dispatch.principal_name)  # `sub@tenant`, or `system`
    log_extra = _Of(lambda run: run.scope.dispatch.log_extra)
    audit = _Of(lambda run: run.scope.dispatch.audit)  # what each audit event starts with
    cancelled = _Of(lambda run: run.holding.cancelled)
    report_deadline = _Of(lambda run: run.holding.set_deadline)

    # -- the run ---------------------------------------------------------------------------

    def run(self, *, flow_id: int, snapshot: Snapshot | None) -> RunOutcome:
        if snapshot is None:
            with borrowed(self.db) as conn:
                snapshot = execution_load(conn=conn, fence=self.fence)
        definition = self.deps.flows.cached(flow_id)
        if definition is None:  # the first run of this flow in this process
            with borrowed(self.db) as conn:
                definition = self.deps.flows.get(conn=conn, flow_id=flow_id)
        transition = find_transition(definition, self.transition_id)
        try:
            decision = recovery.before_run(
                transition_found=transition is not None,
                transition_id=self.transition_id,
                flow_id=flow_id,
                revision=snapshot.revision,
                accepted_revision=snapshot.accepted_revision,
            )
            if decision.ends_run or transition is None:
                raise _Ended(decision)
            if self.report_deadline is not None:
                self.report_deadline(self.deadline_seconds(transition, snapshot))
            outputs: dict[str, dict[str, Any]] = {}
            actions = transition.get("actions", [])
            for sequence, action in enumerate(actions):
                if is_wait(action):
                    outputs[action["id"]] = self.wait(sequence, action, snapshot)
                else:
                    last = sequence == len(actions) - 1
                    outputs[action["id"]] = self.action(sequence, action, snapshot, outputs, last)
            return self.finish(definition, transition, snapshot, outputs)
        except _Ended as ended:
            return run_end(ended.decision, self.scope)
        except _Suspended as suspended:
            return suspended.outcome

    def wait(self, sequence: int, action: dict[str, Any], snapshot: Snapshot) -> dict[str, Any]:
        """A wait action (executions/waits.py): its event's payload, or the run suspends."""
        action_id = action["id"]
        extra = {**self.log_extra, "action_id": action_id, "wait_event": action["wait"]["event"]}
        previous = snapshot.checkpoints.get(action_id)
        if previous is None:
            self.check_not_cancelled(f"reach {action_id}")
            with borrowed(self.db) as conn:
                reached = wait_reach(
                    conn=conn,
                    fence=self.fence,
                    action=action,
                    sequence=sequence,
                    payload=self.audit,
                    tenant=snapshot.scope,
                )
            if reached.output is not None:
                logger.info("wait met by a kept event", extra=extra)
                return reached.output
            return self.suspend(action, reached.deadline, extra)
        if previous.status == CheckpointStatus.SUCCEEDED:
            logger.info("wait reused", extra=extra)
            return previous.output or {}
        if previous.status == CheckpointStatus.WAITING:
            with borrowed(self.db) as conn:
                deadline, passed = wait_deadline(conn=conn, fence=self.fence, action=action)
                if not passed:  # reclaimed before its deadline: wait on
                    due = wait_resuspend(
                        conn=conn, fence=self.fence, action=action, deadline=deadline
                    )
                    return self.suspend(action, due, extra)
                if "onTimeout" in action["wait"]:
                    output = wait_time_out_continue(
                        conn=conn,
                        fence=self.fence,
                        action=action,
                        payload=self.audit,
                    )
                    logger.info("wait timed out; onTimeout payload used", extra=extra)
                    return output
                with conn.transaction():
                    wait_checkpoint_expire(conn=conn, fence=self.fence, action_id=action_id)
        # Timed out without onTimeout (now, or by an earlier holder that stopped after recording
        # it): the execution fails under the usual rule for a failure.
        raise _Ended(
            recovery.fail(
                errors.EVENT_TIMEOUT,
                f"wait {action_id!r} for event {action['wait']['event']!r} passed its deadline",
            )
        )

    def suspend(self, action: dict[str, Any], deadline: Any, extra: dict[str, Any]) -> NoReturn:
        logger.info("execution suspended", extra={**extra, "deadline": str(deadline)})
        raise _Suspended(
            RunOutcome(
                status=ExecutionStatus.SUSPENDED,
                next_attempt_at=deadline,
                waiting_on=action["id"],
                waiting_for=action["wait"]["event"],
            )
        )

    def deadline_seconds(self, transition: dict[str, Any], snapshot: Snapshot) -> float:
        """How long this run may hold its lease: the contract timeouts of the actions it has
        yet to call (a SUCCEEDED checkpoint is reused; a wait holds no lease while SUSPENDED)
        plus DEADLINE_MARGIN_LEASES leases."""
        total = DEADLINE_MARGIN_LEASES * self.deps.config.lease_seconds
        for action in transition.get("actions", []):
            checkpoint = snapshot.checkpoints.get(action["id"])
            if checkpoint is not None and checkpoint.status == "SUCCEEDED":
                continue
            if "capability" not in action:
                continue
            try:
                binding = self.deps.resolve(action["capability"], action["version"])
            except IntegrationUnavailable:
                continue  # it fails before any call
            total += binding.contract.timeout_seconds
        return total

    def action(
        self,
        sequence: int,
        action: dict[str, Any],
        snapshot: Snapshot,
        outputs: dict[str, dict[str, Any]],
        last: bool = False,
    ) -> dict[str, Any]:
        """Call one action (or reuse its checkpoint) and save its output; the output of a read
        that is the `last` action is carried to the final commit instead (`self.carried`)."""
        action_id = action["id"]
        capability, version = action["capability"], action["version"]
        action_input = map_input(action, build_context(snapshot.data, outputs))
        try:
            binding = self.deps.resolve(capability, version)
        except IntegrationUnavailable as exc:
            raise _Ended(
                recovery.fail(errors.INTEGRATION_UNAVAILABLE, f"action {action_id!r}: {exc}")
            ) from None
        contract = binding.contract
        input_hash = recovery.input_hash(action_input)
        key = external_key(self.fence.execution_id, action_id)
        decision = _stop_unless_proceeding(
            recovery.before_call(
                snapshot.checkpoints.get(action_id),
                action_id=action_id,
                input_hash=input_hash,
                external_key=key,
                effect=binding.effect,
                max_attempts=contract.max_attempts,
                input_problem=contract_problem(contract.input_schema, action_input),
            )
        )
        if decision.verb == Verb.REUSE:
            logger.info("action reused", extra={**self.log_extra, "action_id": action_id})
            return decision.output or {}

        self.check_not_cancelled(f"start {action_id}")
        start = StartItem(
            fence=self.fence,
            action_id=action_id,
            sequence=sequence,
            capability=capability,
            capability_version=version,
            effect=binding.effect,
            input_hash=input_hash,
            previous_attempt=decision.previous_attempt,
        )
        withheld: Pending[int] | None = None
        if binding.effect == Effect.READ_ONLY:
            starts = self.deps.writes.starts
            withheld = starts.submit_withheld(self.db, start, READ_START_DELAY_SECONDS)
            attempt = start.attempt
        else:
            attempt = self.started(start, first_try=None)
        extra = {**self.log_extra, "action_id": action_id, "action_attempt": attempt}
        logger.info("action started", extra={**extra, "capability": contract.key})
        called_at = time.monotonic()
        try:
            result = self.call(binding, action_input, action_id, attempt, key, snapshot, extra)
        except BaseException:
            # A run that ends by raising leaves no write of its own in flight behind it (only a
            # real crash can): its start is taken back, or lands or fails, before it goes on.
            if withheld is not None and not withheld.withdraw():
                withheld.wait(self.deps.config.lease_seconds)
            raise
        call_seconds = time.monotonic() - called_at
        started = withheld is None or not withheld.withdraw()
        if withheld is not None and started:  # a slow read: its start was sent during the call
            self.started(start, first_try=withheld)
        if result.outcome == Outcome.ACCEPTED and binding.route.is_async:
            if not started:  # the wait for the callback is kept on the RUNNING checkpoint
                self.started(start, first_try=None)
            # The provider will call back (executions/callbacks.py); until then, or until the
            # callback is overdue, the execution waits without a lease.
            with borrowed(self.db) as conn:
                deadline = call_accept(
                    conn=conn,
                    fence=self.fence,
                    action_id=action_id,
                    attempt=attempt,
                    timeout_seconds=contract.callback_timeout_seconds,
                    payload=self.audit,
                )
            logger.info("execution suspended", extra={**extra, "deadline": str(deadline)})
            raise _Suspended(
                RunOutcome(
                    status=ExecutionStatus.SUSPENDED,
                    next_attempt_at=deadline,
                    waiting_on=action_id,
                    waiting_for=CALLBACK_EVENT,
                )
            )
        output = result.output if result.output is not None else {}
        problem = None
        if result.outcome == Outcome.SUCCEEDED:
            problem = (
                "is not a JSON object"
                if not isinstance(output, dict)
                else contract_problem(contract.output_schema, output)
            )
        decision = recovery.after_call(
            result,
            action_id=action_id,
            attempt=attempt,
            effect=binding.effect,
            max_attempts=contract.max_attempts,
            output_problem=problem,
            cancelled=self.cancelled.is_set(),
        )
        if decision.verb == Verb.INTERRUPT:
            raise ExecutionInterrupted(self.fence.execution_id, step=f"settle {action_id}")
        if decision.ends_run and not started:
            # An attempt that did not succeed is settled from its RUNNING checkpoint (a retry, a
            # failure), as every other is: a quick read's is written now.
            self.started(start, first_try=None)
        _stop_unless_proceeding(decision)
        if binding.effect == Effect.READ_ONLY:
            self.carried = CallRecord(start, output, call_seconds)
            if not last:
                self.save_carried()
        else:
            self.save(SucceedItem(self.fence, action_id, attempt, output, binding.effect))
        logger.info("action succeeded", extra=extra)
        return output

    def save(self, success: SucceedItem) -> None:
        """Commit a write's SUCCEEDED checkpoint, from its RUNNING one, before anything else."""
        saved = self.write(
            "CHECKPOINT_SUCCEED", lambda: self.deps.writes.successes.submit(self.db, success)
        )
        if saved is None:
            raise ExecutionSuperseded(
                self.fence.execution_id, step=f"save {success.action_id}", token=self.fence.token
            )

    def save_carried(self) -> None:
        """Commit the SUCCEEDED checkpoint of the read that just succeeded, if it is not saved
        yet: at once for any action but the last, and for the last one whenever the run does not
        end in a final commit that carries it (executions/finalize.py `FinalizeItem.last`)."""
        carried, self.carried = self.carried, None
        if carried is not None:
            self.record(carried)

    def record(self, carried: CallRecord) -> None:
        """Commit a read's SUCCEEDED checkpoint on its own (CHECKPOINT_RECORD)."""
        saved = self.write(
            "CHECKPOINT_RECORD", lambda: self.deps.writes.records.submit(self.db, carried)
        )
        if saved is None:
            raise ExecutionSuperseded(
                self.fence.execution_id,
                step=f"save {carried.start.action_id}",
                token=self.fence.token,
            )

    def started(self, start: StartItem, *, first_try: Pending[int] | None) -> int:
        """The start's attempt, once its RUNNING checkpoint is committed; ExecutionSuperseded
        when it matched nothing. `first_try`: a withheld start already sent while the call ran,
        whose result counts as the first try of the fenced write (a database error is retried
        here like any other)."""
        tries = [first_try.result] if first_try is not None else []

        def write() -> int | None:
            return tries.pop()() if tries else self.deps.writes.starts.submit(self.db, start)

        attempt = self.write("CHECKPOINT_START", write)
        if attempt is None:
            raise ExecutionSuperseded(
                self.fence.execution_id, step=f"start {start.action_id}", token=self.fence.token
            )
        return attempt

    def call(
        self,
        binding: Binding,
        action_input: dict[str, Any],
        action_id: str,
        attempt: int,
        key: str,
        snapshot: Snapshot,
        extra: dict[str, Any],
    ) -> ActionResult:
        """Call the adapter, no transaction open; one that raises is an UNKNOWN outcome."""
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
            principal=self.principal,
        )
        try:
            return binding.adapter.call(ctx, binding)
        except Exception:
            # Whatever the adapter did before raising is unknown, so is its effect.
            logger.exception("adapter raised", extra=extra)
            return ActionResult(
                outcome=Outcome.UNKNOWN,
                error_code=errors.UNCERTAIN_WRITE,
                error_detail=f"adapter {binding.adapter.name} raised unexpectedly",
            )

    def write(self, statement: str, write: Callable[[], Any]) -> Any:
        """A fenced write: a database error is logged with `statement` and retried with backoff
        for up to half the lease (renewals hold it meanwhile), then raised, leaving the run for
        recovery by lease and the poison cap (executions/worker/writeretry.py)."""
        return fenced_write(
            statement,
            write,
            budget_seconds=self.deps.config.lease_seconds / 2,
            log_extra=self.log_extra,
            rng=self.deps.rng,
            stop=self.cancelled,
        )

    def check_not_cancelled(self, step: str) -> None:
        if self.cancelled.is_set():
            raise ExecutionInterrupted(self.fence.execution_id, step=step)

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
            validate_data(definition, data)
        except (DecisionError, UpdateError, DataError) as exc:
            self.save_carried()
            raise _Ended(recovery.fail(exc.code, exc.detail)) from None
        except BaseException:
            self.save_carried()
            raise
        if self.cancelled.is_set():
            self.save_carried()  # as it would have been before the stop was noticed
            self.check_not_cancelled("finalize")
        carried, self.carried = self.carried, None
        action_ids = [a["id"] for a in transition.get("actions", [])]
        item = FinalizeItem(
            fence=self.fence,
            from_state=snapshot.state,
            accepted_revision=snapshot.accepted_revision,
            request_version=snapshot.version,
            action_ids=action_ids,
            data=data,
            target_state=decision.target,
            result={"outcome": decision.outcome, "targetState": decision.target},
            payload={
                **self.audit,
                "actionIds": action_ids,
                "hitPolicy": decision.hit_policy,
                "ruleIds": list(decision.rule_ids),
            },
            last=carried,
        )
        try:
            final = self.write(
                "EXECUTION_FINALIZE", lambda: self.deps.writes.finals.submit(self.db, item)
            )
        except psycopg.Error:
            # The final commit failed (its retries used): the output is saved on its own, so
            # recovery by lease reuses it rather than calling the action again (SPEC §3).
            if carried is not None:
                self.record(carried)
            raise
        if final is None:
            with borrowed(self.db) as conn:
                refused = finalize_refusal(conn=conn, item=item)  # raises if superseded
            unsettled = refused.unsettled
            if carried is not None:
                action_id = carried.start.action_id
                if any(entry.split(" ", 1)[0] == action_id for entry in unsettled):
                    # The request moved, so the final commit wrote nothing: the output is saved
                    # on its own, as it would have been before the final commit was tried.
                    self.record(carried)
                    unsettled = [e for e in unsettled if e.split(" ", 1)[0] != action_id]
            raise _Ended(
                recovery.finalize_refused(
                    request_unchanged=refused.request_unchanged, unsettled=unsettled
                )
            )
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
    dispatch: Dispatch, *, holding: Holding, db: Database, deps: RunnerDeps
) -> RunOutcome:
    """Run one claimed execution to its next resting state, as the holder of `dispatch`.

    `holding` is the slot's hold on it: its stop signal, and where the run reports, once, before
    the first action, how many seconds it may take (`_Run.deadline_seconds`; the dispatcher stops
    renewing a run past it). `db` is a connection, or where to borrow one for each step (the
    runtime's few shared ones): a run holds no connection between its writes, so none while an
    adapter runs. The dispatch's snapshot is what the claim read under this token; without one
    it is loaded here with a fenced read. Raises ExecutionSuperseded when another holder owns
    it, ExecutionInterrupted when told to stop; both leave everything this holder committed in
    place.
    """
    run = _Run(dispatch, holding=holding, db=db, deps=deps)
    return run.run(flow_id=dispatch.flow_id, snapshot=dispatch.snapshot)


__all__ = ["RunnerDeps", "execution_run"]
