"""Compensations checked where the catalog is loaded: `loadflow` with an INTEGRATIONS_FILE, and
the worker's start check over published flows (docs/flow-format.md#compensation)."""

import copy
import io
import json
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.test import override_settings

from actions.registry import build_registry, use_registry
from executions.flows.publication import flows_compensation_problems
from executions.models import Flow

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

pytestmark = pytest.mark.django_db


@pytest.fixture
def demo_catalog(monkeypatch):
    """The example integrations file, configured for this process."""
    monkeypatch.setenv("PAYMENTS_AUTH", "Bearer test")
    with override_settings(INTEGRATIONS_FILE=str(EXAMPLES / "integrations.toml")):
        with use_registry(build_registry()) as registry:
            yield registry


def _loadflow(path: Path) -> str:
    out = io.StringIO()
    call_command("loadflow", str(path), stdout=out)
    return out.getvalue()


def test_loadflow__publishes_the_compensating_example_against_its_catalog(demo_catalog):
    assert _loadflow(EXAMPLES / "checkout.json") == "published checkout@2\n"


def test_loadflow__refuses_an_opted_in_write_without_an_undo(demo_catalog, tmp_path):
    definition = json.loads((EXAMPLES / "checkout.json").read_text())
    del definition["transitions"][0]["actions"][1]["compensate"]
    path = tmp_path / "flow.json"
    path.write_text(json.dumps(definition))
    with pytest.raises(CommandError) as refused:
        _loadflow(path)
    assert (
        "$.transitions[0].actions[1]: action 'charge' is a NON_IDEMPOTENT_WRITE "
        '(payments.charge@1) with no compensate, in a transition whose onFailure is "compensate"'
    ) in str(refused.value)
    assert not Flow.objects.exists()


def test_loadflow__refuses_an_undo_with_no_contract(demo_catalog, tmp_path):
    definition = json.loads((EXAMPLES / "checkout.json").read_text())
    definition["transitions"][0]["actions"][0]["compensate"]["capability"] = "stock.unreserve"
    path = tmp_path / "flow.json"
    path.write_text(json.dumps(definition))
    with pytest.raises(CommandError) as refused:
        _loadflow(path)
    assert "the compensation stock.unreserve@1 has no contract or route" in str(refused.value)


def test_loadflow__without_a_catalog_checks_only_the_shape(tmp_path):
    definition = json.loads((EXAMPLES / "checkout.json").read_text())
    definition["transitions"][0]["actions"][0]["compensate"]["capability"] = "stock.unreserve"
    path = tmp_path / "flow.json"
    path.write_text(json.dumps(definition))
    with override_settings(INTEGRATIONS_FILE=""):
        assert _loadflow(path) == "published checkout@2\n"


def test_start_check__reports_published_flows_the_catalog_cannot_compensate(demo_catalog):
    definition = json.loads((EXAMPLES / "checkout.json").read_text())
    broken = copy.deepcopy(definition)
    broken["version"] = definition["version"] + 1
    broken["transitions"][0]["actions"][0]["compensate"]["capability"] = "stock.unreserve"
    for version in (definition, broken):
        Flow.objects.create(key="checkout", version=version["version"], definition=version)
    assert flows_compensation_problems(resolve=demo_catalog.resolve) == [
        "checkout@3 $.transitions[0].actions[0].compensate: the compensation stock.unreserve@1 "
        "has no contract or route in the integrations file"
    ]
