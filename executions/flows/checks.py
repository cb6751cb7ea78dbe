"""Whole-definition validation of flow versions (SPEC §4).

A definition is JSON with exactly these top-level keys: `key`, `version`, `initialState`,
`states`, `dataSchema` (JSON Schema, Draft 2020-12) and `transitions`. A transition has `id`,
`from`, `actions` (may be empty), `decision` and, optionally, `updates` (default none). An action
has `id`, `capability`, `version` and `input` (an object of values), or is a wait action: `id` and
`wait` (`event`, `payloadSchema`, `timeoutSeconds` and optionally `onTimeout: {payload}`), whose
output is the payload of the event that resumes it (SPEC §10). A rule has `id`, `when` (a
condition), `target` and `outcome`. An update has `path` (a pointer into the data) and exactly one
of `from` (a pointer into the context) or `value` (a literal, taken as is). Unknown keys are
refused at every level, so a misspelt key never silently means "absent".

Pointers in values start with `/data` or `/actions/<actionId>`. An action's input may read only
actions that run before it in the same transition; rules and updates may read any action of the
transition; a pointer into a wait action's output must be one its payloadSchema can produce, where
that is decidable without running anything. Problems are reported all at once, each with a
JSON-path-like location such as
`$.transitions[0].actions[1].input.amount.from`. Pure: no database, no I/O.

Longer than our other modules because it is one idea: every check reads the same accumulated
view of the definition (its states, the actions before each one, what each wait can produce)
and appends to one problem list; split across files they would pass that view back and forth.
"""

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from referencing import Registry
from referencing.exceptions import Unresolvable
from referencing.jsonschema import DRAFT202012

from orquestador import patterns
from orquestador.schemas import DRAFT, schema_errors, validator

from . import pointer
from .canonical import canonical_json
from .evaluator import COMPARISONS, HIT_POLICIES, OPERATORS

MAX_CASE_SUMMARY = 8  # pointers a flow's caseSummary may list
TOP_LEVEL_KEYS = ("key", "version", "initialState", "states", "dataSchema", "transitions")
TRANSITION_KEYS = ("id", "from", "actions", "decision")
ACTION_KEYS = ("id", "capability", "version", "input")
WAIT_ACTION_KEYS = ("id", "wait")
WAIT_KEYS = ("event", "payloadSchema", "timeoutSeconds")
MIN_WAIT_SECONDS = 1  # seconds
MAX_WAIT_SECONDS = 90 * 24 * 3600  # seconds: 90 days
DECISION_KEYS = ("hitPolicy", "rules")
RULE_KEYS = ("id", "when", "target", "outcome")
MAX_NAME_LENGTH = 100  # characters: keys, ids and states fit the model's columns
MAX_VERSION = 2**31 - 1  # PostgreSQL integer
MAX_NESTING = 32  # levels of conditions or values; deeper is a mistake, not a flow
MAX_DETAIL = 300  # characters of a schema error message shown back

FLOW_KEY = re.compile(r"[a-z0-9][a-z0-9_-]*")
IDENTIFIER = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")
IDENTIFIER_RULE = "an identifier (letters, digits, '_', '.' and '-', not starting with '.' or '-')"
_PLAIN_MEMBER = re.compile(r"[A-Za-z][A-Za-z0-9_]*")


@dataclass(frozen=True)
class FlowProblem:
    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


def member(path: str, name: str) -> str:
    """The location of member `name` under `path`, written as jsonschema writes JSON paths."""
    if _PLAIN_MEMBER.fullmatch(name):
        return f"{path}.{name}"
    return "{}['{}']".format(path, name.replace("\\", "\\\\").replace("'", "\\'"))


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


class _Checker:
    """Walks one definition and collects every problem."""

    def __init__(self) -> None:
        self.problems: list[FlowProblem] = []
        self.states: set[str] = set()
        # The usable payloadSchema of each wait action of the transition being checked.
        self.wait_schemas: dict[str, dict | bool] = {}

    def problem(self, path: str, message: str) -> None:
        self.problems.append(FlowProblem(path, message))

    def object(self, value: Any, path: str, required: tuple, optional: tuple = ()) -> bool:
        """Check `value` is an object with the required keys and no unknown ones."""
        if not isinstance(value, dict):
            self.problem(path, f"must be an object, not {_type_name(value)}")
            return False
        for name in required:
            if name not in value:
                self.problem(member(path, name), "is required")
        for name in value:
            if name not in required and name not in optional:
                allowed = ", ".join((*required, *optional))
                self.problem(member(path, name), f"unknown key (allowed: {allowed})")
        return True

    def name(
        self, value: Any, path: str, pattern: re.Pattern | None = None, what: str = ""
    ) -> bool:
        if not isinstance(value, str):
            self.problem(path, f"must be a non-empty string, not {_type_name(value)}")
            return False
        if not value:
            self.problem(path, "must not be empty")
            return False
        if len(value) > MAX_NAME_LENGTH:
            self.problem(path, f"must be at most {MAX_NAME_LENGTH} characters")
            return False
        if pattern is not None and not pattern.fullmatch(value):
            self.problem(path, f"{value!r} is not {what}")
            return False
        return True

    def version(self, value: Any, path: str) -> None:
        if not isinstance(value, int) or isinstance(value, bool):
            self.problem(path, f"must be an integer, not {_type_name(value)}")
        elif not 1 <= value <= MAX_VERSION:
            self.problem(path, f"must be between 1 and {MAX_VERSION}")

    # -- the definition ---------------------------------------------------------------------

    def definition(self, definition: Any) -> None:
        if not self.object(definition, "$", TOP_LEVEL_KEYS, ("caseSummary",)):
            return
        if "key" in definition:
            self.name(
                definition["key"],
                "$.key",
                FLOW_KEY,
                "slug-like (lowercase letters, digits, '-' and '_', starting with a letter "
                "or digit)",
            )
        if "version" in definition:
            self.version(definition["version"], "$.version")
        self.state_list(definition.get("states"), "states" in definition)
        if "initialState" in definition:
            initial = definition["initialState"]
            if self.name(initial, "$.initialState") and self.states and initial not in self.states:
                self.problem("$.initialState", f"{initial!r} is not one of the states")
        if "dataSchema" in definition:
            self.data_schema(definition["dataSchema"], "$.dataSchema")
        if "transitions" in definition:
            self.transitions(definition["transitions"], "$.transitions")
        if "caseSummary" in definition:
            self.case_summary(definition["caseSummary"], "$.caseSummary")

    def case_summary(self, pointers: Any, path: str) -> None:
        """JSON Pointers into the request data that a reconciliation case shows at its top."""
        if not isinstance(pointers, list) or len(pointers) > MAX_CASE_SUMMARY:
            self.problem(
                path, f"must be an array of at most {MAX_CASE_SUMMARY} JSON Pointers into the data"
            )
            return
        seen: set[str] = set()
        for index, item in enumerate(pointers):
            ipath = f"{path}[{index}]"
            self.data_pointer(item, ipath)
            if isinstance(item, str):
                if item in seen:
                    self.problem(ipath, f"duplicate pointer {item!r}")
                seen.add(item)

    def state_list(self, states: Any, present: bool) -> None:
        if not present:
            return
        if not isinstance(states, list) or not states:
            self.problem("$.states", "must be a non-empty array of state names")
            return
        for index, state in enumerate(states):
            path = f"$.states[{index}]"
            if self.name(state, path):
                if state in self.states:
                    self.problem(path, f"duplicate state {state!r}")
                self.states.add(state)

    def data_schema(self, schema: Any, path: str, where: str = "dataSchema") -> bool:
        """Check a self-contained JSON Schema; return whether it can be used to validate."""
        if not isinstance(schema, dict):
            self.problem(path, f"must be a JSON Schema object, not {_type_name(schema)}")
            return False
        declared = schema.get("$schema")
        if declared is not None and declared != DRAFT.META_SCHEMA["$id"]:
            self.problem(
                member(path, "$schema"),
                f"only JSON Schema Draft 2020-12 ({DRAFT.META_SCHEMA['$id']}) is supported",
            )
            return False
        valid = True
        for error in schema_errors(schema):
            valid = False
            self.problem(path + error.json_path[1:], short_detail(error.message))
        if valid:
            valid = self.schema_references(schema, path, where)
            for location, message in patterns.pattern_problems(schema, path):
                valid = False
                self.problem(location, message)
        return valid

    def schema_references(self, schema: dict, path: str, where: str = "dataSchema") -> bool:
        """References must stay inside the schema and resolve there.

        Validating data must never fetch anything (the evaluator and the API do no I/O), and a
        reference that does not resolve would only fail later, on somebody's request.
        """
        resource = DRAFT202012.create_resource(schema)
        uri = resource.id() or f"urn:orquestador:{where}"
        resolver = Registry().with_resource(uri, resource).crawl().resolver(base_uri=uri)
        usable = True
        for location, ref in _references(schema, path):
            if not ref.startswith("#"):
                self.problem(location, f"{ref!r} is not a local reference (#...) inside {where}")
                usable = False
                continue
            try:
                resolver.lookup(ref)
            except Unresolvable:
                self.problem(location, f"{ref!r} does not resolve inside {where}")
                usable = False
        return usable

    def transitions(self, transitions: Any, path: str) -> None:
        if not isinstance(transitions, list):
            self.problem(path, f"must be an array of transitions, not {_type_name(transitions)}")
            return
        seen: set[str] = set()
        for index, transition in enumerate(transitions):
            tpath = f"{path}[{index}]"
            if not self.object(transition, tpath, TRANSITION_KEYS, ("updates",)):
                continue
            tid = transition.get("id")
            if "id" in transition and self.name(tid, f"{tpath}.id", IDENTIFIER, IDENTIFIER_RULE):
                if tid in seen:
                    self.problem(f"{tpath}.id", f"duplicate transition id {tid!r}")
                seen.add(tid)
            if "from" in transition:
                self.sources(transition["from"], f"{tpath}.from")
            action_ids = (
                self.actions(transition["actions"], f"{tpath}.actions")
                if "actions" in transition
                else None
            )
            if "decision" in transition:
                self.decision(transition["decision"], f"{tpath}.decision", action_ids)
            if "updates" in transition:
                self.updates(transition["updates"], f"{tpath}.updates", action_ids)

    def sources(self, sources: Any, path: str) -> None:
        if not isinstance(sources, list) or not sources:
            self.problem(path, "must be a non-empty array of states")
            return
        seen: set[str] = set()
        for index, state in enumerate(sources):
            spath = f"{path}[{index}]"
            if not self.name(state, spath):
                continue
            if self.states and state not in self.states:
                self.problem(spath, f"unknown state {state!r}")
            elif state in seen:
                self.problem(spath, f"state {state!r} is listed twice")
            seen.add(state)

    def actions(self, actions: Any, path: str) -> set[str] | None:
        """Check the actions; return the ids of all of them, or None when they are unknowable."""
        if not isinstance(actions, list):
            self.problem(path, f"must be an array of actions, not {_type_name(actions)}")
            return None
        earlier: set[str] = set()
        self.wait_schemas = {}
        complete = True  # False once an action has no usable id: references become unknowable
        for index, action in enumerate(actions):
            apath = f"{path}[{index}]"
            if isinstance(action, dict) and "wait" in action:
                if not self.object(action, apath, WAIT_ACTION_KEYS):
                    complete = False
                    continue
                schema = self.wait(action["wait"], f"{apath}.wait")
                aid = action.get("id")
                if "id" in action and self.name(aid, f"{apath}.id", IDENTIFIER, IDENTIFIER_RULE):
                    if aid in earlier:
                        self.problem(f"{apath}.id", f"duplicate action id {aid!r}")
                    elif schema is not None:
                        self.wait_schemas[aid] = schema
                if isinstance(aid, str):
                    earlier.add(aid)
                else:
                    complete = False
                continue
            if not self.object(action, apath, ACTION_KEYS):
                complete = False
                continue
            if "capability" in action:
                self.name(action["capability"], f"{apath}.capability")
            if "version" in action:
                self.version(action["version"], f"{apath}.version")
            if "input" in action:
                scope = "earlier actions of this transition"
                self.input(action["input"], f"{apath}.input", earlier if complete else None, scope)
            aid = action.get("id")
            if "id" in action and self.name(aid, f"{apath}.id", IDENTIFIER, IDENTIFIER_RULE):
                if aid in earlier:
                    self.problem(f"{apath}.id", f"duplicate action id {aid!r}")
            if isinstance(aid, str):
                # Even a malformed id is declared: pointers to it are not a second problem.
                earlier.add(aid)
            else:
                complete = False
        return earlier if complete else None

    def wait(self, wait: Any, path: str) -> dict | bool | None:
        """Check a wait; return its payloadSchema when it is usable, else None."""
        if not self.object(wait, path, WAIT_KEYS, ("onTimeout",)):
            return None
        if "event" in wait:
            self.name(wait["event"], f"{path}.event", IDENTIFIER, IDENTIFIER_RULE)
        if "timeoutSeconds" in wait:
            seconds = wait["timeoutSeconds"]
            if not isinstance(seconds, int) or isinstance(seconds, bool):
                self.problem(
                    f"{path}.timeoutSeconds", f"must be an integer, not {_type_name(seconds)}"
                )
            elif not MIN_WAIT_SECONDS <= seconds <= MAX_WAIT_SECONDS:
                self.problem(
                    f"{path}.timeoutSeconds",
                    f"must be between {MIN_WAIT_SECONDS} and {MAX_WAIT_SECONDS} seconds (90 days)",
                )
        schema = None
        if "payloadSchema" in wait:
            spath = f"{path}.payloadSchema"
            if self.data_schema(wait["payloadSchema"], spath, "payloadSchema"):
                schema = wait["payloadSchema"]
        if "onTimeout" in wait:
            opath = f"{path}.onTimeout"
            if (
                self.object(wait["onTimeout"], opath, ("payload",))
                and "payload" in wait["onTimeout"]
            ):
                payload = wait["onTimeout"]["payload"]
                if not isinstance(payload, dict):
                    self.problem(
                        f"{opath}.payload", f"must be a JSON object, not {_type_name(payload)}"
                    )
                elif schema is not None:
                    for problem in payload_problems(schema, payload):
                        self.problem(f"{opath}.payload{problem.path[1:]}", problem.message)
        return schema

    def input(self, mapping: Any, path: str, earlier: set[str] | None, scope: str) -> None:
        if not isinstance(mapping, dict):
            self.problem(path, f"must be an object of values, not {_type_name(mapping)}")
            return
        for name, value in mapping.items():
            self.value(value, member(path, name), earlier, scope)

    # -- values and pointers -----------------------------------------------------------------

    def value(
        self, value: Any, path: str, actions: set[str] | None, scope: str, depth: int = 0
    ) -> None:
        if depth > MAX_NESTING:
            self.problem(path, f"nested more than {MAX_NESTING} levels deep")
            return
        if isinstance(value, dict) and len(value) == 1 and "from" in value:
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

    # -- decision ----------------------------------------------------------------------------

    def decision(self, decision: Any, path: str, actions: set[str] | None) -> None:
        if not self.object(decision, path, DECISION_KEYS):
            return
        if "hitPolicy" in decision and decision["hitPolicy"] not in HIT_POLICIES:
            self.problem(f"{path}.hitPolicy", f"must be one of {', '.join(HIT_POLICIES)}")
        if "rules" not in decision:
            return
        rules = decision["rules"]
        if not isinstance(rules, list) or not rules:
            self.problem(f"{path}.rules", "must be a non-empty array of rules")
            return
        seen: set[str] = set()
        for index, rule in enumerate(rules):
            rpath = f"{path}.rules[{index}]"
            if not self.object(rule, rpath, RULE_KEYS):
                continue
            rid = rule.get("id")
            if "id" in rule and self.name(rid, f"{rpath}.id", IDENTIFIER, IDENTIFIER_RULE):
                if rid in seen:
                    self.problem(f"{rpath}.id", f"duplicate rule id {rid!r}")
                seen.add(rid)
            if "when" in rule:
                self.condition(rule["when"], f"{rpath}.when", actions)
            if "target" in rule:
                target = rule["target"]
                if self.name(target, f"{rpath}.target") and self.states:
                    if target not in self.states:
                        self.problem(f"{rpath}.target", f"unknown state {target!r}")
            if "outcome" in rule:
                self.name(rule["outcome"], f"{rpath}.outcome")

    def condition(
        self, condition: Any, path: str, actions: set[str] | None, depth: int = 0
    ) -> None:
        scope = "actions of this transition"
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

    # -- updates -----------------------------------------------------------------------------

    def updates(self, updates: Any, path: str, actions: set[str] | None) -> None:
        if not isinstance(updates, list):
            self.problem(path, f"must be an array of updates, not {_type_name(updates)}")
            return
        for index, update in enumerate(updates):
            upath = f"{path}[{index}]"
            if not self.object(update, upath, ("path",), ("from", "value")):
                continue
            if "path" in update:
                self.data_pointer(update["path"], f"{upath}.path")
            has_from, has_value = "from" in update, "value" in update
            if has_from == has_value:
                self.problem(upath, 'needs exactly one of "from" and "value"')
            elif has_from:
                self.context_pointer(
                    update["from"], f"{upath}.from", actions, "actions of this transition"
                )

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


def _references(node: Any, path: str) -> Iterator[tuple[str, str]]:
    """Yield (location, reference) for every `$ref` and `$dynamicRef` under `node`."""
    if isinstance(node, dict):
        for name, value in node.items():
            where = member(path, name)
            if name in ("$ref", "$dynamicRef") and isinstance(value, str):
                yield where, value
            else:
                yield from _references(value, where)
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _references(value, f"{path}[{index}]")


def payload_problems(schema: dict | bool, payload: Any) -> list[FlowProblem]:
    """Every way `payload` breaks a (checked) payloadSchema, each with its JSON path."""
    checker = validator(schema, formats=False)
    return [
        FlowProblem(error.json_path, short_detail(error.message))
        for error in sorted(checker.iter_errors(payload), key=lambda e: e.json_path)
    ]


# Keywords under which a schema combines or redirects to others: what such a schema produces is
# not decided by looking at `type`, `properties` and `additionalProperties` alone.
_UNDECIDABLE = (
    "$ref",
    "$dynamicRef",
    "allOf",
    "anyOf",
    "oneOf",
    "not",
    "if",
    "then",
    "else",
    "dependentSchemas",
    "unevaluatedProperties",
    "unevaluatedItems",
)


def unproducible(schema: Any, tokens: list[str]) -> str | None:
    """Where a payload valid against `schema` can never have anything at `tokens`, say where.

    Decides only the plain cases (a `false` schema, a `type` that rules out what the pointer
    needs, an object closed by `additionalProperties: false`, an array index not a number or
    past `maxItems`); anything it cannot decide is taken as producible (None).
    """
    walked = ""
    for segment in tokens:
        here = f"{walked}/{segment}"
        if schema is False:
            return walked or "anything"
        if not isinstance(schema, dict) or any(key in schema for key in _UNDECIDABLE):
            return None
        if "enum" in schema or "const" in schema:
            return None
        declared = schema.get("type")
        if declared is None:
            types = {"object", "array"}
        else:
            types = {declared} if isinstance(declared, str) else set(declared)
        child_of_object = child_of_array = None
        if "object" in types:
            properties = schema.get("properties") or {}
            if segment in properties:
                child_of_object = properties[segment]
            elif schema.get("patternProperties") or (
                schema.get("additionalProperties", True) is not False
            ):
                return None  # an open object may hold it
        is_index = segment.isdigit() and (segment == "0" or not segment.startswith("0"))
        if "array" in types and is_index:
            max_items = schema.get("maxItems")
            if not (isinstance(max_items, int) and int(segment) >= max_items):
                prefix = schema.get("prefixItems") or []
                index = int(segment)
                child_of_array = prefix[index] if index < len(prefix) else schema.get("items", True)
        if child_of_object is not None and child_of_array is not None:
            return None
        child = child_of_object if child_of_object is not None else child_of_array
        if child is None:
            return here
        schema = child
        walked = here
    if schema is False:
        return walked or "anything"
    return None


def _is_mapping(value: Any) -> bool:
    return isinstance(value, dict) and len(value) == 1 and "from" in value


def short_detail(message: str) -> str:
    return message if len(message) <= MAX_DETAIL else message[: MAX_DETAIL - 3] + "..."


def validate_definition(definition: Any) -> list[FlowProblem]:
    """Return every problem of `definition` against SPEC §4; empty when it is valid."""
    try:
        canonical_json(definition)
    except (TypeError, ValueError) as exc:
        return [FlowProblem("$", f"is not JSON: {exc}")]
    except RecursionError:
        return [FlowProblem("$", "is nested too deeply")]
    checker = _Checker()
    try:
        checker.definition(definition)
    except RecursionError:
        checker.problem("$", "is nested too deeply")
    return checker.problems
