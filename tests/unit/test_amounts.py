"""Amounts shown as money (orquestador/display.py, executions/flows/amounts.py): Babel's format
for the active language, each currency with its own minor units, and anything that is not an
amount shown as it is, never an error."""

import pytest
from django.utils import translation

from executions.flows import amounts
from orquestador import display
from reconciliation import explain

EUR_FROM_DATA = {"path": "/amount", "currency": {"from": "/data/currency"}, "minorUnits": True}
DEFINITION = {
    "caseSummary": ["/customer", "/amount", "/total"],
    "display": {
        "amounts": [EUR_FROM_DATA, {"path": "/total", "currency": "JPY", "minorUnits": False}]
    },
}


@pytest.fixture(autouse=True)
def english():
    with translation.override("en-us"):
        yield


@pytest.mark.parametrize(
    ("amount", "currency", "minor_units", "text"),
    [
        (2500, "EUR", True, "€25.00"),  # cents
        (250000, "EUR", True, "€2,500.00"),
        ("2500", "EUR", True, "€25.00"),  # a decimal string is an amount too
        (2500.0, "EUR", True, "€25.00"),
        (-300, "EUR", True, "-€3.00"),
        (25.5, "EUR", False, "€25.50"),
        (25.505, "EUR", False, "€25.505"),  # never rounded away
        (2500, "JPY", True, "¥2,500"),  # the yen has no minor unit
        (2500, "JPY", False, "¥2,500"),
        (1234567, "USD", True, "$12,345.67"),
        (1000, "BHD", True, "BHD1.000"),  # three digits of fils
    ],
)
def test_money__in_the_currency_s_own_minor_units(amount, currency, minor_units, text):
    assert display.money(amount, currency, minor_units=minor_units) == text


def test_money__follows_the_active_language():
    with translation.override("de"):
        assert display.money(2500, "EUR", minor_units=True) == "25,00\xa0€"


@pytest.mark.parametrize(
    ("amount", "currency", "minor_units"),
    [
        (25.5, "EUR", True),  # half a cent is no count of cents
        ("25 EUR", "EUR", False),
        ("", "EUR", False),
        (True, "EUR", False),
        (None, "EUR", False),
        ({"value": 1}, "EUR", False),
        (2500, "EUX", True),  # no such currency
        (2500, "eur", True),
        (2500, None, True),
        (2500, 978, True),
        (1e300, "EUR", False),  # past what a decimal context holds
        ("1" * 31, "EUR", False),  # no amount of money is written so long
        pytest.param(10**5000, "EUR", True, id="past-the-digits-str-writes"),
    ],
)
def test_money__what_is_not_an_amount_is_none(amount, currency, minor_units):
    assert display.money(amount, currency, minor_units=minor_units) is None


def test_shown__an_amount_in_the_currency_the_data_names_with_its_raw_value():
    data = {"amount": 2500, "currency": "EUR", "total": 2500}
    assert amounts.shown(DEFINITION, data, "/amount", 80) == amounts.Shown("€25.00", "2500")
    assert amounts.shown(DEFINITION, data, "/total", 80) == amounts.Shown("¥2,500", "2500")
    other = data | {"currency": "JPY"}
    assert amounts.shown(DEFINITION, other, "/amount", 80) == amounts.Shown("¥2,500", "2500")


@pytest.mark.parametrize(
    ("data", "text"),
    [
        ({"amount": "lots", "currency": "EUR"}, "lots"),  # not a number
        ({"amount": 2500, "currency": "XYZ"}, "2500"),  # not a currency
        ({"amount": 2500}, "2500"),  # no currency where the flow says it is
        ({"amount": 2500, "currency": ["EUR"]}, "2500"),
        ({"amount": {"cents": 2500}, "currency": "EUR"}, '{"cents": 2500}'),
    ],
)
def test_shown__what_is_not_an_amount_is_shown_raw_not_an_error(data, text):
    assert amounts.shown(DEFINITION, data, "/amount", 80) == amounts.Shown(text)


def test_shown__nothing_there_is_none():
    assert amounts.shown(DEFINITION, {}, "/amount", 80) is None


def test_shown__in_a_template_a_formatted_amount_keeps_its_raw_value_on_hover():
    assert amounts.Shown("€25.00", "2500").__html__() == (
        '<span class="amount" title="2500">€25.00</span>'
    )
    assert amounts.Shown("<b>").__html__() == "&lt;b&gt;"
    assert str(amounts.Shown("€25.00", "2500")) == "€25.00"


def test_summary_fields__amounts_formatted_the_rest_as_before():
    data = {"customer": "cus_ada", "amount": 2500, "currency": "EUR"}
    fields = explain.summary_fields(DEFINITION, data)
    assert fields == [
        ("customer", amounts.Shown("cus_ada")),
        ("amount", amounts.Shown("€25.00", "2500")),
        ("total", amounts.Shown("—")),
    ]
    assert explain.summary_line(fields) == (
        'customer cus_ada · amount <span class="amount" title="2500">€25.00</span> · total —'
    )


def test_amounts__every_declared_amount_the_data_holds():
    data = {"amount": 2500, "currency": "EUR"}
    assert amounts.amounts(DEFINITION, data, 80) == [("amount", amounts.Shown("€25.00", "2500"))]
    assert amounts.amounts({}, data, 80) == []
