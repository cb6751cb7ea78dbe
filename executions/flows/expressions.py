"""Checks of what a flow definition computes with: values, pointers and conditions.

A value is a literal or `{"from": POINTER}`; a pointer into the context starts with `/data` or
`/actions/<actionId>` and may name only the actions its place can see (`scope`); a pointer into a
wait action's output must be one its payloadSchema can produce. Conditions are the evaluator's
operators, nested at most `MAX_NESTING` levels. Pure: no database, no I/O.
"""

from typing import Any

from . import pointer
from .evaluator import COMPARISONS, OPERATORS
from .payloads import unproducible
from .problems import ProblemList, member

MAX_NESTING = 32  # levels of conditions or values; deeper is a mistake, not a flow
TRANSITION_SCOPE = "actions of this transition"


class ExpressionChecks(ProblemList):
    """The checks of values, pointers and conditions, for the definition walk to build on."""

    def __init__(self) -> None:
        super().__init__()
        # The usable payloadSchema of each wait action of the transition being checked.
        self.wait_schemas: dict[str, dict | bool] = {}

    def value(
        self, value: Any, path: str, actions: set[str] | None, scope: str, depth: int = 0
    ) -> None:
        if depth > MAX_NESTING:
            self.problem(path, f"nested more than {MAX_NESTING} levels deep")
            return
        if _is_mapping(value):
            self.context_pointer(value["from"], f"{path}.from", actions, scope)
        elif isinstance(value, dict):
            for name, inner in value.items():
                self.value(inner, member(path, name), actions, scope, depth + 1)
        elif isinstance(value, list):
            for index, inner in enumerate(value):
                self.value(inner, f"{path}[{index}]", actions, scope, depth + 1)

    def context_pointer(self, value: Any, path: str, actions: set[str] | None, scope: str) -> None:
        """A pointer into the context: `/data...` or `/actions/<known action>...`."""
        try:
            tokens = pointer.parse(value)
        except pointer.PointerError as exc:
            self.problem(path, exc.problem)
            return
        if tokens[:1] == ["data"]:
            return
        if tokens[:1] == ["actions"] and len(tokens) >= 2:
            # With the actions themselves broken, an unknown id would only repeat that problem.
            if actions is not None and tokens[1] not in actions:
                self.problem(path, f"action {tokens[1]!r} is not one of the {scope}")
            elif tokens[1] in self.wait_schemas:
                unreachable = unproducible(self.wait_schemas[tokens[1]], tokens[2:])
                if unreachable is not None:
                    self.problem(
                        path,
                        f"the payloadSchema of wait action {tokens[1]!r} cannot produce "
                        f"{unreachable}",
                    )
            return
        self.problem(path, f'{value!r} must start with "/data" or "/actions/<actionId>"')

    def condition(
        self, condition: Any, path: str, actions: set[str] | None, depth: int = 0
    ) -> None:
        scope = TRANSITION_SCOPE
        if depth > MAX_NESTING:
            self.problem(path, f"nested more than {MAX_NESTING} levels deep")
            return
        if isinstance(condition, bool):
            return
        if not isinstance(condition, dict) or len(condition) != 1:
            self.problem(
                path,
                "a condition is true, false or an object with exactly one operator ("
                + ", ".join(OPERATORS)
                + ")",
            )
            return
        ((op, operand),) = condition.items()
        opath = member(path, op)
        if op in (*COMPARISONS, "in"):
            if not isinstance(operand, list) or len(operand) != 2:
                self.problem(opath, f"{op} takes an array of exactly 2 operands")
                return
            self.value(operand[0], f"{opath}[0]", actions, scope, depth + 1)
            second = operand[1]
            if op == "in" and not (isinstance(second, list) or _is_mapping(second)):
                self.problem(
                    f"{opath}[1]", 'must be an array or a {"from": POINTER} mapping to one'
                )
                return
            self.value(second, f"{opath}[1]", actions, scope, depth + 1)
        elif op == "exists":
            self.context_pointer(operand, opath, actions, scope)
        elif op in ("all", "any"):
            if not isinstance(operand, list) or not operand:
                self.problem(opath, f"{op} takes a non-empty array of conditions")
                return
            for index, inner in enumerate(operand):
                self.condition(inner, f"{opath}[{index}]", actions, depth + 1)
        elif op == "not":
            self.condition(operand, opath, actions, depth + 1)
        else:
            self.problem(opath, f"unknown operator (known: {', '.join(OPERATORS)})")

    def data_pointer(self, value: Any, path: str) -> None:
        try:
            tokens = pointer.parse(value)
        except pointer.PointerError as exc:
            self.problem(path, exc.problem)
            return
        if not tokens:
            self.problem(path, "must point inside the data, not at its root")
        elif "-" in tokens:
            self.problem(path, 'the append token "-" is not supported')


def _is_mapping(value: Any) -> bool:
    return isinstance(value, dict) and len(value) == 1 and "from" in value
