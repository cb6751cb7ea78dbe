"""One adapter call of a run: the attempt (`Call`), what the adapter is given, and how its answer
is read.

No transaction is open here and nothing is written: the runner has committed the attempt's
RUNNING checkpoint before it calls, and commits what the recovery table decides after.
"""

import asyncio
import inspect
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from actions.base import ActionContext, ActionResult, Binding, Contract, Outcome
from actions.registry import IntegrationUnavailable
from orquestador import errors
from orquestador.schemas import contract_problem

from ..models import CheckpointStatus
from ..queue.checkpoints import StartItem
from ..queue.claims import Dispatch, Snapshot
from .callmetrics import CALLS
from .recovery import input_hash

logger = logging.getLogger("executions.worker")

Resolver = Callable[[str, int], Binding]  # capability, version -> the trusted binding


@dataclass(frozen=True)
class Call:
    """One attempt of one action, prepared by its run; its attempt number once its RUNNING
    checkpoint is committed (the run's `start`)."""

    start: StartItem
    binding: Binding
    action_input: dict[str, Any]
    dispatch: Dispatch
    attempt: int = 0

    @cached_property
    def extra(self) -> dict[str, Any]:
        """Its log fields, built when first wanted: below INFO a call that goes well wants none."""
        return {
            **self.dispatch.log_extra,
            "action_id": self.start.action_id,
            "action_attempt": self.attempt,
        }


async def adapter_call(
    binding: Binding, ctx: ActionContext, log_extra: Callable[[], dict[str, Any]]
) -> ActionResult:
    """Call the adapter on the loop; one that raises is an UNKNOWN outcome (logged with the
    fields `log_extra()` builds, only then). Each call is counted by capability and outcome,
    and timed (executions/worker/callmetrics.py)."""
    started = time.perf_counter()
    try:
        result = await _call(binding, ctx)(ctx, binding)
    except Exception:
        # Whatever the adapter did before raising is unknown, so is its effect.
        logger.exception("adapter raised", extra=log_extra())
        result = ActionResult(
            outcome=Outcome.UNKNOWN,
            error_code=errors.UNCERTAIN_WRITE,
            error_detail=f"adapter {binding.adapter.name} raised unexpectedly",
        )
    outcome = result.outcome  # an Outcome, or its text from an adapter written loosely
    CALLS.call_done(
        capability=binding.contract.key,
        outcome=outcome.value if type(outcome) is Outcome else Outcome(outcome).value,
        seconds=time.perf_counter() - started,
    )
    return result


def _call(binding: Binding, ctx: ActionContext) -> Callable[..., Awaitable[ActionResult]]:
    # The shipped adapters' calls are coroutines and run on the loop, awaited directly (no frame
    # of ours in between on each wake-up). A trusted adapter written synchronously (the tests'
    # scripted and blocking ones) runs in a thread, never on the loop.
    adapter: Any = binding.adapter
    if _is_coroutine_function(adapter.call):
        return adapter.call
    return _in_thread


async def _in_thread(ctx: ActionContext, binding: Binding) -> ActionResult:
    adapter: Any = binding.adapter
    result = await asyncio.to_thread(adapter.call, ctx, binding)
    if inspect.isawaitable(result):
        result = await result
    return result


def _is_coroutine_function(call: Any) -> bool:
    # inspect's answer, kept per function: asking costs a few Python calls on every action.
    function = getattr(call, "__func__", call)
    known = _coroutine_functions.get(function)
    if known is None:
        known = _coroutine_functions[function] = inspect.iscoroutinefunction(call)
    return known


_coroutine_functions: dict[Any, bool] = {}  # adapter methods are few: classes, never per call


def input_checks(schema: dict[str, Any], action_input: dict[str, Any]) -> tuple[str, str | None]:
    """An action input's hash (recorded on its checkpoint) and why it breaks its contract's
    input schema (None: it keeps it): the two CPU-bound steps before a call."""
    return input_hash(action_input), contract_problem(schema, action_input)


def output_problem(contract: Contract, result: ActionResult) -> str | None:
    """Why a SUCCEEDED result's output breaks the contract's output schema; None when it keeps
    it, or when the call did not succeed."""
    if result.outcome != Outcome.SUCCEEDED:
        return None
    output = result.output if result.output is not None else {}
    if not isinstance(output, dict):
        return "is not a JSON object"
    return contract_problem(contract.output_schema, output)


def calls_seconds(transition: dict[str, Any], snapshot: Snapshot, resolve: Resolver) -> float:
    """The contract timeouts of the calls a run has yet to make: a SUCCEEDED checkpoint is
    reused, a wait holds no lease while SUSPENDED, an unavailable binding fails before any call."""
    total = 0.0
    for action in transition.get("actions", []):
        checkpoint = snapshot.checkpoints.get(action["id"])
        if checkpoint is not None and checkpoint.status == CheckpointStatus.SUCCEEDED:
            continue
        if "capability" not in action:
            continue
        try:
            binding = resolve(action["capability"], action["version"])
        except IntegrationUnavailable:
            continue
        total += binding.contract.timeout_seconds
    return total
