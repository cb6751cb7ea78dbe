import pytest

from executions import pointer
from executions.pointer import MISSING, PointerError


@pytest.mark.parametrize(
    ("text", "tokens"),
    [
        ("", []),
        ("/", [""]),
        ("/a/b", ["a", "b"]),
        ("/a~1b/m~0n", ["a/b", "m~n"]),
        ("/~01", ["~1"]),
        ("/0", ["0"]),
    ],
)
def test_parse__unescapes_tokens(text, tokens):
    assert pointer.parse(text) == tokens


@pytest.mark.parametrize("text", ["a", "a/b", "/a~", "/a~2"])
def test_parse__refuses_malformed(text):
    with pytest.raises(PointerError, match="pointer"):
        pointer.parse(text)


def test_resolve__absent_paths_are_missing():
    doc = {"a": {"b": [1, {"c": None}]}}
    assert pointer.resolve(doc, "/a/b/1/c") is None
    assert pointer.resolve(doc, "/a/b/2") is MISSING
    assert pointer.resolve(doc, "/a/x") is MISSING
    assert pointer.resolve(doc, "/a/b/0/z") is MISSING


def test_set_value__creates_object_parents():
    doc: dict = {}
    pointer.set_value(doc, "/a/b/c", 1)
    assert doc == {"a": {"b": {"c": 1}}}


@pytest.mark.parametrize("text", ["", "/list/-", "/list/2", "/list/01", "/n/x"])
def test_set_value__refuses(text):
    doc = {"list": [1, 2], "n": 3}
    with pytest.raises(PointerError):
        pointer.set_value(doc, text, 0)
    assert doc == {"list": [1, 2], "n": 3}
