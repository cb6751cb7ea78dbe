"""Declared compensations (docs/flow-format.md#compensation): their shape, the checks that need
the catalog, and the run-time plan with its fallback."""

import copy
from dataclasses import dataclass

import pytest

from actions.base import Binding, Contract, Route
from actions.http_json import HttpJsonAdapter
from actions.registry import Registry
from executions.flows.compensations import (
    CannotCompensate,
    catalog_problems,
    compensated_action,
    compensation_steps,
    step_id,
)
from executions.flows.publication import validate_definition


def definition() -> dict:
    """reserve (undone by release) then charge (undone by refund), opted in."""
    return {
        "key": "shop",
        "version": 1,
        "initialState": "DRAFT",
        "states": ["DRAFT", "PAID"],
        "dataSchema": {"type": "object"},
        "transitions": [
            {
                "id": "place",
                "from": ["DRAFT"],
                "onFailure": "compensate",
                "actions": [
                    {
                        "id": "reserve",
                        "capability": "stock.reserve",
                        "version": 1,
                        "input": {"sku": {"from": "/data/sku"}},
                        "compensate": {
                            "capability": "stock.release",
                            "version": 1,
                            "input": {"reservationId": {"from": "/actions/reserve/id"}},
                        },
                    },
                    {
                        "id": "charge",
                        "capability": "payments.charge",
                        "version": 1,
                        "input": {"amount": {"from": "/data/amount"}},
                        "compensate": {
                            "capability": "payments.refund",
                            "version": 1,
                            "input": {
                                "chargeId": {"from": "/actions/charge/chargeId"},
                                "reservation": {"from": "/actions/reserve/id"},
                            },
                        },
                    },
                ],
                "decision": {
                    "hitPolicy": "FIRST",
                    "rules": [{"id": "ok", "when": True, "target": "PAID", "outcome": "PAID"}],
                },
            }
        ],
    }


def _problems(d: dict) -> list[str]:
    return [str(p) for p in validate_definition(d)]


def test_shape__a_valid_declaration_has_no_problem():
    assert _problems(definition()) == []


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (
            lambda t: t.update(onFailure="retry"),
            "$.transitions[0].onFailure: must be one of 'compensate', 'reconcile'",
        ),
        (
            lambda t: t["actions"][0]["compensate"].update(effect="IDEMPOTENT_WRITE"),
            "$.transitions[0].actions[0].compensate.effect: unknown key",
        ),
        (
            lambda t: t["actions"][0]["compensate"].pop("version"),
            "$.transitions[0].actions[0].compensate.version: is required",
        ),
        (
            lambda t: t["actions"][0]["compensate"]["input"].update(
                x={"from": "/actions/charge/a"}
            ),
            "$.transitions[0].actions[0].compensate.input.x.from: action 'charge' is not one of "
            "the earlier actions of this transition or the action it compensates",
        ),
        (
            lambda t: t["actions"][1].update(compensate="refund"),
            "$.transitions[0].actions[1].compensate: must be",
        ),
    ],
)
def test_shape__problems_are_named_by_their_path(change, expected):
    d = definition()
    change(d["transitions"][0])
    assert any(p.startswith(expected) for p in _problems(d)), _problems(d)


# -- the catalog ------------------------------------------------------------------------------


def _binding(name: str, effect: str, *, lookup: bool = False) -> Binding:
    capability, version = name.split("@")
    options = {"url": "http://127.0.0.1:9/x"}
    if lookup:
        options["lookup_url"] = "http://127.0.0.1:9/x/{key}"
    return Binding(
        contract=Contract(capability=capability, version=int(version), effect=effect),
        route=Route(capability, int(version), "http.json", options),
        adapter=HttpJsonAdapter(),
    )


def _catalog(overrides: dict[str, Binding | None] | None = None) -> Registry:
    bindings = {
        "stock.reserve@1": _binding("stock.reserve@1", "IDEMPOTENT_WRITE"),
        "stock.release@1": _binding("stock.release@1", "IDEMPOTENT_WRITE"),
        "payments.charge@1": _binding("payments.charge@1", "NON_IDEMPOTENT_WRITE", lookup=True),
        "payments.refund@1": _binding("payments.refund@1", "NON_IDEMPOTENT_WRITE", lookup=True),
        "audit.read@1": _binding("audit.read@1", "READ_ONLY"),
    }
    bindings.update(overrides or {})
    return Registry({k: v for k, v in bindings.items() if v is not None})


def test_catalog__a_complete_declaration_passes():
    assert catalog_problems(definition(), _catalog().resolve) == []


def test_catalog__refuses_an_undo_with_no_contract():
    (problem,) = catalog_problems(definition(), _catalog({"stock.release@1": None}).resolve)
    assert str(problem) == (
        "$.transitions[0].actions[0].compensate: the compensation stock.release@1 has no "
        "contract or route in the integrations file"
    )


def test_catalog__refuses_a_non_idempotent_undo_whose_route_has_no_lookup():
    refund = _binding("payments.refund@1", "NON_IDEMPOTENT_WRITE")
    (problem,) = catalog_problems(definition(), _catalog({"payments.refund@1": refund}).resolve)
    assert problem.path == "$.transitions[0].actions[1].compensate"
    assert "NON_IDEMPOTENT_WRITE whose route has no lookup" in problem.message


def test_catalog__refuses_an_opted_in_write_without_an_undo_but_not_a_read():
    d = definition()
    del d["transitions"][0]["actions"][1]["compensate"]
    d["transitions"][0]["actions"].append(
        {"id": "look", "capability": "audit.read", "version": 1, "input": {}}
    )
    (problem,) = catalog_problems(d, _catalog().resolve)
    assert str(problem) == (
        "$.transitions[0].actions[1]: action 'charge' is a NON_IDEMPOTENT_WRITE "
        '(payments.charge@1) with no compensate, in a transition whose onFailure is "compensate"'
    )
    d["transitions"][0]["onFailure"] = "reconcile"
    assert catalog_problems(d, _catalog().resolve) == []


# -- the run-time plan ------------------------------------------------------------------------


@dataclass(frozen=True)
class Record:
    status: str
    effect: str


def test_plan__undoes_the_succeeded_writes_in_reverse_with_their_own_ids():
    transition = definition()["transitions"][0]
    checkpoints = {
        "reserve": Record("SUCCEEDED", "IDEMPOTENT_WRITE"),
        "charge": Record("SUCCEEDED", "NON_IDEMPOTENT_WRITE"),
    }
    steps = compensation_steps(transition, checkpoints, _catalog().resolve)
    assert [(s.action_id, s.undoes, s.sequence) for s in steps] == [
        ("charge:compensate", "charge", 2),
        ("reserve:compensate", "reserve", 3),
    ]
    assert steps[0].action["capability"] == "payments.refund"
    assert compensated_action(step_id("charge")) == "charge"
    assert compensated_action("charge") is None


def test_plan__a_failed_write_is_not_undone():
    transition = definition()["transitions"][0]
    checkpoints = {
        "reserve": Record("SUCCEEDED", "IDEMPOTENT_WRITE"),
        "charge": Record("FAILED", "NON_IDEMPOTENT_WRITE"),
    }
    steps = compensation_steps(transition, checkpoints, _catalog().resolve)
    assert [s.undoes for s in steps] == ["reserve"]


@pytest.mark.parametrize(
    ("checkpoints", "reason"),
    [
        (
            {
                "reserve": Record("SUCCEEDED", "IDEMPOTENT_WRITE"),
                "charge": Record("UNKNOWN", "NON_IDEMPOTENT_WRITE"),
            },
            "action 'charge' is UNKNOWN: uncertain",
        ),
        (
            {
                "reserve": Record("SUCCEEDED", "IDEMPOTENT_WRITE"),
                "charge": Record("RUNNING", "IDEMPOTENT_WRITE"),
            },
            "action 'charge' is RUNNING: uncertain",
        ),
    ],
)
def test_plan__an_uncertain_write_cannot_be_compensated(checkpoints, reason):
    with pytest.raises(CannotCompensate, match=reason):
        compensation_steps(definition()["transitions"][0], checkpoints, _catalog().resolve)


def test_plan__falls_back_when_the_catalog_no_longer_serves_an_undo():
    transition = copy.deepcopy(definition()["transitions"][0])
    checkpoints = {"reserve": Record("SUCCEEDED", "IDEMPOTENT_WRITE")}
    with pytest.raises(CannotCompensate, match=r"stock\.release@1 has no contract"):
        compensation_steps(transition, checkpoints, _catalog({"stock.release@1": None}).resolve)
