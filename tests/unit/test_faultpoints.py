"""The crash-point hook: armed only under the test settings, and only for a point it knows."""

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from executions.queue import faultpoints


@pytest.fixture(autouse=True)
def fresh():
    faultpoints.armed.cache_clear()
    yield
    faultpoints.armed.cache_clear()


def test_armed__never_under_production_settings_whatever_the_environment(monkeypatch):
    monkeypatch.setenv(faultpoints.POINT_ENV, faultpoints.CLAIM_COMMITTED)
    with override_settings(FAULT_POINTS_ENABLED=False):
        assert faultpoints.armed() is None
        faultpoints.reach(faultpoints.CLAIM_COMMITTED)  # returns: nothing armed


def test_armed__production_settings_fix_the_flag_off():
    from orquestador import settings as production

    assert production.FAULT_POINTS_ENABLED is False


def test_armed__names_the_point_and_action_under_test_settings(monkeypatch):
    monkeypatch.setenv(faultpoints.POINT_ENV, faultpoints.FINAL_COMMITTED)
    monkeypatch.setenv(faultpoints.ACTION_ENV, "charge")
    assert faultpoints.armed() == (faultpoints.FINAL_COMMITTED, "charge")
    faultpoints.reach(faultpoints.FINAL_COMMITTED, ["other"])  # another action: returns
    faultpoints.reach(faultpoints.CLAIM_COMMITTED)  # another point: returns


def test_armed__refuses_an_unknown_point_naming_it(monkeypatch):
    monkeypatch.setenv(faultpoints.POINT_ENV, "after.lunch")
    with pytest.raises(ImproperlyConfigured, match=r"ORQUESTADOR_FAULT_POINT='after\.lunch'"):
        faultpoints.armed()


def test_armed__nothing_named_nothing_armed(monkeypatch):
    monkeypatch.delenv(faultpoints.POINT_ENV, raising=False)
    assert faultpoints.armed() is None
