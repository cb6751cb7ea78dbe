"""The pure evaluator of the flow format: values, conditions, hit policies and data updates, as
docs/flow-format.md (#values-and-pointers, #conditions, #decisions, #updates) defines them.

Invariants: everything is a function of (transition, context) and nothing else — no I/O, no
clock, no ORM; the context is `{"data": <accepted data>, "actions": {<actionId>: <output>}}`.
Definitions are validated when published (`executions.flows.publication`), so a malformed
condition raises `ValueError` rather than being guessed at. Updates write into a deep copy of the
data, reading only the context, never the copy being written.
"""

import copy
from dataclasses import dataclass
from typing import Any

from orquestador import errors

from . import pointer

HIT_POLICIES = ("FIRST", "UNIQUE", "ANY")
COMPARISONS = ("eq", "ne", "lt", "le", "gt", "ge")
OPERATORS = (*COMPARISONS, "in", "exists", "all", "any", "not")


@dataclass(frozen=True)
class Decision:
    target: str
    outcome: str
    rule_ids: tuple[str, ...]
    hit_policy: str


class DecisionError(errors.CodedError):
    """No rule matched, or the matching rules broke the hit policy."""


class UpdateError(errors.CodedError):
    """An update could not be applied to the data (errors.DATA_INVALID)."""


def build_context(data: dict, outputs: dict[str, dict]) -> dict:
    """Return the evaluation context (docs/flow-format.md#values-and-pointers)."""
    return {"data": data, "actions": outputs}


def is_mapping(value: Any) -> bool:
    """True when `value` is a `{"from": POINTER}` mapping rather than a literal."""
    return isinstance(value, dict) and len(value) == 1 and "from" in value


def resolve_value(value: Any, context: dict) -> Any:
    """Resolve a value: a mapping reads the context, objects and lists resolve their members."""
    if is_mapping(value):
        found = pointer.resolve(context, value["from"])
        return None if found is pointer.MISSING else found
    if isinstance(value, dict):
        return {key: resolve_value(member, context) for key, member in value.items()}
    if isinstance(value, list):
        return [resolve_value(member, context) for member in value]
    return value


def resolve_input(action: dict, context: dict) -> dict:
    """Return the action's `input` with every value resolved against the context."""
    return {key: resolve_value(value, context) for key, value in action.get("input", {}).items()}


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def json_equal(a: Any, b: Any) -> bool:
    """JSON equality: numbers by value, booleans distinct from numbers, containers deeply."""
    if _is_number(a) and _is_number(b):
        return a == b
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b, strict=True))
    if type(a) is not type(b):
        return False
    return a == b


def _ordered(op: str, a: Any, b: Any) -> bool:
    comparable = (_is_number(a) and _is_number(b)) or (isinstance(a, str) and isinstance(b, str))
    if not comparable:
        return False
    if op == "lt":
        return a < b
    if op == "le":
        return a <= b
    if op == "gt":
        return a > b
    return a >= b


def evaluate_condition(condition: Any, context: dict) -> bool:
    """Evaluate a condition (docs/flow-format.md#conditions) against the context."""
    if isinstance(condition, bool):
        return condition
    if not isinstance(condition, dict) or len(condition) != 1:
        raise ValueError(f"malformed condition: {condition!r}")
    ((op, operand),) = condition.items()
    if op in COMPARISONS:
        a, b = (resolve_value(v, context) for v in operand)
        if op == "eq":
            return json_equal(a, b)
        if op == "ne":
            return not json_equal(a, b)
        return _ordered(op, a, b)
    if op == "in":
        needle, haystack = (resolve_value(v, context) for v in operand)
        return isinstance(haystack, list) and any(json_equal(needle, x) for x in haystack)
    if op == "exists":
        return pointer.resolve(context, operand) is not pointer.MISSING
    if op == "all":
        return all(evaluate_condition(c, context) for c in operand)
    if op == "any":
        return any(evaluate_condition(c, context) for c in operand)
    if op == "not":
        return not evaluate_condition(operand, context)
    raise ValueError(f"unknown condition operator: {op!r}")


def _ids(rules: list[dict]) -> str:
    return ", ".join(repr(rule["id"]) for rule in rules)


def decide(transition: dict, context: dict) -> Decision:
    """Pick the matching rule(s) under the transition's hit policy."""
    decision = transition["decision"]
    policy = decision["hitPolicy"]
    rules = decision["rules"]
    where = f"transition {transition['id']!r}"
    if policy == "FIRST":
        for rule in rules:
            if evaluate_condition(rule["when"], context):
                return Decision(rule["target"], rule["outcome"], (rule["id"],), policy)
        raise DecisionError(errors.DECISION_NO_MATCH, f"no rule matched in {where}")
    if policy not in HIT_POLICIES:
        raise ValueError(f"unknown hit policy: {policy!r}")
    matched = [rule for rule in rules if evaluate_condition(rule["when"], context)]
    if not matched:
        raise DecisionError(errors.DECISION_NO_MATCH, f"no rule matched in {where}")
    if policy == "UNIQUE" and len(matched) > 1:
        raise DecisionError(
            errors.DECISION_AMBIGUOUS,
            f"rules {_ids(matched)} all matched in {where}; UNIQUE allows only one",
        )
    if policy == "ANY" and len({(r["target"], r["outcome"]) for r in matched}) > 1:
        raise DecisionError(
            errors.DECISION_AMBIGUOUS,
            f"rules {_ids(matched)} matched in {where} with different targets or outcomes; "
            "ANY needs them to agree",
        )
    first = matched[0]
    return Decision(first["target"], first["outcome"], tuple(r["id"] for r in matched), policy)


def _json_copy(value: Any) -> Any:
    """A deep copy of a JSON value: dicts and lists rebuilt, scalars shared (immutable), anything
    else by `copy.deepcopy`. The same result as deepcopy on JSON, in a fraction of its time."""
    kind = type(value)
    if kind is dict:
        return {key: _json_copy(item) for key, item in value.items()}
    if kind is list:
        return [_json_copy(item) for item in value]
    if kind in _JSON_SCALARS:
        return value
    return copy.deepcopy(value)


_JSON_SCALARS = frozenset({str, int, float, bool, type(None)})


def apply_updates(transition: dict, data: dict, context: dict) -> dict:
    """Return a new copy of `data` with the transition's updates applied; `data` is untouched."""
    result = _json_copy(data)
    for index, update in enumerate(transition.get("updates", [])):
        if "from" in update:
            found = pointer.resolve(context, update["from"])
            value = None if found is pointer.MISSING else found
        else:
            value = update["value"]
        try:
            # Copied so that no two places in the result, the context or the definition share
            # a container: a later update writing under one must never change another.
            pointer.set_value(result, update["path"], _json_copy(value))
        except pointer.PointerError as exc:
            raise UpdateError(
                errors.DATA_INVALID, f"updates[{index}] (path {update['path']!r}): {exc.problem}"
            ) from exc
    return result
