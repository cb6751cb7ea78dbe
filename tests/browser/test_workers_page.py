"""The Workers page in headless Chromium at 1400x1000: an operator pauses a route from its own row
(how long and why: the browser asks for both), sees it paused with by whom and why, and resumes
it from the same row without typing anything (the browser blocks nothing)."""

import pytest
from selenium.common.exceptions import WebDriverException
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as ec
from selenium.webdriver.support.ui import WebDriverWait

from tests.integration.reconciliation.conftest import VIEW, charge_registry  # noqa: F401
from tests.support.meteredprovider import route_tables_clear

from .conftest import POLL_SECONDS, WAIT_SECONDS
from .test_reconciliation import navigate

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

ROUTE = "payments.charge@1"
ROW = f"tr.route-row[data-route='{ROUTE}']"


@pytest.fixture(autouse=True)
def _no_routes_left(migration_dsn):
    route_tables_clear(migration_dsn)
    yield
    route_tables_clear(migration_dsn)  # nor left for the next test's metrics or claims


def test_workers_page__pause_and_resume_from_the_route_row(
    browser,
    live_server,
    make_user,
    charge_registry,  # noqa: F811
    screenshots,
):
    wait = WebDriverWait(
        browser, WAIT_SECONDS, POLL_SECONDS, ignored_exceptions=(WebDriverException,)
    )
    make_user("petra", *VIEW, "pause_route")
    browser.get(f"{live_server.url}/admin/login/?next=/admin/reconciliation/workerprocess/")
    browser.find_element(By.ID, "id_username").send_keys("petra")
    browser.find_element(By.ID, "id_password").send_keys("pw-petra")
    navigate(browser, wait, browser.find_element(By.CSS_SELECTOR, "input[type=submit]"))
    row = wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, ROW)))
    assert row.get_attribute("data-paused") == "no"
    headers = browser.find_element(By.CSS_SELECTOR, "#route-limits thead").get_attribute(
        "textContent"
    )
    assert "Most calls at once" in headers and "max_in_flight" not in headers.lower()

    # The browser holds a pause back until it says why; a resume it never holds back.
    valid = "return arguments[0].checkValidity()"
    pause_form = row.find_element(By.CSS_SELECTOR, "form.route-pause-form")
    resume_form = row.find_element(By.CSS_SELECTOR, "form.route-resume-form")
    assert browser.execute_script(valid, pause_form) is False
    assert browser.execute_script(valid, resume_form) is True
    reason = pause_form.find_element(By.CSS_SELECTOR, "input[name=reason]")
    reason.send_keys("provider incident 7")
    assert browser.execute_script(valid, pause_form) is True
    pause = pause_form.find_element(By.CSS_SELECTOR, "button.route-pause")
    navigate(browser, wait, pause)
    row = wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, ROW)))
    screenshots(browser, "paused")
    assert row.get_attribute("data-paused") == "yes"
    paused = row.find_element(By.CSS_SELECTOR, ".paused-until").text
    assert "admin:petra" in paused and "provider incident 7" in paused
    assert "paused until" in browser.find_element(By.CSS_SELECTOR, ".messagelist").text

    # Resume from the same row: nothing to type, nothing blocked.
    navigate(browser, wait, row.find_element(By.CSS_SELECTOR, "button.route-resume"))
    row = wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, ROW)))
    screenshots(browser, "resumed")
    assert row.get_attribute("data-paused") == "no"
    assert f"Route {ROUTE} resumed." in browser.find_element(By.CSS_SELECTOR, ".messagelist").text
