"""`pattern` in every schema runs on RE2: linear time, and patterns it cannot compile refused with
their path. The catastrophic pattern `^(a+)+$` takes seconds on Python's `re` at
thirty characters; here 10,000 characters must validate in under 50 ms."""

import time

import pytest

from executions.flows.checks import DRAFT
from executions.flows.publication import DataError, validate_data, validate_definition
from executions.queue.outputs import output_errors
from orquestador import patterns, schemas

CATASTROPHIC = "^(a+)+$"
HOSTILE = "a" * 10_000 + "!"
BUDGET = 0.050  # seconds for one validation of 10,000 characters


def flow(data_schema: dict) -> dict:
    return {
        "key": "patterns",
        "version": 1,
        "initialState": "DRAFT",
        "states": ["DRAFT", "DONE"],
        "dataSchema": data_schema,
        "transitions": [
            {
                "id": "go",
                "from": ["DRAFT"],
                "actions": [],
                "decision": {
                    "hitPolicy": "FIRST",
                    "rules": [{"id": "r", "when": True, "target": "DONE", "outcome": "OK"}],
                },
            }
        ],
    }


def elapsed(call) -> float:
    started = time.perf_counter()
    call()
    return time.perf_counter() - started


SCHEMAS = {
    "pattern": {
        "type": "object",
        "properties": {"name": {"type": "string", "pattern": CATASTROPHIC}},
    },
    "patternProperties": {
        "type": "object",
        "patternProperties": {CATASTROPHIC: {"type": "integer"}},
    },
    "additionalProperties": {
        "type": "object",
        "patternProperties": {CATASTROPHIC: {}},
        "additionalProperties": False,
    },
}


@pytest.mark.parametrize("schema", SCHEMAS.values(), ids=SCHEMAS.keys())
def test_request_data__catastrophic_pattern_is_linear(schema):
    # Each is invalid, and each makes the engine try the hostile text against the pattern.
    data = {"name": HOSTILE} if "properties" in schema else {HOSTILE: "x", "aaa": "x"}
    definition = flow(schema)
    assert validate_definition(definition) == []
    validate_data(definition, {"name": "aaaa"} if "properties" in schema else {"aaaa": 1})
    with pytest.raises(DataError) as caught:
        validate_data(definition, data)
    assert caught.value.code == "DATA_INVALID"
    best = min(elapsed(lambda: DRAFT(schema).is_valid(data)) for _ in range(3))
    assert best < BUDGET, f"{best * 1000:.1f} ms"


def test_worker_validators__contracts_and_data_schema_are_linear():
    schema = {"type": "object", "properties": {"v": {"pattern": CATASTROPHIC}}}
    for formats in (True, False):
        validator = schemas.validator(schema, formats=formats)
        assert not validator.is_valid({"v": HOSTILE})
        assert elapsed(lambda v=validator: v.is_valid({"v": HOSTILE})) < BUDGET


def test_reconciliation_output_check__is_linear():
    schema = {"type": "object", "properties": {"v": {"pattern": CATASTROPHIC}}}
    started = time.perf_counter()
    problems = output_errors({"v": HOSTILE}, schema)
    assert time.perf_counter() - started < BUDGET
    assert problems and "does not match" in problems[0]


def test_linear_validator__keeps_json_schema_semantics():
    schema = {
        "type": "object",
        "properties": {"code": {"type": "string", "pattern": "^[A-Z]{3}-\\d+$"}},
        "patternProperties": {"^x-": {"type": "string"}},
        "additionalProperties": False,
    }
    validator = DRAFT(schema)
    assert validator.is_valid({"code": "ABC-12", "x-trace": "t"})
    assert not validator.is_valid({"code": "abc-12"})  # pattern
    assert not validator.is_valid({"x-trace": 3})  # patternProperties
    assert not validator.is_valid({"other": 1})  # additionalProperties
    assert DRAFT({"pattern": "b"}).is_valid("abc")  # unanchored search, as JSON Schema says
    assert DRAFT({"pattern": "é+"}).is_valid("café")


@pytest.mark.parametrize(
    ("schema", "path", "fragment"),
    [
        ({"properties": {"a": {"pattern": "(?=x)"}}}, "$.dataSchema.properties.a.pattern", "(?="),
        (
            {"patternProperties": {"(a)\\1": {}}},
            "$.dataSchema.patternProperties['(a)\\\\1']",
            "\\1",
        ),
        (
            {"items": {"anyOf": [{}, {"pattern": "a{1001}"}]}},
            "$.dataSchema.items.anyOf[1].pattern",
            "repetition",
        ),
        (
            {"$defs": {"d": {"pattern": "x" * 1001}}},
            "$.dataSchema['$defs'].d.pattern",
            "longer than",
        ),
        (
            {"unevaluatedProperties": False, "patternProperties": {"^a": {}}},
            "$.dataSchema",
            "unevaluatedProperties together with patternProperties",
        ),
    ],
)
def test_flow_check__refuses_a_pattern_re2_cannot_compile_naming_its_path(schema, path, fragment):
    problems = validate_definition(flow(schema))
    assert [p.path for p in problems] == [path], problems
    assert fragment in problems[0].message
    assert "linear" in problems[0].message or fragment in problems[0].message


def test_pattern_problems__ignores_properties_named_pattern():
    schema = {"properties": {"pattern": {"type": "string"}}, "required": ["pattern"]}
    assert patterns.pattern_problems(schema) == []
