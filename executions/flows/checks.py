"""Whole-definition validation of flow versions: every key and rule of docs/flow-format.md,
unknown keys refused at every level, pointers checked against what runs before them (and against
what a wait's payloadSchema can produce, where that is decidable). Pure: no database, no I/O.

Problems are reported all at once, each with a JSON-path-like location such as
`$.transitions[0].actions[1].input.amount.from`. The walk is `_Checker`: it holds what every
check reads (the states, the actions before each one, what each wait can produce) and builds on
the checks of values, pointers and conditions (expressions.py), of the shapes every level
shares (problems.py), of compensations (compensations.py) and amounts (amounts.py).
"""

import re
from collections.abc import Iterator
from typing import Any

import jsonschema
from referencing import Registry
from referencing.exceptions import Unresolvable
from referencing.jsonschema import DRAFT202012

from orquestador import patterns, schemacost
from orquestador.schemas import DRAFT as DRAFT  # imported from here by waits.py and tests
from orquestador.schemas import schema_errors

from .amounts import DisplayChecks
from .canonical import canonical_json
from .compensations import CompensationChecks
from .evaluator import HIT_POLICIES
from .expressions import TRANSITION_SCOPE, ExpressionChecks
from .payloads import payload_problems
from .pointer import kind
from .problems import IDENTIFIER, IDENTIFIER_RULE, FlowProblem, member, short_detail

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

FLOW_KEY = re.compile(r"[a-z0-9][a-z0-9_-]*")
# The one draft a schema may declare in `$schema`, as its meta-schema names itself.
DRAFT_URI: str = jsonschema.Draft202012Validator.META_SCHEMA["$id"]


class _Checker(ExpressionChecks, CompensationChecks, DisplayChecks):
    """Walks one definition and collects every problem."""

    def __init__(self) -> None:
        super().__init__()
        self.states: set[str] = set()

    # -- the definition ---------------------------------------------------------------------

    def definition(self, definition: Any) -> None:
        if not self.object(definition, "$", TOP_LEVEL_KEYS, ("caseSummary", "display")):
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
        usable_schema = None  # the dataSchema, once checked usable: what data can hold
        if "dataSchema" in definition:
            if self.data_schema(definition["dataSchema"], "$.dataSchema"):
                usable_schema = definition["dataSchema"]
        if "transitions" in definition:
            self.transitions(definition["transitions"], "$.transitions")
        if "caseSummary" in definition:
            self.case_summary(definition["caseSummary"], "$.caseSummary")
        if "display" in definition:
            self.display(definition["display"], "$.display", usable_schema)

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
            self.problem(path, f"must be a JSON Schema object, not {kind(schema)}")
            return False
        declared = schema.get("$schema")
        if declared is not None and declared != DRAFT_URI:
            self.problem(
                member(path, "$schema"),
                f"only JSON Schema Draft 2020-12 ({DRAFT_URI}) is supported",
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
        if valid:  # its references resolve: what validating against it can cost is decidable
            for location, message in schemacost.cost_problems(
                schema, path, _base_uri(schema, where)
            ):
                valid = False
                self.problem(location, message)
        return valid

    def schema_references(self, schema: dict, path: str, where: str = "dataSchema") -> bool:
        """References must stay inside the schema and resolve there.

        Validating data must never fetch anything (the evaluator and the API do no I/O), and a
        reference that does not resolve would only fail later, on somebody's request.
        """
        resource = DRAFT202012.create_resource(schema)
        uri = _base_uri(schema, where)
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
            self.problem(path, f"must be an array of transitions, not {kind(transitions)}")
            return
        seen: set[str] = set()
        for index, transition in enumerate(transitions):
            tpath = f"{path}[{index}]"
            if not self.object(transition, tpath, TRANSITION_KEYS, ("updates", "onFailure")):
                continue
            if "onFailure" in transition:
                self.on_failure(transition["onFailure"], f"{tpath}.onFailure")
            self.unique_id(transition, tpath, seen, "transition")
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
            self.problem(path, f"must be an array of actions, not {kind(actions)}")
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
                if self.unique_id(action, apath, earlier, "action") and schema is not None:
                    self.wait_schemas[action["id"]] = schema
                if not isinstance(action.get("id"), str):
                    complete = False
                continue
            if not self.object(action, apath, ACTION_KEYS, ("compensate",)):
                complete = False
                continue
            if "capability" in action:
                self.name(action["capability"], f"{apath}.capability")
            if "version" in action:
                self.version(action["version"], f"{apath}.version")
            if "input" in action:
                scope = "earlier actions of this transition"
                self.input(action["input"], f"{apath}.input", earlier if complete else None, scope)
            self.unique_id(action, apath, earlier, "action")
            if not isinstance(action.get("id"), str):
                complete = False
            if "compensate" in action:  # it may read what the action it undoes returned
                self.compensate(
                    action["compensate"], f"{apath}.compensate", earlier if complete else None
                )
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
                self.problem(f"{path}.timeoutSeconds", f"must be an integer, not {kind(seconds)}")
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
                    self.problem(f"{opath}.payload", f"must be a JSON object, not {kind(payload)}")
                elif schema is not None:
                    for problem in payload_problems(schema, payload):
                        self.problem(f"{opath}.payload{problem.path[1:]}", problem.message)
        return schema

    def input(self, mapping: Any, path: str, earlier: set[str] | None, scope: str) -> None:
        if not isinstance(mapping, dict):
            self.problem(path, f"must be an object of values, not {kind(mapping)}")
            return
        for name, value in mapping.items():
            self.value(value, member(path, name), earlier, scope)

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
            self.unique_id(rule, rpath, seen, "rule")
            if "when" in rule:
                self.condition(rule["when"], f"{rpath}.when", actions)
            if "target" in rule:
                target = rule["target"]
                if self.name(target, f"{rpath}.target") and self.states:
                    if target not in self.states:
                        self.problem(f"{rpath}.target", f"unknown state {target!r}")
            if "outcome" in rule:
                self.name(rule["outcome"], f"{rpath}.outcome")

    # -- updates -----------------------------------------------------------------------------

    def updates(self, updates: Any, path: str, actions: set[str] | None) -> None:
        if not isinstance(updates, list):
            self.problem(path, f"must be an array of updates, not {kind(updates)}")
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
                self.context_pointer(update["from"], f"{upath}.from", actions, TRANSITION_SCOPE)


def _base_uri(schema: dict, where: str) -> str:
    """The URI a schema's references resolve against: its own `$id`, or one naming its place."""
    return DRAFT202012.create_resource(schema).id() or f"urn:orquestador:{where}"


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


def validate_definition(definition: Any) -> list[FlowProblem]:
    """Return every problem of `definition` against the flow format (docs/flow-format.md); empty
    when it is valid."""
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
