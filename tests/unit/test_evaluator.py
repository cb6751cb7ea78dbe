import pytest

from executions.evaluator import (
    DecisionError,
    apply_updates,
    build_context,
    decide,
    evaluate_condition,
    resolve_input,
)
from orquestador import errors


def _transition(policy, rules, updates=()):
    return {
        "id": "t",
        "decision": {"hitPolicy": policy, "rules": rules},
        "updates": list(updates),
    }


def _rule(rid, when, target="A", outcome="A"):
    return {"id": rid, "when": when, "target": target, "outcome": outcome}


CTX = build_context({"n": 5, "s": "b"}, {"act": {"ok": True}})


def test_resolve_input__reads_data_and_actions():
    action = {"input": {"n": {"from": "/data/n"}, "ok": {"from": "/actions/act/ok"}, "lit": 3}}
    assert resolve_input(action, CTX) == {"n": 5, "ok": True, "lit": 3}


@pytest.mark.parametrize(
    ("condition", "expected"),
    [
        ({"eq": [{"from": "/data/n"}, 5.0]}, True),
        ({"eq": [True, 1]}, False),
        ({"lt": [{"from": "/data/s"}, "c"]}, True),
        ({"gt": [{"from": "/data/missing"}, 1]}, False),
        ({"in": [{"from": "/data/n"}, [1, 5]]}, True),
        ({"exists": "/actions/act/ok"}, True),
        ({"not": {"exists": "/data/x"}}, True),
    ],
)
def test_evaluate_condition(condition, expected):
    assert evaluate_condition(condition, CTX) is expected


def test_decide__first_unique_any():
    rules = [_rule("a", True), _rule("b", True)]
    assert decide(_transition("FIRST", rules), CTX).rule_ids == ("a",)
    with pytest.raises(DecisionError) as exc:
        decide(_transition("UNIQUE", rules), CTX)
    assert exc.value.code == errors.DECISION_AMBIGUOUS
    assert decide(_transition("ANY", rules), CTX).rule_ids == ("a", "b")
    with pytest.raises(DecisionError) as exc:
        decide(_transition("FIRST", [_rule("a", False)]), CTX)
    assert exc.value.code == errors.DECISION_NO_MATCH


def test_apply_updates__returns_a_new_dict():
    data = {"n": 5}
    transition = _transition(
        "FIRST", [], [{"path": "/v/ok", "from": "/actions/act/ok"}, {"path": "/w", "value": 1}]
    )
    assert apply_updates(transition, data, build_context(data, {"act": {"ok": True}})) == {
        "n": 5,
        "v": {"ok": True},
        "w": 1,
    }
    assert data == {"n": 5}
