"""The pictures as an operator sees them in headless Chromium at 1400x1000: a 20-state,
40-transition flow's state machine, a request's state and the transition in flight highlighted
on it, and a real execution's timeline on its case page and its execution page; none of those
pages breaks their Content-Security-Policy (orquestador/csp.py).

Screenshots are kept under tests/browser's ARTEFACTS folder (see README)."""

import pytest
from selenium.common.exceptions import WebDriverException
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as ec
from selenium.webdriver.support.ui import WebDriverWait

from actions.registry import use_registry
from executions.models import Flow
from tests.support.bigflow import big_flow, big_flow_registry
from tests.support.eventful import Eventful
from tests.support.worker import create_flow, enqueue, run_next, runtime_for, unknown

from .conftest import POLL_SECONDS, WAIT_SECONDS, csp_violations
from .test_reconciliation import navigate

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

HIGHLIGHT = "rgb(194, 65, 12)"  # diagram.HIGHLIGHT


def _fits(browser, selector: str) -> dict:
    """How the drawing sits in the window: its rendered scale and whether it fits the width."""
    return browser.execute_script(
        "const svg = document.querySelector(arguments[0]);"
        "const r = svg.getBoundingClientRect();"
        "return {scale: r.width / svg.viewBox.baseVal.width,"
        " fits: r.left >= 0 && r.right <= document.documentElement.clientWidth};",
        selector,
    )


def _show(browser, element_id: str) -> None:
    browser.execute_script(
        "document.getElementById(arguments[0]).scrollIntoView({block: 'center'});", element_id
    )


def test_operator_sees_flows_requests_and_executions_drawn(
    browser, live_server, operator, runtime_conn, runtime_dsn, screenshots
):
    wait = WebDriverWait(
        browser, WAIT_SECONDS, POLL_SECONDS, ignored_exceptions=(WebDriverException,)
    )
    browser.get(f"{live_server.url}/admin/login/?next=/admin/")
    browser.find_element(By.ID, "id_username").send_keys("olga")
    browser.find_element(By.ID, "id_password").send_keys("pw-olga")
    navigate(browser, wait, browser.find_element(By.CSS_SELECTOR, "input[type=submit]"))

    # A big flow, drawn legibly across the page.
    registry = big_flow_registry(overrides={"payments.charge": unknown()})
    with use_registry(registry):
        flow = Flow.objects.get(pk=create_flow(runtime_conn, big_flow()))
        browser.get(f"{live_server.url}/admin/executions/flow/{flow.pk}/change/")
        wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, "#flow-picture svg")))
        screenshots(browser, "flow-picture")
        fit = _fits(browser, "#flow-picture svg")
        assert fit["fits"] and fit["scale"] >= 0.95, fit
        _show(browser, "flow-t10")
        screenshots(browser, "flow-picture-charge")

        # A request whose charge went to reconciliation: its state, the transition and the
        # action in flight are marked.
        accepted = enqueue(runtime_conn, flow.pk, transition_id="charge", state="RESERVED")
        with runtime_for(runtime_dsn, registry) as runtime:
            run_next(runtime_conn, runtime)
        browser.get(f"{live_server.url}/admin/executions/request/{accepted.request_id}/change/")
        wait.until(
            ec.text_to_be_present_in_element(
                (By.ID, "flow-picture-caption"), "In flight: transition charge"
            )
        )
        assert (
            "at action charge (outcome unknown"
            in browser.find_element(By.ID, "flow-picture-caption").text
        )
        reserved = flow.definition["states"].index("RESERVED")
        stroke = browser.execute_script(
            "return getComputedStyle(document.querySelector(arguments[0])).stroke;",
            f"#flow-s{reserved} path",
        )
        assert stroke == HIGHLIGHT
        screenshots(browser, "request-caption")
        _show(browser, f"flow-s{reserved}")
        screenshots(browser, "request-highlighted")

    # A real execution: its timeline on the case page, then on its own page once it ended.
    eventful = Eventful(runtime_conn, runtime_dsn)
    execution = eventful.to_reconciliation()
    browser.get(f"{live_server.url}/admin/reconciliation/reconciliationcase/{execution.pk}/change/")
    wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, "#execution-timeline svg")))
    fit = _fits(browser, "#execution-timeline svg")
    assert fit["fits"] and fit["scale"] == 1, fit
    _show(browser, "execution-timeline")
    screenshots(browser, "case-timeline")

    execution = eventful.resolve_and_finish(operator)
    browser.get(f"{live_server.url}/admin/executions/execution/{execution.pk}/change/")
    wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, "#execution-timeline svg")))
    bars = browser.find_elements(By.CSS_SELECTOR, "#execution-timeline rect.tl-failed")
    assert len(bars) >= 3  # the read's two failed attempts, and the legend's swatch
    assert (
        "no next attempt"
        in browser.find_element(By.CSS_SELECTOR, ".field-next_attempt_at__utc").text
    )
    screenshots(browser, "execution-timeline")

    # Every page above kept the policy; and a script put inline is refused and reported, so the
    # console is where a violation would have shown.
    assert csp_violations(browser) == []
    ran = browser.execute_script(
        "window.inlineRan = false;"
        "const s = document.createElement('script');"
        "s.textContent = 'window.inlineRan = true;';"
        "document.body.appendChild(s);"
        "return window.inlineRan;"
    )
    assert ran is False
    reported = WebDriverWait(browser, WAIT_SECONDS, POLL_SECONDS).until(
        lambda driver: csp_violations(driver)
    )
    assert "script-src 'self'" in reported[0], reported
