"""A true/false setting (DEBUG, RECONCILIATION_TWO_PERSON, the *_ENABLED switches, the cookie and
HSTS flags) is validated at start: a value that is neither stops it with the variable's name,
never a silent false."""

import environ
import pytest

from orquestador import settings


@pytest.mark.parametrize(
    ("raw", "expected"),
    [("true", True), ("TRUE", True), ("1", True), ("on", True), ("false", False), ("0", False)],
)
def test_flag__reads_true_and_false(monkeypatch, raw, expected):
    monkeypatch.setenv("RECONCILIATION_TWO_PERSON", raw)
    assert settings._flag("RECONCILIATION_TWO_PERSON", default=False) is expected


def test_flag__unset_is_its_default(monkeypatch):
    monkeypatch.delenv("RECONCILIATION_TWO_PERSON", raising=False)
    assert settings._flag("RECONCILIATION_TWO_PERSON", default=False) is False


@pytest.mark.parametrize("raw", ["maybe", "ture", "2"])
def test_flag__anything_else_names_the_variable(monkeypatch, raw):
    monkeypatch.setenv("RECONCILIATION_TWO_PERSON", raw)
    with pytest.raises(environ.ImproperlyConfigured, match="RECONCILIATION_TWO_PERSON must be"):
        settings._flag("RECONCILIATION_TWO_PERSON", default=False)
