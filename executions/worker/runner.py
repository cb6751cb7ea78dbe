"""Run one claimed execution, action by action (docs/worker-protocol.md).

Invariants: the accepted snapshot and pinned flow come from a fenced read, and a request no longer
at its accepted revision stops the run before any call (REQUEST_MODIFIED); every action, reads
included, commits its RUNNING checkpoint before its adapter is called and SUCCEEDED before the
next; what to do with a checkpoint, a result or a refused final commit is recovery.py's decision,
written through endings.py; a holder told to stop writes nothing more. No transaction is open
while an adapter runs; each write is its own, fenced, the hot-path ones grouped (groupcommit.py).
Limits, compensation, spans and the outage ride hook in from modules of their own.
"""

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from actions.base import ActionContext, ActionResult, Outcome
from actions.registry import IntegrationUnavailable
from orquestador import errors, jsonlog

from ..flows.cache import cached_definition, store_definition
from ..flows.evaluator import build_context
from ..flows.evaluator import resolve_input as map_input
from ..flows.publication import find_transition
from ..models import ExecutionStatus
from ..queue.checkpoints import StartItem, SucceedItem, external_key
from ..queue.claims import Dispatch, Snapshot, execution_load, flow_definition_load
from ..queue.finalize import finalize_refusal
from ..queue.leases import ExecutionInterrupted, ExecutionSuperseded, Fence, lease_held
from ..queue.waits import CALLBACK_EVENT, call_accept, is_wait
from . import limiter, recovery
from .calls import Call, adapter_call, calls_seconds, input_checks, output_problem
from .compensating import compensate_failure, compensate_resumed
from .endings import run_end
from .evaluation import final_item
from .groupcommit import Database, on
from .offload import off_loop_if_large
from .recovery import Decision, Verb
from .runs import RunnerDeps
from .slots import Holding
from .spans import traced_action, traced_call, traced_run, traced_writes
from .stops import RunEnded, RunSuspended, run_suspended, stop_unless_proceeding
from .waiting import wait_step
from .wire import RunOutcome
from .writeretry import Ride, fenced_write

logger = logging.getLogger("executions.worker")

# A run's deadline (stuck runs): the timeouts of the actions it still has to call, plus this
# many leases for its own writes (each may retry for half a lease) and the scheduling around them.
DEADLINE_MARGIN_LEASES = 2


class _Run:
    """One run of one dispatch: the claim's `dispatch` (the holder, the transition, the
    principal, the log and audit fields) and the slot's `holding` (its stop signal, its
    deadline report), each read from where it lives, never copied into the run. The helpers it
    calls see it as a `runs.Run`."""

    def __init__(
        self, dispatch: Dispatch, *, holding: Holding, db: Database, deps: RunnerDeps
    ) -> None:
        self.dispatch = dispatch
        self.holding = holding
        self.db = db  # a connection, or where to borrow one for each step
        self.deps = deps
        # How its writes ride through a database outage: until its stop signal is set.
        self.ride = Ride(holding.cancelled, deps.reachable) if deps.reachable is not None else None
        # A route's place granted with the claim, until its call uses it (limiter.handed).
        self.handed = dispatch.place

    # Its dispatch's, as the run and the helpers that call back into it read them (limiter.py,
    # compensation.py).
    @property
    def fence(self) -> Fence:
        return self.dispatch.fence

    @property
    def log_extra(self) -> dict[str, Any]:
        return self.dispatch.log_extra

    @property
    def audit(self) -> dict[str, Any]:
        """What each audit event of the run starts with."""
        return self.dispatch.audit

    # -- the run ---------------------------------------------------------------------------

    async def run(self, *, flow_id: int, snapshot: Snapshot | None) -> RunOutcome:
        if snapshot is None:
            snapshot = await on(self.db, execution_load(fence=self.fence))
        definition = cached_definition(flow_id)
        if definition is None:  # the first run of this flow in this process
            loaded = await on(self.db, flow_definition_load(flow_id=flow_id))
            definition = store_definition(flow_id, loaded)
        transition_id = self.dispatch.transition_id
        transition = find_transition(definition, transition_id)
        try:
            decision = recovery.before_run(
                transition_found=transition is not None,
                transition_id=transition_id,
                flow_id=flow_id,
                revision=snapshot.revision,
                accepted_revision=snapshot.accepted_revision,
            )
            if decision.ends_run or transition is None:
                raise RunEnded(decision)
            self.holding.set_deadline(self.deadline_seconds(transition, snapshot))
            if snapshot.compensation_cause is not None:  # its compensation began: go on with it
                return await compensate_resumed(self, transition, snapshot)
            outputs: dict[str, dict[str, Any]] = {}
            actions = transition.get("actions", [])
            for sequence, action in enumerate(actions):
                if is_wait(action):
                    step = self.wait(sequence, action, snapshot)
                else:
                    last = sequence == len(actions) - 1
                    step = self.action(sequence, action, snapshot, outputs, last=last)
                outputs[action["id"]] = await traced_action(action, step)
            return await self.finish(definition, transition, snapshot, outputs)
        except RunEnded as ended:
            # Its slot was released after its last call: the run goes on (its ending, perhaps
            # compensation's calls), so the slot is counted busy again until it ends.
            self.holding.retake_slot()
            compensated = await compensate_failure(self, ended.decision, transition, snapshot)
            return compensated or await run_end(ended.decision, self)
        except RunSuspended as suspended:
            return suspended.outcome

    def deadline_seconds(self, transition: dict[str, Any], snapshot: Snapshot) -> float:
        """Seconds this run may hold its lease: its calls' timeouts, plus a margin of leases."""
        margin = DEADLINE_MARGIN_LEASES * self.deps.config.lease_seconds
        return margin + calls_seconds(transition, snapshot, self.deps.resolve)

    async def wait(
        self, sequence: int, action: dict[str, Any], snapshot: Snapshot
    ) -> dict[str, Any]:
        """A wait action's output, or the run stops (executions/worker/waiting.py)."""
        return await wait_step(
            db=self.db,
            fence=self.fence,
            sequence=sequence,
            action=action,
            snapshot=snapshot,
            audit=self.audit,
            cancelled=self.holding.cancelled,
            log_extra=self.log_extra,
        )

    # -- actions: prepare, start, call, settle ----------------------------------------------

    async def action(
        self,
        sequence: int,
        action: dict[str, Any],
        snapshot: Snapshot,
        outputs: dict[str, dict[str, Any]],
        *,
        last: bool = False,
    ) -> dict[str, Any]:
        """Call one action (or reuse its checkpoint) and commit its output; `last`: the run's
        last action, after which only writes are left."""
        prepared = await self.prepare(sequence, action, snapshot, outputs)
        if isinstance(prepared, dict):  # reused from its SUCCEEDED checkpoint
            return prepared
        # A limited route's call takes its place first (executions/worker/limiter.py).
        attempt, result = await limiter.limited_call(self, prepared, snapshot)
        return await self.settle(attempt, result, last=last)

    async def prepare(
        self,
        sequence: int,
        action: dict[str, Any],
        snapshot: Snapshot,
        outputs: dict[str, dict[str, Any]],
    ) -> Call | dict[str, Any]:
        """Map the input, resolve the trusted binding and apply the recovery table to the
        checkpoint found: the call to make, or the output reused; anything else ends the run."""
        action_id, fence = action["id"], self.dispatch.fence
        action_input = map_input(action, build_context(snapshot.data, outputs))
        try:
            binding = self.deps.resolve(action["capability"], action["version"])
        except IntegrationUnavailable as exc:
            raise RunEnded(
                recovery.fail(errors.INTEGRATION_UNAVAILABLE, f"action {action_id!r}: {exc}")
            ) from None
        contract = binding.contract
        input_hash, input_problem = await off_loop_if_large(
            action_input, input_checks, contract.input_schema, action_input
        )
        decision = stop_unless_proceeding(
            recovery.before_call(
                snapshot.checkpoints.get(action_id),
                action_id=action_id,
                input_hash=input_hash,
                external_key=external_key(fence.execution_text, action_id),
                effect=binding.effect,
                max_attempts=contract.max_attempts,
                input_problem=input_problem,
            )
        )
        if decision.verb == Verb.REUSE:
            logger.info("action reused", extra={**self.log_extra, "action_id": action_id})
            return decision.output or {}
        start = StartItem(
            fence=fence,
            action_id=action_id,
            sequence=sequence,
            capability=action["capability"],
            capability_version=action["version"],
            effect=binding.effect,
            input_hash=input_hash,
            previous_attempt=decision.previous_attempt,
        )
        return Call(start, binding, action_input, self.dispatch)

    async def start(self, call: Call) -> Call:
        """Commit the attempt's RUNNING checkpoint, reads included, before the adapter runs."""
        action_id = call.start.action_id
        self.check_not_cancelled(f"start {action_id}")
        attempt = await self.write(
            "CHECKPOINT_START",
            lambda: self.deps.writes.lane(self.holding.urgent).starts.submit(self.db, call.start),
            step=f"start {action_id}",
        )
        # Built directly: dataclasses.replace walks the fields in Python on every call.
        started = Call(call.start, call.binding, call.action_input, call.dispatch, attempt)
        if logger.isEnabledFor(logging.INFO):  # no log fields built per call for a level off
            capability = call.binding.contract.key
            jsonlog.info(logger, "action started", {**started.extra, "capability": capability})
        return started

    def call(self, call: Call, snapshot: Snapshot) -> Awaitable[ActionResult]:
        """The adapter's call, to await, no transaction open (executions/worker/calls.py); not a
        coroutine of its own, one frame less on each wake-up of the call."""
        if self.holding.lapsed():  # no renewal confirmed for a lease: is the lease still held?
            return self._call_if_held(call, snapshot)
        return self.call_held(call, snapshot)

    def call_held(self, call: Call, snapshot: Snapshot) -> Awaitable[ActionResult]:
        """The adapter's call, the lease taken as held."""
        action_id, fence = call.start.action_id, self.dispatch.fence
        ctx = ActionContext(
            input=call.action_input,
            request_id=fence.request_text,
            execution_id=fence.execution_text,
            action_id=action_id,
            owner=snapshot.owner,
            scope=snapshot.scope,
            external_key=external_key(fence.execution_text, action_id),
            attempt=call.attempt,
            cancelled=self.holding.cancelled,
            principal=self.dispatch.principal_name,
        )
        called = adapter_call(call.binding, ctx, lambda: call.extra)
        return traced_call(call.binding, call.attempt, called)

    async def _call_if_held(self, call: Call, snapshot: Snapshot) -> ActionResult:
        """The call, sent only if the database says the lease is still this holder's: one woken
        from a pause past its lease (docs/adr/0002) sends nothing the next holder must answer for;
        one whose renewals were only slow to answer sends it, one read later."""
        fence = self.dispatch.fence
        if not await on(self.db, lease_held(fence=fence)):
            raise ExecutionInterrupted(fence.execution_id, step=f"call {call.start.action_id}")
        return await self.call_held(call, snapshot)

    async def settle(
        self, call: Call, result: ActionResult, *, last: bool = False
    ) -> dict[str, Any]:
        """Apply the call's result: suspend on an asynchronous ACCEPTED, end the run as the
        recovery table says, or commit SUCCEEDED and return the output. After the run's `last`
        call only writes are left: its slot takes the next execution from the save on."""
        action_id, binding = call.start.action_id, call.binding
        contract = binding.contract
        if result.outcome == Outcome.ACCEPTED and binding.route.is_async:
            # The provider will call back (executions/api/callbacks.py); until then, or until the
            # callback is overdue, the execution waits without a lease.
            deadline = await on(
                self.db,
                call_accept(
                    fence=self.fence,
                    action_id=action_id,
                    attempt=call.attempt,
                    timeout_seconds=contract.callback_timeout_seconds,
                    payload=self.audit,
                ),
            )
            run_suspended(action_id, CALLBACK_EVENT, deadline, call.extra)
        decision = recovery.after_call(
            result,
            action_id=action_id,
            attempt=call.attempt,
            effect=binding.effect,
            max_attempts=contract.max_attempts,
            output_problem=await off_loop_if_large(result.output, output_problem, contract, result),
            cancelled=self.holding.cancelled.is_set(),
        )
        if decision.verb == Verb.INTERRUPT:
            raise ExecutionInterrupted(self.fence.execution_id, step=f"settle {action_id}")
        stop_unless_proceeding(decision)
        output = decision.output or {}
        success = SucceedItem(self.fence, action_id, call.attempt, output, binding.effect)
        if last:
            # Nothing but this save, the evaluation and the final commit is left: the slot takes
            # its next execution meanwhile; the run still holds the lease (renewed) and its fence.
            self.holding.release_slot()
        await self.write(
            "CHECKPOINT_SUCCEED",
            lambda: self.deps.writes.lane(self.holding.urgent).successes.submit(self.db, success),
            step=f"save {action_id}",
        )
        if logger.isEnabledFor(logging.INFO):
            jsonlog.info(logger, "action succeeded", call.extra)
        return output

    async def write(
        self, statement: str, write: Callable[[], Awaitable[Any]], step: str | None = None
    ) -> Any:
        """A fenced write: a database error is logged with `statement` and retried with backoff
        for up to half the lease, a lost connection waits for the database with the lease kept
        (executions/worker/writeretry.py), then raised, leaving the run for recovery by lease.
        With `step`, a write that matched nothing raises ExecutionSuperseded naming it."""
        written = await fenced_write(
            statement,
            traced_writes(statement, write),
            budget_seconds=self.deps.config.lease_seconds / 2,
            log_extra=self.log_extra,
            rng=self.deps.rng,
            stop=self.holding.cancelled,
            ride=self.ride,
        )
        if written is None and step is not None:
            raise ExecutionSuperseded(self.fence.execution_id, step=step, token=self.fence.token)
        return written

    def check_not_cancelled(self, step: str) -> None:
        if self.holding.cancelled.is_set():
            raise ExecutionInterrupted(self.fence.execution_id, step=step)

    async def finish(
        self,
        definition: dict[str, Any],
        transition: dict[str, Any],
        snapshot: Snapshot,
        outputs: dict[str, dict[str, Any]],
    ) -> RunOutcome:
        """Evaluate (executions/worker/evaluation.py), then commit the request's new state with
        the execution's success in one fenced transaction."""
        item = await off_loop_if_large(
            snapshot.data,
            final_item,
            fence=self.fence,
            definition=definition,
            transition=transition,
            snapshot=snapshot,
            outputs=outputs,
            audit=self.audit,
        )
        if isinstance(item, Decision):
            raise RunEnded(item)
        self.check_not_cancelled("finalize")
        # Nothing but the final commit is left (a run whose last action was a call released its
        # slot at that call's save already): the slot takes its next execution while it
        # flushes; the run still holds the lease (renewed) and its fence until it lands.
        self.holding.release_slot()
        # A final commit that fails (its retries used) raises: RUNNING and the checkpoints stay
        # for recovery by lease, which reuses every SUCCEEDED one.
        final = await self.write(
            "EXECUTION_FINALIZE",
            lambda: self.deps.writes.lane(self.holding.urgent).finals.submit(self.db, item),
        )
        if final is None:
            self.holding.retake_slot()  # the run goes on (its refusal, perhaps compensation)
            refused = await on(self.db, finalize_refusal(item=item))  # raises if superseded
            raise RunEnded(
                recovery.finalize_refused(
                    request_unchanged=refused.request_unchanged, unsettled=refused.unsettled
                )
            )
        outcome = RunOutcome(
            status=ExecutionStatus.SUCCEEDED,
            target_state=item.target_state,
            outcome=item.result["outcome"],
        )
        if logger.isEnabledFor(logging.INFO):
            jsonlog.info(
                logger,
                "execution completed",
                {
                    **self.log_extra,
                    "status": outcome.status,
                    "target_state": outcome.target_state,
                    "outcome": outcome.outcome,
                },
            )
        return outcome


def execution_run(
    dispatch: Dispatch, *, holding: Holding, db: Database, deps: RunnerDeps
) -> Awaitable[RunOutcome]:
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
    run = _Run(dispatch, holding=holding, db=db, deps=deps).run
    # Handed back, not awaited here: one frame less between the loop and the run.
    return traced_run(dispatch, run(flow_id=dispatch.flow_id, snapshot=dispatch.snapshot))


__all__ = ["execution_run"]
