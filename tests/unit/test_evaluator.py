"""The pure evaluator of the flow format (docs/flow-format.md): values, conditions, hit policies,
updates."""

import copy

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from executions.flows import evaluator
from executions.flows.evaluator import (
    Decision,
    DecisionError,
    UpdateError,
    apply_updates,
    build_context,
    decide,
    evaluate_condition,
    json_equal,
    resolve_input,
    resolve_value,
)
from orquestador import errors
from tests.support.purity import imported_modules

DATA = {"n": 5, "f": 2.5, "s": "b", "t": True, "z": None, "list": [1, "two"], "obj": {"k": 1}}
OUTPUTS = {"verify": {"verified": True, "size": 10}, "empty": {}}
CTX = build_context(DATA, OUTPUTS)


def transition(policy, rules, updates=None):
    result = {"id": "submit", "decision": {"hitPolicy": policy, "rules": rules}}
    if updates is not None:
        result["updates"] = updates
    return result


def rule(rid, when, target="APPROVED", outcome="APPROVED"):
    return {"id": rid, "when": when, "target": target, "outcome": outcome}


def test_module_is_pure():
    """No I/O, no clock, no ORM: the evaluator imports nothing that could reach them."""
    assert imported_modules(evaluator) <= {"copy", "dataclasses", "typing", "orquestador", "."}


# -- values --------------------------------------------------------------------------------------


def test_build_context():
    assert build_context({"a": 1}, {"x": {}}) == {"data": {"a": 1}, "actions": {"x": {}}}


@pytest.mark.parametrize(
    ("value", "resolved"),
    [
        (3, 3),
        ("text", "text"),
        (None, None),
        ({"from": "/data/n"}, 5),
        ({"from": "/data"}, DATA),
        ({"from": "/actions/verify/verified"}, True),
        ({"from": "/data/list/1"}, "two"),
        ({"from": "/data/absent"}, None),
        ({"from": "/actions/unknown/x"}, None),
        ({"from": "/data/z"}, None),
        # Objects and lists resolve their members; only a lone "from" key is a mapping.
        ({"a": {"from": "/data/n"}, "b": [1, {"from": "/data/s"}]}, {"a": 5, "b": [1, "b"]}),
        ({"from": "x@example.com", "to": "y"}, {"from": "x@example.com", "to": "y"}),
        ([], []),
        ({}, {}),
    ],
)
def test_resolve_value(value, resolved):
    assert resolve_value(value, CTX) == resolved


def test_resolve_input__resolves_every_member_against_earlier_outputs():
    action = {
        "id": "charge",
        "input": {
            "amount": {"from": "/data/n"},
            "verified": {"from": "/actions/verify/verified"},
            "customer": {"id": {"from": "/data/obj/k"}, "tags": ["vip", {"from": "/data/s"}]},
            "currency": "EUR",
            "missing": {"from": "/data/nothing"},
        },
    }
    assert resolve_input(action, CTX) == {
        "amount": 5,
        "verified": True,
        "customer": {"id": 1, "tags": ["vip", "b"]},
        "currency": "EUR",
        "missing": None,
    }


def test_resolve_input__without_input_is_empty():
    assert resolve_input({"id": "a"}, CTX) == {}


# -- conditions ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("condition", "expected"),
    [
        (True, True),
        (False, False),
        # eq / ne: JSON equality
        ({"eq": [{"from": "/data/n"}, 5]}, True),
        ({"eq": [{"from": "/data/n"}, 5.0]}, True),
        ({"eq": [{"from": "/data/n"}, "5"]}, False),
        ({"eq": [{"from": "/data/t"}, 1]}, False),
        ({"eq": [1, True]}, False),
        ({"eq": [0, False]}, False),
        ({"eq": [{"from": "/data/t"}, True]}, True),
        ({"eq": [{"from": "/data/z"}, None]}, True),
        ({"eq": [{"from": "/data/absent"}, None]}, True),  # nothing resolves to null
        ({"eq": [{"from": "/data/obj"}, {"k": 1.0}]}, True),
        ({"eq": [{"from": "/data/obj"}, {"k": True}]}, False),
        ({"eq": [{"from": "/data/list"}, [1, "two"]]}, True),
        ({"eq": [{"from": "/data/list"}, ["two", 1]]}, False),
        ({"eq": [[1], [1, 1]]}, False),
        ({"ne": [{"from": "/data/s"}, "a"]}, True),
        ({"ne": [{"from": "/data/s"}, "b"]}, False),
        ({"ne": [True, 1]}, True),
        # lt / le / gt / ge: two numbers or two strings, else false
        ({"lt": [{"from": "/data/n"}, 6]}, True),
        ({"lt": [{"from": "/data/n"}, 5]}, False),
        ({"le": [{"from": "/data/n"}, 5]}, True),
        ({"gt": [{"from": "/data/f"}, 2]}, True),
        ({"ge": [{"from": "/data/f"}, 2.5]}, True),
        ({"ge": [{"from": "/data/f"}, 3]}, False),
        ({"lt": [{"from": "/data/s"}, "c"]}, True),
        ({"gt": [{"from": "/data/s"}, "a"]}, True),
        ({"lt": ["B", "a"]}, True),  # code point order
        ({"lt": [{"from": "/data/n"}, "6"]}, False),
        ({"ge": ["6", {"from": "/data/n"}]}, False),
        ({"gt": [{"from": "/data/absent"}, 1]}, False),
        ({"le": [{"from": "/data/absent"}, 1]}, False),
        ({"gt": [True, 0]}, False),  # booleans are not numbers
        ({"le": [False, True]}, False),
        ({"lt": [None, 1]}, False),
        ({"lt": [[1], [2]]}, False),
        ({"ge": [{"from": "/data/obj"}, {}]}, False),
        # in
        ({"in": [{"from": "/data/n"}, [1, 5]]}, True),
        ({"in": [{"from": "/data/n"}, [1, 5.0]]}, True),
        ({"in": [{"from": "/data/n"}, [1, 2]]}, False),
        ({"in": [{"from": "/data/t"}, [1]]}, False),
        ({"in": ["two", {"from": "/data/list"}]}, True),
        ({"in": [{"from": "/data/s"}, [{"from": "/data/s"}]]}, True),
        ({"in": ["b", {"from": "/data/s"}]}, False),  # not a list: no substring search
        ({"in": [1, {"from": "/data/absent"}]}, False),
        ({"in": [None, []]}, False),
        # exists
        ({"exists": "/data/n"}, True),
        ({"exists": "/data/z"}, True),  # null is a value
        ({"exists": "/data/absent"}, False),
        ({"exists": "/actions/empty"}, True),
        ({"exists": "/actions/empty/x"}, False),
        ({"exists": "/actions/other"}, False),
        ({"exists": "/data/list/1"}, True),
        ({"exists": "/data/list/2"}, False),
        # all / any / not
        ({"all": [True, {"exists": "/data/n"}]}, True),
        ({"all": [True, False]}, False),
        ({"any": [False, {"eq": [1, 1]}]}, True),
        ({"any": [False, {"exists": "/data/absent"}]}, False),
        ({"not": False}, True),
        ({"not": {"exists": "/data/n"}}, False),
        ({"not": {"not": {"all": [{"any": [False, True]}]}}}, True),
    ],
)
def test_evaluate_condition(condition, expected):
    assert evaluate_condition(condition, CTX) is expected


@pytest.mark.parametrize(
    "condition",
    [None, 1, "true", {}, {"eq": [1, 1], "ne": [1, 2]}, {"between": [1, 2]}],
)
def test_evaluate_condition__malformed_raises_value_error(condition):
    with pytest.raises(ValueError, match="condition"):
        evaluate_condition(condition, CTX)


def test_json_equal__is_symmetric_on_mixed_types():
    pairs = [(1, 1.0), (True, 1), (False, 0), (None, 0), ("1", 1), ([], {}), ({"a": 1}, {"a": 1})]
    for a, b in pairs:
        assert json_equal(a, b) is json_equal(b, a)


# -- hit policies --------------------------------------------------------------------------------


def test_decide__first_takes_the_first_match_in_order():
    rules = [
        rule("no", False, "REJECTED", "NO"),
        rule("ok", {"eq": [{"from": "/actions/verify/verified"}, True]}, "APPROVED", "YES"),
        rule("otherwise", True, "REJECTED", "FALLBACK"),
    ]
    assert decide(transition("FIRST", rules), CTX) == Decision(
        target="APPROVED", outcome="YES", rule_ids=("ok",), hit_policy="FIRST"
    )


def test_decide__first_without_a_match_is_no_match():
    with pytest.raises(DecisionError) as exc:
        decide(transition("FIRST", [rule("a", False), rule("b", {"exists": "/data/x"})]), CTX)
    assert exc.value.code == errors.DECISION_NO_MATCH
    assert exc.value.detail == "no rule matched in transition 'submit'"


def test_decide__unique_with_one_match():
    rules = [rule("small", {"lt": [{"from": "/data/n"}, 10]}, "APPROVED", "OK"), rule("x", False)]
    assert decide(transition("UNIQUE", rules), CTX) == Decision(
        "APPROVED", "OK", ("small",), "UNIQUE"
    )


def test_decide__unique_with_two_matches_is_ambiguous():
    rules = [rule("a", True), rule("b", False), rule("c", {"exists": "/data/n"})]
    with pytest.raises(DecisionError) as exc:
        decide(transition("UNIQUE", rules), CTX)
    assert exc.value.code == errors.DECISION_AMBIGUOUS
    assert "'a', 'c'" in exc.value.detail


def test_decide__unique_without_a_match_is_no_match():
    with pytest.raises(DecisionError) as exc:
        decide(transition("UNIQUE", [rule("a", False)]), CTX)
    assert exc.value.code == errors.DECISION_NO_MATCH


def test_decide__any_with_agreeing_matches_lists_them_all():
    rules = [
        rule("verified", {"exists": "/actions/verify/verified"}, "APPROVED", "OK"),
        rule("never", False, "REJECTED", "NO"),
        rule("small", {"lt": [{"from": "/data/n"}, 10]}, "APPROVED", "OK"),
    ]
    assert decide(transition("ANY", rules), CTX) == Decision(
        "APPROVED", "OK", ("verified", "small"), "ANY"
    )


@pytest.mark.parametrize(
    "second", [("REJECTED", "OK"), ("APPROVED", "OTHER")], ids=["target", "outcome"]
)
def test_decide__any_with_disagreeing_matches_is_ambiguous(second):
    rules = [rule("a", True, "APPROVED", "OK"), rule("b", True, *second)]
    with pytest.raises(DecisionError) as exc:
        decide(transition("ANY", rules), CTX)
    assert exc.value.code == errors.DECISION_AMBIGUOUS
    assert "'a', 'b'" in exc.value.detail


def test_decide__any_without_a_match_is_no_match():
    with pytest.raises(DecisionError) as exc:
        decide(transition("ANY", [rule("a", False)]), CTX)
    assert exc.value.code == errors.DECISION_NO_MATCH


def test_decide__is_deterministic_and_leaves_its_inputs_alone():
    rules = [rule("a", {"in": [{"from": "/data/n"}, [5]]}), rule("b", True)]
    t = transition("ANY", rules)
    before = (copy.deepcopy(t), copy.deepcopy(CTX))
    assert decide(t, CTX) == decide(t, CTX)
    assert (t, CTX) == before


# -- updates -------------------------------------------------------------------------------------


def test_apply_updates__values_and_mappings_into_a_copy():
    data = {"documentId": "d1", "verification": {"old": True}}
    t = transition(
        "FIRST",
        [],
        [
            {"path": "/verification/verified", "from": "/actions/verify/verified"},
            {"path": "/verification/reviewed", "value": True},
            {"path": "/a/b/c", "value": {"nested": [1]}},
            {"path": "/gone", "from": "/actions/verify/absent"},
        ],
    )
    result = apply_updates(t, data, build_context(data, OUTPUTS))
    assert result == {
        "documentId": "d1",
        "verification": {"old": True, "verified": True, "reviewed": True},
        "a": {"b": {"c": {"nested": [1]}}},
        "gone": None,
    }
    assert data == {"documentId": "d1", "verification": {"old": True}}


def test_apply_updates__without_updates_returns_an_equal_copy():
    data = {"a": [1]}
    result = apply_updates({"id": "t"}, data, build_context(data, {}))
    assert result == data
    assert result is not data
    assert result["a"] is not data["a"]


def test_apply_updates__reads_the_snapshot_not_the_copy_being_written():
    data = {"a": 1}
    t = transition("FIRST", [], [{"path": "/a", "value": 2}, {"path": "/b", "from": "/data/a"}])
    assert apply_updates(t, data, build_context(data, {})) == {"a": 2, "b": 1}


def test_apply_updates__later_writes_never_reach_the_context_or_the_definition():
    data = {"src": {"x": 1}}
    outputs = {"act": {"deep": {"y": 1}}}
    t = transition(
        "FIRST",
        [],
        [
            {"path": "/copy", "from": "/data/src"},
            {"path": "/copy/x", "value": 2},
            {"path": "/out", "from": "/actions/act/deep"},
            {"path": "/out/y", "value": 2},
            {"path": "/lit", "value": {"z": 1}},
            {"path": "/lit/z", "value": 2},
        ],
    )
    before = copy.deepcopy((data, outputs, t))
    result = apply_updates(t, data, build_context(data, outputs))
    assert result["copy"] == {"x": 2} and result["out"] == {"y": 2} and result["lit"] == {"z": 2}
    assert (data, outputs, t) == before


def test_apply_updates__existing_array_positions():
    data = {"items": [{"ok": False}, {"ok": False}]}
    t = transition("FIRST", [], [{"path": "/items/1/ok", "value": True}])
    assert apply_updates(t, data, build_context(data, {}))["items"] == [
        {"ok": False},
        {"ok": True},
    ]


@pytest.mark.parametrize(
    ("path", "detail"),
    [
        ("/items/2", "updates[1] (path '/items/2'): index 2 does not exist in the array"),
        ("/items/-", "updates[1] (path '/items/-'): the append token \"-\" is not supported"),
        ("/items/01", "updates[1] (path '/items/01'): \"01\" is not an array index"),
        ("/name/first", "updates[1] (path '/name/first'): cannot write under \"/name\""),
        ("", "updates[1] (path ''): the root cannot be set"),
    ],
)
def test_apply_updates__refused_write_is_data_invalid_naming_index_and_path(path, detail):
    data = {"items": [1, 2], "name": "x"}
    t = transition("FIRST", [], [{"path": "/ok", "value": 1}, {"path": path, "value": 0}])
    with pytest.raises(UpdateError) as exc:
        apply_updates(t, data, build_context(data, {}))
    assert exc.value.code == errors.DATA_INVALID
    assert exc.value.detail.startswith(detail)
    assert data == {"items": [1, 2], "name": "x"}


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=4),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner),
    max_leaves=12,
)
pointers = st.lists(
    st.sampled_from(["a", "b", "0", "1", "-", "01", "x/y", "~"]), min_size=1, max_size=3
).map(lambda tokens: "".join("/" + t.replace("~", "~0").replace("/", "~1") for t in tokens))
updates = st.lists(
    st.fixed_dictionaries({"path": pointers, "value": json_values})
    | st.fixed_dictionaries(
        {"path": pointers, "from": pointers.map(lambda p: "/data" + p) | st.just("/actions/o")}
    ),
    max_size=5,
)
documents = st.dictionaries(st.sampled_from(["a", "b", "0", "x/y"]), json_values, max_size=4)


def _containers(value):
    if isinstance(value, dict | list):
        yield value
        for inner in value.values() if isinstance(value, dict) else value:
            yield from _containers(inner)


@settings(deadline=None)  # timing on a shared machine is not what is tested
@given(documents, json_values, updates)
def test_apply_updates__never_mutates_or_shares_its_inputs(data, output, update_list):
    t = transition("FIRST", [], update_list)
    outputs = {"o": output}
    before = copy.deepcopy((data, outputs, t))
    try:
        result = apply_updates(t, data, build_context(data, outputs))
    except UpdateError as exc:
        assert exc.code == errors.DATA_INVALID
        assert exc.detail.startswith("updates[")
    else:
        # No container of the result is a container of the inputs: mutating the result later
        # (as finalisation may) can never change the snapshot, the outputs or the definition.
        inputs = {id(c) for c in _containers([data, outputs, t])}
        assert not any(id(c) in inputs for c in _containers(result))
    assert (data, outputs, t) == before
