"""A run's spans (docs/operations.md#traces, docs/adr/0018-traces-across-the-queue.md): the run,
each action, each attempt, each write.

`execution run` continues the trace context stored at acceptance (`Dispatch.trace_context`), on
any worker, after any crash or wait; inside it `action <id>` for each action (a wait too),
`attempt <capability@version>` for each adapter call, and `write <STATEMENT>` for each fenced
write of the hot path. With tracing off each helper hands back what it is given, after one test:
no coroutine of its own, so none to pass through each time the run wakes up.
"""

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from actions.base import ActionResult, Binding, Outcome
from orquestador import tracing

from ..models import ExecutionStatus
from ..queue.claims import Dispatch
from .stops import RunEnded, RunSuspended
from .wire import RunOutcome

Result = TypeVar("Result")

# What ends a run, or a step of it, on purpose: not an error of the span it leaves.
_DECIDED = (RunEnded, RunSuspended)
_SETTLED = (Outcome.SUCCEEDED, Outcome.ACCEPTED)
# A run that left its execution here failed, as a span: a retry or a wait did not.
_ENDED_BADLY = (ExecutionStatus.FAILED, ExecutionStatus.RECONCILIATION_REQUIRED)


def traced_run(dispatch: Dispatch, run: Awaitable[RunOutcome]) -> Awaitable[RunOutcome]:
    """`run`, the dispatch's run, awaited inside its `execution run` span."""
    return _traced_run(dispatch, run) if tracing.active() else run


async def _traced_run(dispatch: Dispatch, run: Awaitable[RunOutcome]) -> RunOutcome:
    fence = dispatch.fence
    attributes = {
        "orquestador.execution.id": fence.execution_text,
        "orquestador.request.id": fence.request_text,
        "orquestador.transition.id": dispatch.transition_id,
        "orquestador.execution.attempt": dispatch.attempts,
        "orquestador.fencing_token": fence.token,
        "orquestador.taken_over": dispatch.taken_over,
    }
    with tracing.continued(dispatch.trace_context, "execution run", attributes=attributes) as span:
        outcome = await run
        if span is not None:
            span.set_attribute("orquestador.execution.status", str(outcome.status))
            if outcome.error_code:
                span.set_attribute("orquestador.error_code", outcome.error_code)
            if outcome.status in _ENDED_BADLY:
                from opentelemetry.trace import Status, StatusCode

                span.set_status(Status(StatusCode.ERROR, outcome.error_code or outcome.status))
        return outcome


def traced_action(action: dict[str, Any], step: Awaitable[Result]) -> Awaitable[Result]:
    """`step`, one action of the run (a wait included), awaited inside its `action <id>` span."""
    return _traced_action(action, step) if tracing.active() else step


async def _traced_action(action: dict[str, Any], step: Awaitable[Result]) -> Result:
    attributes = {
        "orquestador.action.id": action["id"],
        "orquestador.action.kind": "wait" if "wait" in action else "call",
    }
    if "capability" in action:
        attributes["orquestador.capability"] = f"{action['capability']}@{action['version']}"
    with tracing.span(f"action {action['id']}", attributes=attributes, errors=False) as span:
        try:
            return await step
        except _DECIDED as stopped:  # a decision, not an error of this span
            if span is not None:
                span.set_attribute("orquestador.run.stopped", type(stopped).__name__)
            raise
        except BaseException as exc:
            if span is not None:
                from opentelemetry.trace import Status, StatusCode

                span.record_exception(exc)
                span.set_status(Status(StatusCode.ERROR, type(exc).__name__))
            raise


def traced_call(
    binding: Binding, attempt: int, call: Awaitable[ActionResult]
) -> Awaitable[ActionResult]:
    """`call`, one adapter call, awaited inside its `attempt <capability@version>` span; the
    span records the outcome and, for one that did not settle, its error code as the status."""
    return _traced_call(binding, attempt, call) if tracing.active() else call


async def _traced_call(
    binding: Binding, attempt: int, call: Awaitable[ActionResult]
) -> ActionResult:
    key = binding.contract.key
    attributes = {"orquestador.capability": key, "orquestador.action.attempt": attempt}
    with tracing.span(f"attempt {key}", attributes=attributes) as span:
        result = await call
        if span is not None:
            from opentelemetry.trace import Status, StatusCode

            outcome = Outcome(result.outcome)
            span.set_attribute("orquestador.outcome", outcome.value)
            if result.error_code:
                span.set_attribute("orquestador.error_code", result.error_code)
            if outcome not in _SETTLED:
                span.set_status(Status(StatusCode.ERROR, result.error_code or outcome.value))
        return result


def traced_writes(
    statement: str, write: Callable[[], Awaitable[Result]]
) -> Callable[[], Awaitable[Result]]:
    """`write`, one fenced write of the run, each try of it in a `write <statement>` span; the
    very same function when tracing is off."""
    if not tracing.active():
        return write

    async def traced() -> Result:
        with tracing.span(f"write {statement}"):
            return await write()

    return traced
