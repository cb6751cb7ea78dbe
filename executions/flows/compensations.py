"""Declared compensations (docs/flow-format.md#compensation): what undoes a transition's writes.

Three layers, all pure: the shape, checked with the rest of the definition (`CompensationChecks`,
used by checks.py); the catalog checks, which need the trusted contracts and run where the
catalog is loaded (`catalog_problems`); and the run-time plan from an execution's checkpoints
(`compensation_steps`), which says in words why a transition falls back to reconciliation when
it cannot compensate. A step is checkpointed as `<actionId>:compensate` (an action id never
holds a ':'), its sequence after every forward action, in reverse order of what it undoes.
"""

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from actions.base import Binding
from actions.lookup import binding_has_lookup
from actions.registry import IntegrationUnavailable

from ..models import CheckpointStatus, Effect
from .problems import FlowProblem, ProblemList

COMPENSATE = "compensate"  # the value of onFailure that opts in, and the action key
RECONCILE = "reconcile"  # the default onFailure: the usual rule for failures after writes
ON_FAILURE = (COMPENSATE, RECONCILE)
COMPENSATE_KEYS = ("capability", "version", "input")
STEP_SUFFIX = ":compensate"  # a compensation step's checkpoint id: "<actionId>:compensate"
WRITES = (Effect.IDEMPOTENT_WRITE, Effect.NON_IDEMPOTENT_WRITE)
UNCERTAIN = (CheckpointStatus.RUNNING, CheckpointStatus.UNKNOWN, CheckpointStatus.ACCEPTED)

Resolve = Callable[[str, int], Binding]  # capability, version -> the trusted binding


def step_id(action_id: str) -> str:
    """The checkpoint id of the step that compensates `action_id`."""
    return action_id + STEP_SUFFIX


def compensated_action(checkpoint_id: str) -> str | None:
    """The action a compensation step undoes (`compensates` in the actions view), else None."""
    if checkpoint_id.endswith(STEP_SUFFIX):
        return checkpoint_id[: -len(STEP_SUFFIX)]
    return None


def opts_in(transition: Mapping[str, Any]) -> bool:
    return transition.get("onFailure") == COMPENSATE


def declares_compensations(transition: Mapping[str, Any]) -> bool:
    return any(COMPENSATE in action for action in transition.get("actions", []))


# -- the shape --------------------------------------------------------------------------------


class CompensationChecks(ProblemList):
    """The shape of `compensate` and `onFailure`; mixed into the definition walk (checks.py),
    which provides `input` (the value checks of an action's input)."""

    def on_failure(self, value: Any, path: str) -> None:
        if value not in ON_FAILURE:
            self.problem(path, f"must be one of {', '.join(repr(v) for v in ON_FAILURE)}")

    def compensate(self, compensate: Any, path: str, readable: set[str] | None) -> None:
        """`readable`: the actions the compensation's input may read (the earlier ones and the
        action it undoes), None when they are unknowable."""
        if not self.object(compensate, path, COMPENSATE_KEYS):
            return
        if "capability" in compensate:
            self.name(compensate["capability"], f"{path}.capability")
        if "version" in compensate:
            self.version(compensate["version"], f"{path}.version")
        if "input" in compensate:
            scope = "earlier actions of this transition or the action it compensates"
            self.input(compensate["input"], f"{path}.input", readable, scope)

    def input(self, mapping: Any, path: str, earlier: set[str] | None, scope: str) -> None:
        raise NotImplementedError  # checks._Checker.input


# -- the catalog checks ---------------------------------------------------------------------


def _binding(resolve: Resolve, capability: Any, version: Any) -> Binding | None:
    try:
        return resolve(capability, version)
    except IntegrationUnavailable:
        return None


def _compensation_refusal(binding: Binding | None, compensate: Mapping[str, Any]) -> str | None:
    """Why a declared compensation cannot run under the catalog, or None."""
    name = f"{compensate.get('capability')}@{compensate.get('version')}"
    if binding is None:
        return f"the compensation {name} has no contract or route in the integrations file"
    if binding.effect == Effect.NON_IDEMPOTENT_WRITE and not binding_has_lookup(binding):
        return (
            f"the compensation {name} is a NON_IDEMPOTENT_WRITE whose route has no lookup: a "
            "crash during the undo would leave no safe way to learn whether it happened"
        )
    return None


def catalog_problems(definition: Mapping[str, Any], resolve: Resolve) -> list[FlowProblem]:
    """What a valid definition's compensations break under the catalog: a compensation with no
    contract, a NON_IDEMPOTENT_WRITE compensation whose route has no lookup, and a write with no
    compensation in a transition that opts in. An action whose own capability is not configured
    is not judged here: it fails INTEGRATION_UNAVAILABLE before any call."""
    problems = ProblemList()
    for t_index, transition in enumerate(definition.get("transitions", [])):
        for a_index, action in enumerate(transition.get("actions", [])):
            path = f"$.transitions[{t_index}].actions[{a_index}]"
            if "wait" in action:
                continue
            compensate = action.get(COMPENSATE)
            if compensate is not None:
                binding = _binding(resolve, compensate["capability"], compensate["version"])
                refusal = _compensation_refusal(binding, compensate)
                if refusal is not None:
                    problems.problem(f"{path}.compensate", refusal)
            elif opts_in(transition):
                own = _binding(resolve, action["capability"], action["version"])
                if own is not None and own.effect in WRITES:
                    problems.problem(
                        path,
                        f"action {action['id']!r} is a {own.effect} ({own.contract.key}) with no "
                        'compensate, in a transition whose onFailure is "compensate"',
                    )
    return problems.problems


# -- the run-time plan -----------------------------------------------------------------------


@dataclass(frozen=True)
class Step:
    """One compensation to run: as an action of its own, under its own checkpoint."""

    action: dict[str, Any]  # {id, capability, version, input}: what the runner runs
    sequence: int
    undoes: str  # the forward action's id

    @property
    def action_id(self) -> str:
        return str(self.action["id"])


class CannotCompensate(Exception):
    """The transition cannot compensate what it did; the reason is said in words."""


def compensation_steps(
    transition: Mapping[str, Any], checkpoints: Mapping[str, Any], resolve: Resolve
) -> list[Step]:
    """The compensations of the transition's SUCCEEDED actions, in reverse order.

    `checkpoints` maps action ids to records with `status` and `effect`
    (executions/queue/claims.py's CheckpointRecord). Raises CannotCompensate when a succeeded write
    declares no compensation, a compensation cannot run under the catalog, or a forward write is
    uncertain.
    """
    actions = transition.get("actions", [])
    count = len(actions)
    steps: list[Step] = []
    for index in range(count - 1, -1, -1):
        action = actions[index]
        record = checkpoints.get(action["id"])
        if record is None or "wait" in action:
            continue
        if record.effect in WRITES and record.status in UNCERTAIN:
            raise CannotCompensate(f"action {action['id']!r} is {record.status}: uncertain")
        if record.status != CheckpointStatus.SUCCEEDED:
            continue
        compensate = action.get(COMPENSATE)
        if compensate is None:
            if record.effect in WRITES:
                raise CannotCompensate(
                    f"action {action['id']!r} ({record.effect}) declares no compensation"
                )
            continue
        refusal = _compensation_refusal(
            _binding(resolve, compensate["capability"], compensate["version"]), compensate
        )
        if refusal is not None:
            raise CannotCompensate(refusal)
        steps.append(
            Step(
                action={
                    "id": step_id(action["id"]),
                    "capability": compensate["capability"],
                    "version": compensate["version"],
                    "input": compensate.get("input", {}),
                },
                # After every forward action (0 .. count - 1), the last action's undo first.
                sequence=2 * count - 1 - index,
                undoes=action["id"],
            )
        )
    return steps
