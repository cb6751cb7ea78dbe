"""Wait actions in flow definitions (docs/flow-format.md#wait-actions): every problem of the
construct, by its path."""

import copy
import time

import pytest

from executions.flows.checks import MAX_WAIT_SECONDS
from executions.flows.payloads import payload_problems, unproducible
from executions.flows.publication import validate_definition

T = "$.transitions[0]"
W = f"{T}.actions[1].wait"

PAYLOAD_SCHEMA = {
    "type": "object",
    "required": ["approved"],
    "properties": {
        "approved": {"type": "boolean"},
        "comment": {"type": "string", "maxLength": 500},
        "approver": {
            "type": "object",
            "properties": {"name": {"type": "string"}},
            "additionalProperties": False,
        },
        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
    },
    "additionalProperties": False,
}


def definition() -> dict:
    """quote -> wait for approval -> charge, with the decision and updates reading the wait."""
    return {
        "key": "quotes",
        "version": 1,
        "initialState": "DRAFT",
        "states": ["DRAFT", "ACCEPTED", "DECLINED"],
        "dataSchema": {"type": "object"},
        "transitions": [
            {
                "id": "submit",
                "from": ["DRAFT"],
                "actions": [
                    {"id": "quote", "capability": "quotes.price", "version": 1, "input": {}},
                    {
                        "id": "approval",
                        "wait": {
                            "event": "manager.approval",
                            "payloadSchema": copy.deepcopy(PAYLOAD_SCHEMA),
                            "timeoutSeconds": 86400,
                            "onTimeout": {"payload": {"approved": False, "comment": "timed out"}},
                        },
                    },
                    {
                        "id": "charge",
                        "capability": "payments.charge",
                        "version": 1,
                        "input": {"approvedBy": {"from": "/actions/approval/approver/name"}},
                    },
                ],
                "decision": {
                    "hitPolicy": "FIRST",
                    "rules": [
                        {
                            "id": "yes",
                            "when": {"eq": [{"from": "/actions/approval/approved"}, True]},
                            "target": "ACCEPTED",
                            "outcome": "ACCEPTED",
                        },
                        {"id": "no", "when": True, "target": "DECLINED", "outcome": "DECLINED"},
                    ],
                },
                "updates": [
                    {"path": "/approval/comment", "from": "/actions/approval/comment"},
                    {"path": "/approval/firstTag", "from": "/actions/approval/tags/0"},
                ],
            }
        ],
    }


def problems_after(change) -> list[tuple[str, str]]:
    d = definition()
    change(d)
    return [(p.path, p.message) for p in validate_definition(d)]


def wait(d) -> dict:
    return d["transitions"][0]["actions"][1]["wait"]


def test_a_wait_action_with_every_part_is_valid():
    assert validate_definition(definition()) == []


def test_on_timeout_is_optional():
    assert problems_after(lambda d: wait(d).pop("onTimeout")) == []


@pytest.mark.parametrize("seconds", [1, MAX_WAIT_SECONDS])
def test_the_timeout_bounds_are_inclusive(seconds):
    assert problems_after(lambda d: wait(d).update(timeoutSeconds=seconds)) == []


def test_a_wait_action_with_a_capability_or_unknown_keys_is_refused():
    def change(d):
        d["transitions"][0]["actions"][1].update(capability="x", version=1)
        wait(d)["retries"] = 3

    assert problems_after(change) == [
        (f"{T}.actions[1].capability", "unknown key (allowed: id, wait)"),
        (f"{T}.actions[1].version", "unknown key (allowed: id, wait)"),
        (f"{W}.retries", "unknown key (allowed: event, payloadSchema, timeoutSeconds, onTimeout)"),
    ]


def test_every_missing_part_is_named():
    def change(d):
        d["transitions"][0]["actions"][1]["wait"] = {}

    assert problems_after(change) == [
        (f"{W}.event", "is required"),
        (f"{W}.payloadSchema", "is required"),
        (f"{W}.timeoutSeconds", "is required"),
    ]


@pytest.mark.parametrize(
    ("seconds", "message"),
    [
        (0, "must be between 1 and 7776000 seconds (90 days)"),
        (MAX_WAIT_SECONDS + 1, "must be between 1 and 7776000 seconds (90 days)"),
        (1.5, "must be an integer, not a number"),
        ("60", "must be an integer, not a string"),
        (True, "must be an integer, not a boolean"),
    ],
)
def test_a_timeout_out_of_range_is_refused(seconds, message):
    assert problems_after(lambda d: wait(d).update(timeoutSeconds=seconds)) == [
        (f"{W}.timeoutSeconds", message)
    ]


@pytest.mark.parametrize("event", ["", " spaced", ".dot", 7])
def test_a_bad_event_name_is_refused(event):
    found = problems_after(lambda d: wait(d).update(event=event))
    assert [path for path, _ in found] == [f"{W}.event"]


def test_an_invalid_payload_schema_is_refused_with_its_path_and_nothing_else():
    def change(d):
        wait(d)["payloadSchema"] = {"type": "object", "properties": {"approved": {"type": 5}}}

    found = problems_after(change)
    assert found[0][0] == f"{W}.payloadSchema.properties.approved.type"
    # With the schema unusable, the payload and the pointers are not judged against it.
    assert all(path.startswith(f"{W}.payloadSchema") for path, _ in found)


@pytest.mark.parametrize(
    ("ref", "message"),
    [
        ("https://example.com/s.json", "is not a local reference (#...) inside payloadSchema"),
        ("#/$defs/missing", "does not resolve inside payloadSchema"),
    ],
)
def test_a_payload_schema_must_be_self_contained(ref, message):
    def change(d):
        wait(d)["payloadSchema"] = {"$ref": ref}

    (found,) = problems_after(change)
    assert found == (f"{W}.payloadSchema['$ref']", f"{ref!r} {message}")


def test_an_on_timeout_payload_invalid_against_the_schema_is_refused_with_paths():
    def change(d):
        wait(d)["onTimeout"] = {"payload": {"approved": "no", "comment": 3}}

    assert problems_after(change) == [
        (f"{W}.onTimeout.payload.approved", "'no' is not of type 'boolean'"),
        (f"{W}.onTimeout.payload.comment", "3 is not of type 'string'"),
    ]


def test_an_on_timeout_payload_missing_a_required_field_is_refused():
    def change(d):
        wait(d)["onTimeout"] = {"payload": {}}

    assert problems_after(change) == [
        (f"{W}.onTimeout.payload", "'approved' is a required property")
    ]


@pytest.mark.parametrize(
    ("on_timeout", "path", "message"),
    [
        ({}, f"{W}.onTimeout.payload", "is required"),
        ({"payload": [1]}, f"{W}.onTimeout.payload", "must be a JSON object, not an array"),
        (
            {"payload": {"approved": True}, "after": 3},
            f"{W}.onTimeout.after",
            "unknown key (allowed: payload)",
        ),
    ],
)
def test_a_malformed_on_timeout_is_refused(on_timeout, path, message):
    assert problems_after(lambda d: wait(d).update(onTimeout=on_timeout)) == [(path, message)]


@pytest.mark.parametrize(
    ("where", "pointer", "cannot"),
    [
        ("rule", "/actions/approval/approvedd", "/approvedd"),
        ("update", "/actions/approval/approver/email", "/approver/email"),
        ("input", "/actions/approval/approved/deep", "/approved/deep"),
        ("update", "/actions/approval/tags/3", "/tags/3"),
        ("update", "/actions/approval/tags/first", "/tags/first"),
    ],
)
def test_a_pointer_the_payload_schema_cannot_produce_is_refused(where, pointer, cannot):
    paths = {
        "rule": f"{T}.decision.rules[0].when.eq[0].from",
        "update": f"{T}.updates[0].from",
        "input": f"{T}.actions[2].input.approvedBy.from",
    }

    def change(d):
        transition = d["transitions"][0]
        if where == "rule":
            transition["decision"]["rules"][0]["when"]["eq"][0]["from"] = pointer
        elif where == "update":
            transition["updates"][0]["from"] = pointer
        else:
            transition["actions"][2]["input"]["approvedBy"]["from"] = pointer

    assert problems_after(change) == [
        (
            paths[where],
            f"the payloadSchema of wait action 'approval' cannot produce {cannot}",
        )
    ]


def test_an_open_payload_schema_lets_any_pointer_through():
    def change(d):
        wait(d)["payloadSchema"] = {"type": "object"}
        wait(d)["onTimeout"] = {"payload": {}}

    assert problems_after(change) == []


def test_a_wait_action_is_read_only_by_later_actions():
    def change(d):
        actions = d["transitions"][0]["actions"]
        actions[0]["input"] = {"early": {"from": "/actions/approval/approved"}}

    assert problems_after(change) == [
        (
            f"{T}.actions[0].input.early.from",
            "action 'approval' is not one of the earlier actions of this transition",
        )
    ]


def test_a_wait_action_id_must_be_unique():
    def change(d):
        d["transitions"][0]["actions"][2]["id"] = "approval"

    assert (f"{T}.actions[2].id", "duplicate action id 'approval'") in problems_after(change)


@pytest.mark.parametrize(
    ("schema", "tokens", "expected"),
    [
        (False, ["a"], "anything"),
        ({"type": "string"}, ["a"], "/a"),
        ({"type": ["object", "null"], "additionalProperties": False}, ["a"], "/a"),
        ({"type": "object", "properties": {"a": False}}, ["a"], "/a"),
        ({"type": "array", "maxItems": 2}, ["2"], "/2"),
        ({"type": "array", "prefixItems": [{"type": "integer"}]}, ["0", "x"], "/0/x"),
        ({"type": "array"}, ["01"], "/01"),
        ({"anyOf": [{"type": "string"}]}, ["a"], None),
        ({"$ref": "#/$defs/x"}, ["a"], None),
        (
            {"type": "object", "patternProperties": {"^a": {}}, "additionalProperties": False},
            ["ab"],
            None,
        ),
        ({"enum": [{"a": 1}]}, ["a"], None),
        ({}, ["a", "b", "0"], None),
        ({"type": ["object", "array"], "properties": {"0": {}}}, ["0"], None),
    ],
)
def test_unproducible__decides_only_the_plain_cases(schema, tokens, expected):
    assert unproducible(schema, tokens) == expected


def test_wait__payload_schema_pattern_re2_cannot_compile_is_refused_with_its_path():
    flow = definition()
    wait = flow["transitions"][0]["actions"][1]["wait"]
    wait["payloadSchema"]["properties"]["comment"]["pattern"] = "^(?<!x)y"
    problems = validate_definition(flow)
    assert [p.path for p in problems] == [f"{W}.payloadSchema.properties.comment.pattern"]
    assert "linear-time engine (RE2)" in problems[0].message


def test_wait__payload_pattern_is_checked_in_linear_time():
    schema = {"type": "object", "properties": {"comment": {"pattern": "^(a+)+$"}}}
    started = time.perf_counter()
    problems = payload_problems(schema, {"comment": "a" * 10_000 + "!"})
    assert time.perf_counter() - started < 0.050  # seconds
    assert [p.path for p in problems] == ["$.comment"]
