"""A flow's `display.amounts` (docs/flow-format.md#display), checked when it is published: every
refusal named by its JSON path, with its reason."""

import pytest

from executions.flows.publication import validate_definition

from .test_flow_validation import base, example

SCHEMA = {
    "type": "object",
    "properties": {
        "amount": {"type": "integer"},
        "currency": {"type": "string"},
        "note": {"type": "object", "properties": {}, "additionalProperties": False},
    },
}


def with_amounts(*amounts: dict) -> dict:
    return base() | {"dataSchema": SCHEMA, "display": {"amounts": list(amounts)}}


def problems(definition: dict) -> list[tuple[str, str]]:
    return [(p.path, p.message) for p in validate_definition(definition)]


@pytest.mark.parametrize("name", ["order", "checkout"])
def test_the_demos_that_carry_money_declare_their_amounts(name):
    definition = example(name)
    assert {a["path"] for a in definition["display"]["amounts"]} >= {"/amount", "/payment/amount"}
    assert validate_definition(definition) == []


@pytest.mark.parametrize(
    "currency", ["EUR", "JPY", {"from": "/data/currency"}, {"from": "/data/elsewhere/code"}]
)
def test_an_amount_in_a_fixed_currency_or_one_read_from_the_data_is_accepted(currency):
    amount = {"path": "/amount", "currency": currency, "minorUnits": True}
    assert problems(with_amounts(amount, amount | {"path": "/total", "minorUnits": False})) == []


@pytest.mark.parametrize(
    ("amount", "path", "reason"),
    [
        (
            {"path": "amount", "currency": "EUR", "minorUnits": True},
            "$.display.amounts[0].path",
            'must be empty or start with "/"',
        ),
        (
            {"path": "", "currency": "EUR", "minorUnits": True},
            "$.display.amounts[0].path",
            "must point inside the data, not at its root",
        ),
        (
            {"path": "/note/amount", "currency": "EUR", "minorUnits": True},
            "$.display.amounts[0].path",
            "the dataSchema cannot produce /note/amount",
        ),
        (
            {"path": "/amount", "currency": "EUX", "minorUnits": True},
            "$.display.amounts[0].currency",
            "'EUX' is not an ISO 4217 currency code (EUR, USD, JPY)",
        ),
        (
            {"path": "/amount", "currency": "eur", "minorUnits": True},
            "$.display.amounts[0].currency",
            "'eur' is not an ISO 4217 currency code (EUR, USD, JPY)",
        ),
        (
            {"path": "/amount", "currency": 978, "minorUnits": True},
            "$.display.amounts[0].currency",
            'must be a currency code ("EUR") or {"from": POINTER} into the data',
        ),
        (
            {"path": "/amount", "currency": {"from": "/actions/charge/currency"}, "minorUnits": 1},
            "$.display.amounts[0].currency.from",
            "'/actions/charge/currency' must point inside the data (\"/data/...\")",
        ),
        (
            {"path": "/amount", "currency": {"from": "/data/note/code"}, "minorUnits": True},
            "$.display.amounts[0].currency.from",
            "the dataSchema cannot produce /note/code",
        ),
        (
            {"path": "/amount", "currency": "EUR", "minorUnits": "yes"},
            "$.display.amounts[0].minorUnits",
            "must be true (the amount counts the currency's minor units: 2500 is €25.00) or "
            "false (it is written in major units), not a string",
        ),
        (
            {"path": "/amount", "currency": "EUR"},
            "$.display.amounts[0].minorUnits",
            "is required",
        ),
        (
            {"path": "/amount", "currency": "EUR", "minorUnits": True, "locale": "de"},
            "$.display.amounts[0].locale",
            "unknown key (allowed: path, currency, minorUnits)",
        ),
    ],
)
def test_a_wrong_amount_is_refused_with_its_field_and_reason(amount, path, reason):
    assert (path, reason) in problems(with_amounts(amount))


def test_an_amount_declared_twice_is_refused():
    amount = {"path": "/amount", "currency": "EUR", "minorUnits": True}
    assert ("$.display.amounts[1].path", "duplicate amount '/amount'") in problems(
        with_amounts(amount, amount | {"currency": "USD"})
    )


@pytest.mark.parametrize(
    ("shown", "path", "reason"),
    [
        ([], "$.display", "must be an object, not an array"),
        ({"amounts": []}, "$.display.amounts", "must be an array of 1 to 16 amounts"),
        (
            {
                "amounts": [
                    {"path": f"/a{i}", "currency": "EUR", "minorUnits": True} for i in range(17)
                ]
            },
            "$.display.amounts",
            "must be an array of 1 to 16 amounts",
        ),
        ({"colours": {}}, "$.display.colours", "unknown key (allowed: amounts)"),
    ],
)
def test_display_is_an_object_of_amounts(shown, path, reason):
    assert (path, reason) in problems(base() | {"display": shown})
