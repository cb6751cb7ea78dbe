"""Schemas with bounded cost (ADR 26): a schema that fans out through `$ref` and `anyOf` is refused
at publication with the path of the part where it fans out; a schema admitted, or one stored
before the check, validates one document within MAX_VALIDATION_STEPS; realistic and tree-shaped
schemas still publish. The bomb of the report took 17 s per request at 5 levels."""

import json
import time
from pathlib import Path

import pytest

from executions.flows.payloads import payload_problems
from executions.flows.publication import DataError, validate_data, validate_definition
from orquestador import errors, schemacost, schemas

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
LIMIT = f"more than {schemacost.MAX_SCHEMA_COST} steps"
# Hang guards, not speed targets (the bound itself is counted in steps, which no load moves):
# the budget of 1,000,000 steps runs in about 1 to 2 s, the unbounded bomb ran for minutes, and a
# loaded two-core CI machine runs several times slower than a quiet one.
VALIDATION_SECONDS = 30.0
CHECK_SECONDS = 10.0  # the publication check of one schema, at any depth of the bomb (~1 ms)
UNIQUE_SECONDS = 20.0  # 20,000 distinct objects (pairwise, 8,000 took 75 s; linear, ~0.1 s)


def bomb(depth: int) -> dict:
    """`l_i = {"anyOf": [{"$ref": "#/$defs/l_{i-1}"}] x 10}`: 10**depth ways to fail."""
    defs: dict = {"l_0": {"type": "string"}}
    for level in range(1, depth + 1):
        defs[f"l_{level}"] = {"anyOf": [{"$ref": f"#/$defs/l_{level - 1}"} for _ in range(10)]}
    return {"$defs": defs, "$ref": f"#/$defs/l_{depth}"}


def bomb_of_items(depth: int) -> dict:
    """The bomb applied to every item of an array: each item of a document one more value."""
    return {"$defs": bomb(depth)["$defs"], "type": "array", "items": {"$ref": f"#/$defs/l_{depth}"}}


TREE = {
    "$defs": {
        "node": {
            "type": "object",
            "required": ["name"],
            "properties": {
                "name": {"type": "string", "maxLength": 100},
                "children": {"type": "array", "items": {"$ref": "#/$defs/node"}},
            },
            "additionalProperties": False,
        }
    },
    "$ref": "#/$defs/node",
}


def flow(data_schema: dict, payload_schema: dict | None = None) -> dict:
    actions = []
    if payload_schema is not None:
        actions = [
            {
                "id": "signed",
                "wait": {"event": "signed", "payloadSchema": payload_schema, "timeoutSeconds": 60},
            }
        ]
    return {
        "key": "costs",
        "version": 1,
        "initialState": "DRAFT",
        "states": ["DRAFT", "DONE"],
        "dataSchema": data_schema,
        "transitions": [
            {
                "id": "go",
                "from": ["DRAFT"],
                "actions": actions,
                "decision": {
                    "hitPolicy": "FIRST",
                    "rules": [{"id": "r", "when": True, "target": "DONE", "outcome": "OK"}],
                },
            }
        ],
    }


def problems_of(definition: dict) -> list[tuple[str, str]]:
    return [(p.path, p.message) for p in validate_definition(definition)]


def timed(call) -> tuple[float, object]:
    started = time.perf_counter()
    try:
        result = call()
    except DataError as exc:
        result = exc
    return time.perf_counter() - started, result


@pytest.mark.parametrize("depth", range(3, 31))
def test_the_fan_out_bomb_is_refused_at_publication_at_every_depth(depth):
    seconds, found = timed(lambda: problems_of(flow(bomb(depth))))
    # The part named is the first level whose ten branches add up past the bound.
    assert found == [("$.dataSchema['$defs'].l_3", found[0][1])]
    assert LIMIT in found[0][1] and "too many alternatives, references" in found[0][1]
    assert seconds < CHECK_SECONDS


@pytest.mark.parametrize("depth", [3, 6, 30])
def test_the_bomb_in_a_wait_payload_schema_is_refused_with_its_path(depth):
    found = problems_of(flow({"type": "object"}, payload_schema=bomb(depth)))
    where = "$.transitions[0].actions[0].wait.payloadSchema['$defs'].l_3"
    assert [path for path, _ in found] == [where]
    assert LIMIT in found[0][1]


def test_the_worst_admitted_bomb_validates_a_worst_case_document_within_the_budget():
    """Two levels are admitted (1,442 steps per value); every item of a 256 KiB array of
    numbers is a value where all 100 branches fail: 300 million steps unbounded, minutes."""
    schema = bomb_of_items(2)
    assert problems_of(flow(schema)) == []
    document = [0] * (errors.MAX_DATA_BYTES // 2 - 1)
    seconds, refused = timed(lambda: validate_data({"dataSchema": schema}, document))
    print(
        f"\nworst admitted schema ({bomb_of_items.__name__}(2)), {len(document)} failing items: "
        f"refused after {schemas.MAX_VALIDATION_STEPS} steps in {seconds:.2f} s"
    )
    assert isinstance(refused, DataError) and refused.code == errors.DATA_INVALID
    assert refused.detail.startswith("$: validating it against the dataSchema would take more than")
    assert seconds < VALIDATION_SECONDS
    # One value is cheap and answered as usual: the budget refuses only the costly document.
    seconds, refused = timed(lambda: validate_data({"dataSchema": schema}, [0]))
    assert isinstance(refused, DataError) and "is not valid under any" in str(refused)
    assert seconds < CHECK_SECONDS


@pytest.mark.parametrize("depth", [4, 6, 30])
def test_a_bomb_stored_before_the_check_is_still_bounded(depth):
    """A flow published before this check (or written to the database) validates within the
    budget, for requests and for wait payloads alike."""
    seconds, refused = timed(lambda: validate_data({"dataSchema": bomb(depth)}, 5))
    assert isinstance(refused, DataError) and refused.code == errors.DATA_INVALID
    assert seconds < VALIDATION_SECONDS
    if depth > 4:
        assert "would take more than 1000000 steps" in str(refused)
    started = time.perf_counter()
    found = payload_problems(bomb(depth), 5)
    assert time.perf_counter() - started < VALIDATION_SECONDS
    if depth > 4:
        assert [p.path for p in found] == ["$"]
        assert "validating it against the payloadSchema would take more" in found[0].message


def test_a_tree_shaped_schema_publishes_and_validates_the_deepest_document():
    assert problems_of(flow(TREE)) == []
    node: dict = {"name": "leaf"}
    for level in range(49):  # 99 levels of objects and arrays, the most a body may nest
        node = {"name": f"n{level}", "children": [node, {"name": "x"}]}
    validate_data({"dataSchema": TREE}, node)
    node["children"][1]["name"] = 7
    with pytest.raises(DataError, match=r"children\[1\]\.name: 7 is not of type 'string'"):
        validate_data({"dataSchema": TREE}, node)


def test_recursion_that_fans_out_at_every_level_is_refused():
    """Two branches recursing into the items: 2**depth ways at depth `depth` of a document."""
    schema = {"anyOf": [{"items": {"$ref": "#"}}, {"items": {"$ref": "#"}, "minItems": 1}]}
    found = problems_of(flow(schema))
    assert [path for path, _ in found] == ["$.dataSchema"]
    assert LIMIT in found[0][1]


@pytest.mark.parametrize(
    ("schema", "where"),
    [
        ({"$ref": "#"}, "$.dataSchema['$ref']"),
        (
            {
                "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"anyOf": [{"$ref": "#/$defs/a"}]}},
                "properties": {"x": {"$ref": "#/$defs/a"}},
            },
            "$.dataSchema['$defs'].b.anyOf[0]['$ref']",
        ),
    ],
)
def test_a_ref_cycle_that_never_descends_is_refused(schema, where):
    assert problems_of(flow(schema)) == [
        (
            where,
            "is a $ref cycle that never descends into the document: validating would follow it "
            "forever",
        )
    ]


def test_nested_unevaluated_properties_count_their_second_walk():
    """jsonschema evaluates what an `unevaluatedProperties` schema's parts evaluated once more:
    thirty nested levels double thirty times without any fan-out in sight."""
    schema: dict = {"type": "object"}
    for _ in range(30):
        schema = {"anyOf": [schema], "unevaluatedProperties": False}
    found = problems_of(flow(schema))
    assert len(found) == 1 and LIMIT in found[0][1]
    assert found[0][0].startswith("$.dataSchema.anyOf[0]")


@pytest.mark.parametrize("name", sorted(p.stem for p in EXAMPLES.glob("*.json")))
def test_the_examples_schemas_publish(name):
    assert problems_of(json.loads((EXAMPLES / f"{name}.json").read_text())) == []


def test_realistic_large_schemas_publish():
    """Hundreds of properties, an enum of thousands of codes, a choice of shapes: within bound."""
    line = {
        "type": "object",
        "required": ["sku", "quantity"],
        "properties": {
            "sku": {"type": "string", "pattern": "^[A-Z0-9-]{3,32}$"},
            "quantity": {"type": "integer", "minimum": 1},
            "currency": {"enum": [f"C{i:04d}" for i in range(3000)]},
        },
    }
    schema = {
        "type": "object",
        "properties": {f"field{i}": {"type": "string", "maxLength": 200} for i in range(300)}
        | {
            "lines": {"type": "array", "items": line, "maxItems": 1000},
            "party": {
                "oneOf": [
                    {
                        "type": "object",
                        "properties": {f"p{i}": {"type": "string"} for i in range(40)},
                    }
                    for _ in range(8)
                ]
            },
        },
    }
    assert problems_of(flow(schema)) == []


def test_unique_items_is_linear_and_keeps_json_equality():
    schema = {"type": "array", "uniqueItems": True}
    distinct = [{"a": i} for i in range(20_000)]  # 8,000 took 75 s before
    seconds, refused = timed(lambda: validate_data({"dataSchema": schema}, distinct))
    assert refused is None and seconds < UNIQUE_SECONDS
    for same in (
        [1, 1.0],
        [{"a": 1, "b": 2}, {"b": 2, "a": 1}],
        [[1, {"x": None}], [1, {"x": None}]],
    ):
        with pytest.raises(DataError, match="has non-unique elements"):
            validate_data({"dataSchema": schema}, same)
    for different in ([1, True], [0, False], [[1], [True]], [{"a": 1}, {"a": "1"}], ["1", 1]):
        validate_data({"dataSchema": schema}, different)
