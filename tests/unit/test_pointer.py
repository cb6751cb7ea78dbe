"""JSON Pointer (RFC 6901) with the write rules of docs/flow-format.md#updates."""

import copy

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from executions.flows import pointer
from executions.flows.pointer import MISSING, PointerError

scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text()
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=20,
)
documents = st.dictionaries(st.text(max_size=5), json_values, max_size=5)
# Tokens that are interesting to a pointer: escapes, index-like text, the append token.
odd_tokens = st.sampled_from(["", "-", "0", "01", "1", "10", "~", "/", "a/b", "m~n", " "])


def pointer_of(tokens: list[str]) -> str:
    return "".join("/" + pointer.escape(token) for token in tokens)


@st.composite
def paths(draw, doc):
    """A path that mostly follows the document, sometimes wanders off it."""
    tokens: list[str] = []
    node = doc
    for _ in range(draw(st.integers(min_value=1, max_value=4))):
        if isinstance(node, dict) and node and draw(st.booleans()):
            token = draw(st.sampled_from(sorted(node)))
        elif isinstance(node, list) and node and draw(st.booleans()):
            token = str(draw(st.integers(min_value=0, max_value=len(node) - 1)))
        else:
            token = draw(odd_tokens | st.text(max_size=3))
        tokens.append(token)
        node = pointer.resolve(node, pointer_of([token]))
    return tokens


def leaf_paths(node, prefix=()):
    """Every (tokens, value) in `node`, containers included."""
    yield list(prefix), node
    if isinstance(node, dict):
        for key, value in node.items():
            yield from leaf_paths(value, (*prefix, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from leaf_paths(value, (*prefix, str(index)))


# -- parse ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "tokens"),
    [
        ("", []),
        ("/", [""]),
        ("//", ["", ""]),
        ("/a/b", ["a", "b"]),
        ("/a~1b/m~0n", ["a/b", "m~n"]),
        ("/~01", ["~1"]),  # ~0 first, then the 1 stays literal: RFC 6901 §4 order
        ("/~10", ["/0"]),
        ("/0", ["0"]),
        ("/ ", [" "]),
    ],
)
def test_parse__unescapes_tokens(text, tokens):
    assert pointer.parse(text) == tokens


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("a", 'must be empty or start with "/"'),
        ("a/b", 'must be empty or start with "/"'),
        ("/a~", '"~" must be followed by 0 or 1'),
        ("/a~2", '"~" must be followed by 0 or 1'),
        (None, "must be a string"),
        (3, "must be a string"),
    ],
)
def test_parse__refuses_malformed(text, problem):
    with pytest.raises(PointerError) as exc:
        pointer.parse(text)
    assert exc.value.problem.startswith(problem)
    assert repr(text) in str(exc.value) or f'"{text}"' in str(exc.value)


@settings(deadline=None)  # timing on a shared machine is not what is tested
@given(st.lists(st.text(max_size=6) | odd_tokens, max_size=6))
def test_parse__inverts_escape(tokens):
    assert pointer.parse(pointer_of(tokens)) == tokens


# -- resolve -------------------------------------------------------------------------------------


DOC = {"a": {"b": [1, {"c": None}], "": "empty", "x/y": "slash", "m~n": "tilde"}, "0": "zero"}


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("", DOC),
        ("/a/b/0", 1),
        ("/a/b/1/c", None),
        ("/a/", "empty"),
        ("/a/x~1y", "slash"),
        ("/a/m~0n", "tilde"),
        ("/0", "zero"),  # on an object, "0" is a member name
    ],
)
def test_resolve__finds_values(text, value):
    assert pointer.resolve(DOC, text) == value


@pytest.mark.parametrize(
    "text",
    ["/a/b/2", "/a/b/-", "/a/b/01", "/a/b/-1", "/a/b/x", "/a/z", "/a/b/0/z", "/a/b/1/c/d", "/1"],
)
def test_resolve__absent_paths_are_missing(text):
    assert pointer.resolve(DOC, text) is MISSING


def test_missing__is_not_null_and_is_falsy():
    assert MISSING is not None
    assert not MISSING
    assert repr(MISSING) == "MISSING"


# -- set_value -----------------------------------------------------------------------------------


def test_set_value__creates_object_parents():
    doc: dict = {"keep": 1}
    pointer.set_value(doc, "/a/b/c", 1)
    assert doc == {"keep": 1, "a": {"b": {"c": 1}}}


def test_set_value__replaces_existing_array_positions_only():
    doc = {"list": [{"v": 1}, 2]}
    pointer.set_value(doc, "/list/1", "two")
    pointer.set_value(doc, "/list/0/v", "one")
    pointer.set_value(doc, "/list/0/new/deep", True)
    assert doc == {"list": [{"v": "one", "new": {"deep": True}}, "two"]}


def test_set_value__unescapes_member_names():
    doc: dict = {}
    pointer.set_value(doc, "/a~1b/m~0n", 1)
    assert doc == {"a/b": {"m~n": 1}}


def test_set_value__numeric_token_on_an_object_is_a_member_name():
    doc: dict = {"o": {}}
    pointer.set_value(doc, "/o/0", "x")
    pointer.set_value(doc, "/n/01", "y")  # leading zeros only matter for arrays
    assert doc == {"o": {"0": "x"}, "n": {"01": "y"}}


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("", "the root cannot be set"),
        ("/list/-", 'the append token "-" is not supported'),
        ("/obj/-", 'the append token "-" is not supported'),
        ("/list/2", 'index 2 does not exist in the array at "/list" (length 2)'),
        ("/list/5/x", 'index 5 does not exist in the array at "/list"'),
        ("/list/01", '"01" is not an array index at "/list"'),
        ("/list/x", '"x" is not an array index at "/list"'),
        ("/list/-1", '"-1" is not an array index at "/list"'),
        ("/list/+1", '"+1" is not an array index at "/list"'),
        ("/list/1/x", 'cannot write under "/list/1", which is a number'),
        ("/n/x", 'cannot write under "/n", which is a number'),
        ("/s/x/y", 'cannot write under "/s", which is a string'),
        ("/z/x", 'cannot write under "/z", which is null'),
        ("/b/x", 'cannot write under "/b", which is a boolean'),
        ("nope", 'must be empty or start with "/"'),
    ],
)
def test_set_value__refuses_and_leaves_the_document_alone(text, problem):
    doc = {"list": [1, 2], "obj": {}, "n": 3, "s": "t", "z": None, "b": False}
    before = copy.deepcopy(doc)
    with pytest.raises(PointerError) as exc:
        pointer.set_value(doc, text, 0)
    assert problem in exc.value.problem
    assert doc == before


def test_set_value__works_on_an_array_root_and_refuses_a_scalar_root():
    doc = [1]
    pointer.set_value(doc, "/0", {"a": 1})
    assert doc == [{"a": 1}]
    with pytest.raises(PointerError, match="index 1 does not exist in the array at the root"):
        pointer.set_value(doc, "/1", 1)
    with pytest.raises(PointerError, match="cannot write under the root, which is a string"):
        pointer.set_value("text", "/a", 1)


@settings(deadline=None)  # timing on a shared machine is not what is tested
@given(st.data(), documents, json_values)
def test_set_value__then_resolve_returns_the_value(data, doc, value):
    tokens = data.draw(paths(doc))
    before = copy.deepcopy(doc)
    try:
        pointer.set_value(doc, pointer_of(tokens), value)
    except PointerError:
        assert doc == before  # a refused write changes nothing
    else:
        assert pointer.resolve(doc, pointer_of(tokens)) is value


@settings(deadline=None)  # timing on a shared machine is not what is tested
@given(st.data(), documents, json_values)
def test_set_value__leaves_unrelated_paths_unchanged(data, doc, value):
    tokens = data.draw(paths(doc))
    before = copy.deepcopy(doc)
    try:
        pointer.set_value(doc, pointer_of(tokens), value)
    except PointerError:
        return
    for path, old in leaf_paths(before):
        related = path[: len(tokens)] == tokens or tokens[: len(path)] == path
        if not related:
            assert pointer.resolve(doc, pointer_of(path)) == old


@settings(deadline=None)  # timing on a shared machine is not what is tested
@given(documents)
def test_resolve__reaches_every_value_of_a_document(doc):
    for path, value in leaf_paths(doc):
        assert pointer.resolve(doc, pointer_of(path)) == value
