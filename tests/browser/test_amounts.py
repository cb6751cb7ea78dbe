"""Money as an operator reads it, in headless Chromium at 1400x1000: the demo's charge (2500 EUR
cents, examples/order.json) shows as €25.00 on the case page and in the case list, the raw value
on hover (its title), and the request's page lists it; the case list finds it by its customer.
Screenshots go under tests/browser's ARTEFACTS folder."""

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as ec
from selenium.webdriver.support.ui import WebDriverWait

from tests.integration.reconciliation.conftest import charge_registry  # noqa: F401
from tests.integration.reconciliation.test_amounts import ORDER, demo_case

from .conftest import POLL_SECONDS, WAIT_SECONDS
from .test_reconciliation import case_page, log_in

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("charge_registry"),
]


def _amounts(browser, within: str) -> list[tuple[str, str]]:
    return [
        (a.text, a.get_attribute("title"))
        for a in browser.find_elements(By.CSS_SELECTOR, f"{within} .amount")
    ]


def test_the_demo_charge_reads_as_money(browser, live_server, operator, screenshots):
    wait = WebDriverWait(browser, WAIT_SECONDS, POLL_SECONDS)
    paid = ORDER | {"payment": {"chargeId": "ch_1", "amount": 2500, "currency": "EUR"}}
    case = demo_case(paid)
    demo_case(ORDER | {"customer": "cus_bo", "amount": 900})
    log_in(browser, wait, live_server, "olga")

    case_page(browser, wait, live_server, case)
    screenshots(browser, "case")
    assert _amounts(browser, "#case-summary-fields") == [("€25.00", "2500")]

    browser.get(f"{live_server.url}/admin/reconciliation/reconciliationcase/?q=cus_ada")
    wait.until(ec.presence_of_element_located((By.ID, "result_list")))
    screenshots(browser, "case-list-searched")
    assert _amounts(browser, "#result_list") == [("€25.00", "2500")]  # cus_bo's €9.00 not found

    browser.get(f"{live_server.url}/admin/executions/request/{case.request_id}/change/")
    field = wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, ".field-money")))
    browser.execute_script("arguments[0].scrollIntoView()", field)  # below the state machine
    screenshots(browser, "request")
    assert _amounts(browser, ".field-money") == [("€25.00", "2500"), ("€25.00", "2500")]
