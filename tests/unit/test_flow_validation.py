"""Whole-definition validation (docs/flow-format.md): every rule, named by its JSON path."""

import copy
import json
from pathlib import Path

import pytest

from executions.flows.canonical import canonical_json, compact_size, sha256_hex
from executions.flows.publication import (
    DataError,
    FlowInvalid,
    FlowProblem,
    definition_from_json,
    find_transition,
    validate_data,
    validate_definition,
)
from orquestador import errors

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def example(name: str) -> dict:
    return json.loads((EXAMPLES / f"{name}.json").read_text())


def base() -> dict:
    """A small valid definition with two actions, all three kinds of pointer and updates."""
    return {
        "key": "loans",
        "version": 1,
        "initialState": "DRAFT",
        "states": ["DRAFT", "APPROVED", "REJECTED"],
        "dataSchema": {"type": "object"},
        "transitions": [
            {
                "id": "submit",
                "from": ["DRAFT"],
                "actions": [
                    {
                        "id": "score",
                        "capability": "scoring.score",
                        "version": 1,
                        "input": {"amount": {"from": "/data/amount"}},
                    },
                    {
                        "id": "charge",
                        "capability": "payments.charge",
                        "version": 2,
                        "input": {"score": {"from": "/actions/score/value"}, "currency": "EUR"},
                    },
                ],
                "decision": {
                    "hitPolicy": "FIRST",
                    "rules": [
                        {
                            "id": "ok",
                            "when": {"ge": [{"from": "/actions/charge/amount"}, 1]},
                            "target": "APPROVED",
                            "outcome": "APPROVED",
                        },
                        {"id": "otherwise", "when": True, "target": "REJECTED", "outcome": "NO"},
                    ],
                },
                "updates": [
                    {"path": "/charge/id", "from": "/actions/charge/id"},
                    {"path": "/reviewed", "value": True},
                ],
            }
        ],
    }


T = "$.transitions[0]"


def problems_after(change) -> list[tuple[str, str]]:
    definition = base()
    change(definition)
    return [(p.path, p.message) for p in validate_definition(definition)]


def only_problem(change) -> tuple[str, str]:
    found = problems_after(change)
    assert len(found) == 1, found
    return found[0]


def transition0(d):
    return d["transitions"][0]


def action(d, index):
    return d["transitions"][0]["actions"][index]


def rules(d):
    return d["transitions"][0]["decision"]["rules"]


# -- valid definitions ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["onboarding", "documents", "approval", "order"])
def test_examples_are_valid(name):
    assert validate_definition(example(name)) == []


def test_base_is_valid():
    assert validate_definition(base()) == []


def test_optional_parts_may_be_left_out_or_empty():
    definition = base()
    del transition0(definition)["updates"]
    transition0(definition)["actions"] = []
    rules(definition)[0]["when"] = {"exists": "/data/x"}
    definition["transitions"].append(
        {
            "id": "other",
            "from": ["APPROVED", "REJECTED"],
            "actions": [],
            "decision": {"hitPolicy": "ANY", "rules": [rules(definition)[1]]},
            "updates": [],
        }
    )
    assert validate_definition(definition) == []


def test_every_condition_form_is_accepted():
    rules(base_def := base())[0]["when"] = {
        "all": [
            True,
            {"not": False},
            {"any": [{"eq": [1, 1]}, {"ne": ["a", {"from": "/data/a"}]}]},
            {"lt": [1, 2]},
            {"le": [1, 2]},
            {"gt": [2, 1]},
            {"ge": [2, 1]},
            {"in": [{"from": "/data/c"}, ["x", {"from": "/actions/score/c"}]]},
            {"in": ["x", {"from": "/actions/charge/list"}]},
            {"exists": "/actions/charge"},
            {"exists": "/data"},
            {"eq": [{"obj": {"from": "/data/o"}}, {"obj": 1}]},
        ]
    }
    assert validate_definition(base_def) == []


# -- top level -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "kind"), [(None, "null"), ([], "an array"), ("flow", "a string"), (1, "a number")]
)
def test_definition_must_be_an_object(value, kind):
    assert validate_definition(value) == [FlowProblem("$", f"must be an object, not {kind}")]


@pytest.mark.parametrize(
    "name", ["key", "version", "initialState", "states", "dataSchema", "transitions"]
)
def test_top_level_key_is_required(name):
    found = problems_after(lambda d: d.pop(name))
    assert (f"$.{name}", "is required") in found


def test_unknown_top_level_key_is_refused():
    assert only_problem(lambda d: d.update(title="x"))[0] == "$.title"
    assert only_problem(lambda d: d.update(title="x"))[1].startswith("unknown key")


@pytest.mark.parametrize(
    ("key", "message"),
    [
        ("", "must not be empty"),
        (3, "must be a non-empty string, not a number"),
        ("Loans", "is not slug-like"),
        ("my flow", "is not slug-like"),
        ("-loans", "is not slug-like"),
        ("x" * 101, "must be at most 100 characters"),
    ],
)
def test_key_must_be_slug_like(key, message):
    path, found = only_problem(lambda d: d.update(key=key))
    assert path == "$.key"
    assert message in found


@pytest.mark.parametrize(
    ("version", "message"),
    [
        (0, "must be between 1 and"),
        (-1, "must be between 1 and"),
        (2**31, "must be between 1 and"),
        (1.0, "must be an integer, not a number"),
        (True, "must be an integer, not a boolean"),
        ("1", "must be an integer, not a string"),
    ],
)
def test_version_must_be_a_positive_integer(version, message):
    path, found = only_problem(lambda d: d.update(version=version))
    assert path == "$.version"
    assert found.startswith(message)


def test_states_must_be_unique_non_empty_strings():
    states = ["DRAFT", "", "DRAFT", 3, "APPROVED", "REJECTED"]
    assert problems_after(lambda d: d.update(states=states)) == [
        ("$.states[1]", "must not be empty"),
        ("$.states[2]", "duplicate state 'DRAFT'"),
        ("$.states[3]", "must be a non-empty string, not a number"),
    ]


@pytest.mark.parametrize("states", [[], {}, "DRAFT"])
def test_states_must_be_a_non_empty_array(states):
    assert ("$.states", "must be a non-empty array of state names") in problems_after(
        lambda d: d.update(states=states)
    )


def test_initial_state_must_be_a_state():
    assert only_problem(lambda d: d.update(initialState="OPEN")) == (
        "$.initialState",
        "'OPEN' is not one of the states",
    )


# -- dataSchema ----------------------------------------------------------------------------------


def test_data_schema_must_be_a_valid_json_schema():
    assert only_problem(lambda d: d.update(dataSchema={"type": "objekt"}))[0] == (
        "$.dataSchema.type"
    )
    path, _ = only_problem(lambda d: d.update(dataSchema={"properties": {"a": {"minLength": -1}}}))
    assert path == "$.dataSchema.properties.a.minLength"


def test_data_schema_reports_every_schema_problem():
    found = problems_after(
        lambda d: d.update(dataSchema={"type": "objekt", "required": "a", "minProperties": -1})
    )
    assert {path for path, _ in found} == {
        "$.dataSchema.type",
        "$.dataSchema.required",
        "$.dataSchema.minProperties",
    }


@pytest.mark.parametrize("schema", [True, [], "object"])
def test_data_schema_must_be_an_object(schema):
    path, message = only_problem(lambda d: d.update(dataSchema=schema))
    assert path == "$.dataSchema"
    assert message.startswith("must be a JSON Schema object")


def test_data_schema_must_be_draft_2020_12():
    path, message = only_problem(
        lambda d: d["dataSchema"].update({"$schema": "http://json-schema.org/draft-07/schema#"})
    )
    assert path == "$.dataSchema['$schema']"
    assert "Draft 2020-12" in message
    d = base()
    d["dataSchema"]["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    assert validate_definition(d) == []


def test_data_schema_references_must_be_local_and_resolve():
    schema = {
        "$defs": {"money": {"type": "number"}},
        "properties": {
            "ok": {"$ref": "#/$defs/money"},
            "missing": {"$ref": "#/$defs/nothing"},
            "remote": {"$ref": "https://example.com/schema.json"},
        },
    }
    found = problems_after(lambda d: d.update(dataSchema=schema))
    assert found == [
        (
            "$.dataSchema.properties.missing['$ref']",
            "'#/$defs/nothing' does not resolve inside dataSchema",
        ),
        (
            "$.dataSchema.properties.remote['$ref']",
            "'https://example.com/schema.json' is not a local reference (#...) inside dataSchema",
        ),
    ]


# -- transitions ---------------------------------------------------------------------------------


def test_transitions_must_be_an_array():
    assert only_problem(lambda d: d.update(transitions={})) == (
        "$.transitions",
        "must be an array of transitions, not an object",
    )


@pytest.mark.parametrize("name", ["id", "from", "actions", "decision"])
def test_transition_key_is_required(name):
    assert (f"{T}.{name}", "is required") in problems_after(lambda d: transition0(d).pop(name))


def test_transition_unknown_key_is_refused():
    path, message = only_problem(lambda d: transition0(d).update(to="APPROVED"))
    assert path == f"{T}.to"
    assert message == "unknown key (allowed: id, from, actions, decision, updates, onFailure)"


def test_transition_ids_must_be_unique():
    def duplicate(d):
        d["transitions"].append(copy.deepcopy(transition0(d)))

    assert only_problem(duplicate) == ("$.transitions[1].id", "duplicate transition id 'submit'")


@pytest.mark.parametrize(
    ("sources", "problem"),
    [
        ([], (f"{T}.from", "must be a non-empty array of states")),
        ("DRAFT", (f"{T}.from", "must be a non-empty array of states")),
        (["DRAFT", "OPEN"], (f"{T}.from[1]", "unknown state 'OPEN'")),
        (["DRAFT", "DRAFT"], (f"{T}.from[1]", "state 'DRAFT' is listed twice")),
        ([""], (f"{T}.from[0]", "must not be empty")),
    ],
)
def test_transition_from_must_list_known_states(sources, problem):
    assert only_problem(lambda d: transition0(d).update({"from": sources})) == problem


# -- actions -------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["id", "capability", "version", "input"])
def test_action_key_is_required(name):
    found = problems_after(lambda d: action(d, 0).pop(name))
    assert (f"{T}.actions[0].{name}", "is required") in found


def test_action_unknown_key_is_refused():
    path, message = only_problem(lambda d: action(d, 1).update(effect="READ_ONLY"))
    assert path == f"{T}.actions[1].effect"
    assert message.startswith("unknown key")


def test_action_ids_must_be_unique_within_a_transition():
    def duplicate(d):
        transition0(d)["actions"].append(
            {"id": "score", "capability": "x", "version": 1, "input": {}}
        )

    assert only_problem(duplicate) == (f"{T}.actions[2].id", "duplicate action id 'score'")


def test_action_ids_may_repeat_across_transitions():
    def second(d):
        other = copy.deepcopy(transition0(d))
        other["id"] = "resubmit"
        d["transitions"].append(other)

    assert problems_after(second) == []


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("capability", "", "must not be empty"),
        ("capability", None, "must be a non-empty string, not null"),
        ("version", 0, "must be between 1 and"),
        ("version", "1", "must be an integer, not a string"),
        ("input", [], "must be an object of values, not an array"),
        ("input", None, "must be an object of values, not null"),
    ],
)
def test_action_fields(field, value, message):
    path, found = only_problem(lambda d: action(d, 0).update({field: value}))
    assert path == f"{T}.actions[0].{field}"
    assert found.startswith(message)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("a/b", "'a/b' is not an identifier (letters, digits, '_', '.' and '-'"),
        (".hidden", "'.hidden' is not an identifier"),
        ("", "must not be empty"),
    ],
)
def test_action_id_must_be_an_identifier(value, message):
    def add(d):
        transition0(d)["actions"].append(
            {"id": value, "capability": "x", "version": 1, "input": {}}
        )

    found = problems_after(add)
    assert [(path, m[: len(message)]) for path, m in found] == [(f"{T}.actions[2].id", message)]


def test_an_action_without_a_usable_id_does_not_multiply_problems():
    assert problems_after(lambda d: action(d, 0).update(id=7)) == [
        (f"{T}.actions[0].id", "must be a non-empty string, not a number")
    ]
    assert problems_after(lambda d: action(d, 0).pop("id")) == [
        (f"{T}.actions[0].id", "is required")
    ]


def test_a_renamed_action_breaks_the_pointers_to_it():
    assert problems_after(lambda d: action(d, 0).update(id="rating")) == [
        (
            f"{T}.actions[1].input.score.from",
            "action 'score' is not one of the earlier actions of this transition",
        )
    ]


def test_actions_must_be_an_array():
    path, message = only_problem(lambda d: transition0(d).update(actions={}))
    assert (path, message) == (f"{T}.actions", "must be an array of actions, not an object")


def test_action_input_may_point_only_at_earlier_actions():
    def forward(d):
        action(d, 0)["input"]["total"] = {"from": "/actions/charge/amount"}

    def itself(d):
        action(d, 0)["input"]["self"] = {"from": "/actions/score/value"}

    expected = "is not one of the earlier actions of this transition"
    path, message = only_problem(forward)
    assert path == f"{T}.actions[0].input.total.from"
    assert message == f"action 'charge' {expected}"
    path, message = only_problem(itself)
    assert path == f"{T}.actions[0].input.self.from"
    assert message == f"action 'score' {expected}"


def test_action_input_pointers_are_checked_inside_nested_values():
    def nested(d):
        action(d, 1)["input"]["customer"] = {
            "id": {"from": "/actions/nobody/id"},
            "tags": ["a", {"from": "bad"}],
            "my-key": {"from": "/oops"},
        }

    assert problems_after(nested) == [
        (
            f"{T}.actions[1].input.customer.id.from",
            "action 'nobody' is not one of the earlier actions of this transition",
        ),
        (f"{T}.actions[1].input.customer.tags[1].from", 'must be empty or start with "/"'),
        (
            f"{T}.actions[1].input.customer['my-key'].from",
            '\'/oops\' must start with "/data" or "/actions/<actionId>"',
        ),
    ]


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("/actions", '\'/actions\' must start with "/data" or "/actions/<actionId>"'),
        ("", '\'\' must start with "/data" or "/actions/<actionId>"'),
        ("/request/owner", "'/request/owner' must start with"),
        ("/dat", "'/dat' must start with"),
        ("data/x", 'must be empty or start with "/"'),
        ("/data/~2", '"~" must be followed by 0 or 1'),
        (3, "must be a string"),
    ],
)
def test_value_pointers_must_read_data_or_actions(source, message):
    path, found = only_problem(lambda d: action(d, 0)["input"].update(x={"from": source}))
    assert path == f"{T}.actions[0].input.x.from"
    assert found.startswith(message)


def test_an_object_with_from_and_other_keys_is_a_literal():
    assert (
        problems_after(
            lambda d: action(d, 0)["input"].update(mail={"from": "a@example.com", "to": "b"})
        )
        == []
    )


# -- decision ------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["hitPolicy", "rules"])
def test_decision_key_is_required(name):
    found = problems_after(lambda d: transition0(d)["decision"].pop(name))
    assert found == [(f"{T}.decision.{name}", "is required")]


def test_decision_unknown_key_is_refused():
    path, _ = only_problem(lambda d: transition0(d)["decision"].update(default="REJECTED"))
    assert path == f"{T}.decision.default"


@pytest.mark.parametrize("policy", ["first", "ALL", "", None, ["FIRST"]])
def test_hit_policy_must_be_known(policy):
    assert only_problem(lambda d: transition0(d)["decision"].update(hitPolicy=policy)) == (
        f"{T}.decision.hitPolicy",
        "must be one of FIRST, UNIQUE, ANY",
    )


@pytest.mark.parametrize("value", [[], {}, None])
def test_rules_must_be_a_non_empty_array(value):
    assert only_problem(lambda d: transition0(d)["decision"].update(rules=value)) == (
        f"{T}.decision.rules",
        "must be a non-empty array of rules",
    )


@pytest.mark.parametrize("name", ["id", "when", "target", "outcome"])
def test_rule_key_is_required(name):
    assert only_problem(lambda d: rules(d)[0].pop(name)) == (
        f"{T}.decision.rules[0].{name}",
        "is required",
    )


def test_rule_unknown_key_is_refused():
    path, _ = only_problem(lambda d: rules(d)[1].update(priority=1))
    assert path == f"{T}.decision.rules[1].priority"


def test_rule_ids_must_be_unique():
    assert only_problem(lambda d: rules(d)[1].update(id="ok")) == (
        f"{T}.decision.rules[1].id",
        "duplicate rule id 'ok'",
    )


def test_rule_target_must_be_a_state_and_outcome_a_non_empty_string():
    found = problems_after(lambda d: rules(d)[0].update(target="DONE", outcome=""))
    assert found == [
        (f"{T}.decision.rules[0].target", "unknown state 'DONE'"),
        (f"{T}.decision.rules[0].outcome", "must not be empty"),
    ]


def test_rules_may_point_at_any_action_of_the_transition_but_no_other():
    def change(d):
        rules(d)[0]["when"] = {
            "all": [
                {"exists": "/actions/score"},
                {"eq": [{"from": "/actions/charge/x"}, {"from": "/actions/other/x"}]},
            ]
        }

    assert only_problem(change) == (
        f"{T}.decision.rules[0].when.all[1].eq[1].from",
        "action 'other' is not one of the actions of this transition",
    )


R = f"{T}.decision.rules[0].when"
OPS = "eq, ne, lt, le, gt, ge, in, exists, all, any, not"
SYNTAX = f"a condition is true, false or an object with exactly one operator ({OPS})"
IN_OPERAND = 'must be an array or a {"from": POINTER} mapping to one'
NOT_DATA = 'must start with "/data" or "/actions/<actionId>"'
GHOST = "action 'ghost' is not one of the actions of this transition"


@pytest.mark.parametrize(
    ("condition", "problem"),
    [
        (None, (R, SYNTAX)),
        ("true", (R, SYNTAX)),
        (1, (R, SYNTAX)),
        ({}, (R, SYNTAX)),
        ({"eq": [1, 1], "ne": [1, 2]}, (R, SYNTAX)),
        ({"between": [1, 2]}, (f"{R}.between", f"unknown operator (known: {OPS})")),
        ({"eq": [1]}, (f"{R}.eq", "eq takes an array of exactly 2 operands")),
        ({"ne": [1, 2, 3]}, (f"{R}.ne", "ne takes an array of exactly 2 operands")),
        ({"lt": 1}, (f"{R}.lt", "lt takes an array of exactly 2 operands")),
        ({"in": [1]}, (f"{R}.in", "in takes an array of exactly 2 operands")),
        ({"in": [1, "abc"]}, (f"{R}.in[1]", IN_OPERAND)),
        ({"in": [1, {"a": 1}]}, (f"{R}.in[1]", IN_OPERAND)),
        ({"exists": "/elsewhere"}, (f"{R}.exists", f"'/elsewhere' {NOT_DATA}")),
        ({"exists": 3}, (f"{R}.exists", "must be a string")),
        ({"all": []}, (f"{R}.all", "all takes a non-empty array of conditions")),
        ({"any": True}, (f"{R}.any", "any takes a non-empty array of conditions")),
        ({"all": [True, "x"]}, (f"{R}.all[1]", SYNTAX)),
        ({"not": [True]}, (f"{R}.not", SYNTAX)),
        ({"not": {"exists": "/actions/ghost"}}, (f"{R}.not.exists", GHOST)),
        ({"eq": [{"from": "x"}, 1]}, (f"{R}.eq[0].from", 'must be empty or start with "/"')),
        ({"gt": [1, {"from": "/actions/ghost/v"}]}, (f"{R}.gt[1].from", GHOST)),
        ({"in": [1, [2, {"from": "/actions/ghost"}]]}, (f"{R}.in[1][1].from", GHOST)),
    ],
)
def test_condition_syntax(condition, problem):
    assert only_problem(lambda d: rules(d)[0].update(when=condition)) == problem


def test_conditions_nested_too_deeply_are_refused():
    condition: object = True
    for _ in range(40):
        condition = {"not": condition}
    path, message = only_problem(lambda d: rules(d)[0].update(when=condition))
    assert path.startswith(f"{R}.not.not")
    assert message == "nested more than 32 levels deep"


# -- updates -------------------------------------------------------------------------------------

U = f"{T}.updates"


def test_updates_must_be_an_array():
    assert only_problem(lambda d: transition0(d).update(updates={})) == (
        U,
        "must be an array of updates, not an object",
    )


ONE_OF = 'needs exactly one of "from" and "value"'


@pytest.mark.parametrize(
    ("update", "problem"),
    [
        ({"value": 1}, (f"{U}[0].path", "is required")),
        ({"path": "/a"}, (f"{U}[0]", ONE_OF)),
        ({"path": "/a", "value": 1, "from": "/data/a"}, (f"{U}[0]", ONE_OF)),
        ({"path": "", "value": 1}, (f"{U}[0].path", "must point inside the data, not at its root")),
        ({"path": "/x/-", "value": 1}, (f"{U}[0].path", 'the append token "-" is not supported')),
        ({"path": "a", "value": 1}, (f"{U}[0].path", 'must be empty or start with "/"')),
        ({"path": 3, "value": 1}, (f"{U}[0].path", "must be a string")),
        ({"path": "/a", "from": "/actions/ghost"}, (f"{U}[0].from", GHOST)),
        ({"path": "/a", "from": "/owner"}, (f"{U}[0].from", f"'/owner' {NOT_DATA}")),
        (
            {"path": "/a", "value": 1, "when": True},
            (f"{U}[0].when", "unknown key (allowed: path, from, value)"),
        ),
        ("path", (f"{U}[0]", "must be an object, not a string")),
    ],
)
def test_update_rules(update, problem):
    found = problems_after(lambda d: transition0(d).update(updates=[update]))
    assert found == [problem]


def test_updates_may_read_any_action_and_write_literal_objects():
    updates = [
        {"path": "/score", "from": "/actions/score"},
        {"path": "/first", "from": "/actions/charge/id"},
        {"path": "/lit", "value": {"from": "not a pointer: a literal"}},
        {"path": "/0/~1x", "value": None},
    ]
    assert problems_after(lambda d: transition0(d).update(updates=updates)) == []


# -- all at once ---------------------------------------------------------------------------------


def test_every_problem_is_reported_not_just_the_first():
    def many(d):
        d["version"] = 0
        d["extra"] = 1
        d["initialState"] = "NOPE"
        action(d, 0)["input"]["x"] = {"from": "/actions/charge/x"}
        action(d, 1)["version"] = "2"
        rules(d)[1]["target"] = "DONE"
        transition0(d)["updates"][0]["path"] = ""

    assert [path for path, _ in problems_after(many)] == [
        "$.extra",
        "$.version",
        "$.initialState",
        f"{T}.actions[0].input.x.from",
        f"{T}.actions[1].version",
        f"{T}.decision.rules[1].target",
        f"{U}[0].path",
    ]


def test_non_json_values_are_refused():
    assert validate_definition({"key": float("nan")}) == [
        FlowProblem("$", "is not JSON: Out of range float values are not JSON compliant")
    ]
    assert validate_definition({"key": {1, 2}})[0].message.startswith("is not JSON")


def test_flow_problem_renders_as_path_and_message():
    assert str(FlowProblem("$.key", "is required")) == "$.key: is required"
    assert "$.key: is required; $.version: is required" in str(
        FlowInvalid([FlowProblem("$.key", "is required"), FlowProblem("$.version", "is required")])
    )


# -- parsing JSON text ---------------------------------------------------------------------------


def test_definition_from_json__parses_valid_text():
    assert definition_from_json(b'{"a": [1, "\xc3\xa9"]}') == {"a": [1, "é"]}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "{",
            "the flow definition is not valid JSON: Expecting property name enclosed in double "
            "quotes at line 1 column 2",
        ),
        ('{"a": 1,\n "a": 2}', "the flow definition repeats the key 'a' in one object"),
        ('{"a": NaN}', "the flow definition is not valid JSON: NaN is not a JSON number"),
        ('{"a": -Infinity}', "the flow definition is not valid JSON: -Infinity is not a JSON"),
        ("[" * 100000, "the flow definition nests more than 100 levels deep"),
    ],
)
def test_definition_from_json__refuses_bad_text(text, message):
    with pytest.raises(FlowInvalid) as exc:
        definition_from_json(text)
    assert [p.path for p in exc.value.problems] == ["$"]
    assert exc.value.problems[0].message.startswith(message)


# -- data ----------------------------------------------------------------------------------------

SCHEMA = {
    "dataSchema": {
        "type": "object",
        "properties": {
            "applicant": {"type": "object", "properties": {"age": {"type": "integer"}}},
            "items": {"type": "array", "items": {"type": "string"}},
        },
        "required": ["applicant"],
    }
}


def test_validate_data__accepts_valid_data():
    valid = {"applicant": {"age": 30}, "items": ["a"]}
    assert validate_data(SCHEMA, valid) is None
    # The same data with one wrong type is refused: the schema really was applied.
    with pytest.raises(DataError):
        validate_data(SCHEMA, {**valid, "items": [1]})


@pytest.mark.parametrize(
    ("data", "detail"),
    [
        ({}, "$: 'applicant' is a required property"),
        ({"applicant": {"age": "x"}}, "$.applicant.age: 'x' is not of type 'integer'"),
        ({"applicant": {}, "items": ["a", 2]}, "$.items[1]: 2 is not of type 'string'"),
        ([], "$: [] is not of type 'object'"),
    ],
)
def test_validate_data__names_the_json_path_of_the_schema_error(data, detail):
    with pytest.raises(DataError) as exc:
        validate_data(SCHEMA, data)
    assert exc.value.code == errors.DATA_INVALID
    assert exc.value.detail == detail


def test_validate_data__long_messages_are_shortened():
    with pytest.raises(DataError) as exc:
        validate_data({"dataSchema": {"type": "string"}}, {"x": "y" * 10_000})
    assert len(exc.value.detail) < 320
    assert exc.value.detail.endswith("...")


def _data_of_size(size: int) -> dict:
    # {"x":"..."} is 8 bytes of framing; "é" is 2 bytes in UTF-8.
    body = size - 8
    return {"x": "é" * (body // 2) + "a" * (body % 2)}


def test_validate_data__size_limit_counts_compact_utf8_bytes():
    open_schema = {"dataSchema": {"type": "object"}}
    validate_data(open_schema, _data_of_size(errors.MAX_DATA_BYTES))
    with pytest.raises(DataError) as exc:
        validate_data(open_schema, _data_of_size(errors.MAX_DATA_BYTES + 1))
    assert exc.value.code == errors.DATA_TOO_LARGE
    assert str(errors.MAX_DATA_BYTES + 1) in exc.value.detail


def test_validate_data__size_is_checked_before_the_schema():
    with pytest.raises(DataError) as exc:
        validate_data(SCHEMA, _data_of_size(errors.MAX_DATA_BYTES + 1))
    assert exc.value.code == errors.DATA_TOO_LARGE


def test_validate_data__non_json_is_data_invalid():
    with pytest.raises(DataError) as exc:
        validate_data({"dataSchema": {}}, {"x": float("inf")})
    assert exc.value.code == errors.DATA_INVALID


def test_find_transition():
    definition = example("onboarding")
    assert find_transition(definition, "approve")["from"] == ["SUBMITTED"]
    assert find_transition(definition, "nope") is None


# -- canonical JSON (checksums and size limits) --------------------------------------------------


def test_canonical_json__sorted_compact_utf8():
    assert canonical_json({"b": [1, {"d": 1, "c": "é"}], "a": None}) == (
        '{"a":null,"b":[1,{"c":"é","d":1}]}'
    )


def test_sha256_hex__ignores_key_order_but_not_values():
    assert sha256_hex({"a": 1, "b": 2}) == sha256_hex({"b": 2, "a": 1})
    assert sha256_hex({"a": 1}) != sha256_hex({"a": "1"})
    assert sha256_hex({}) == "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"


def test_compact_size__counts_utf8_bytes():
    assert compact_size({"a": "é"}) == len('{"a":"é"}'.encode()) == 10
    with pytest.raises(ValueError, match="not JSON compliant"):
        compact_size(float("nan"))


# -- caseSummary ---------------------------------------------------------------------------------


def test_case_summary__pointers_into_the_data_are_accepted():
    definition = base() | {"caseSummary": ["/customer", "/order/amount"]}
    assert validate_definition(definition) == []


@pytest.mark.parametrize(
    ("summary", "path", "message"),
    [
        ("/customer", "$.caseSummary", "must be an array of at most 8 JSON Pointers"),
        (["/a"] * 9, "$.caseSummary", "must be an array of at most 8 JSON Pointers"),
        (["customer"], "$.caseSummary[0]", 'must be empty or start with "/"'),
        ([""], "$.caseSummary[0]", "must point inside the data"),
        ([7], "$.caseSummary[0]", "must be a string"),
        (["/a", "/a"], "$.caseSummary[1]", "duplicate pointer '/a'"),
    ],
)
def test_case_summary__refuses_what_is_not_a_list_of_data_pointers(summary, path, message):
    definition = base() | {"caseSummary": summary}
    problems = [(p.path, p.message) for p in validate_definition(definition)]
    assert any(p == path and m.startswith(message) for p, m in problems), problems
