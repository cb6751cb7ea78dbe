import copy
import json
from pathlib import Path

import pytest

from executions.flows import validate_definition

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def example(name: str) -> dict:
    return json.loads((EXAMPLES / f"{name}.json").read_text())


@pytest.mark.parametrize("name", ["onboarding", "documents"])
def test_examples_are_valid(name):
    assert validate_definition(example(name)) == []


def test_pointer_to_a_later_action_is_named_by_path():
    definition = copy.deepcopy(example("documents"))
    definition["transitions"][0]["actions"][0]["input"]["x"] = {"from": "/actions/verify/y"}
    problems = validate_definition(definition)
    assert [p.path for p in problems] == ["$.transitions[0].actions[0].input.x.from"]
