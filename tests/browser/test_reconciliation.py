"""An operator settles a case in a real browser: logs in to the admin, opens the case the worker
handed over, asks the provider, resolves with a written reason, and the request moves on."""

import pytest
from selenium.common.exceptions import WebDriverException
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support import expected_conditions as ec
from selenium.webdriver.support.ui import WebDriverWait

from executions.models import AuditEvent, AuditType
from tests.integration.reconciliation.worker import (
    CHARGES,
    accept_charge,
    charged,
    registry_from,
    request_of,
    runworker,
    wait_for_finish,
    wait_for_reconciliation,
    write_catalog,
)
from tests.support.providers import JsonProvider, drop

from .conftest import WAIT_SECONDS

pytestmark = [pytest.mark.browser, pytest.mark.process, pytest.mark.django_db(transaction=True)]

REASON = "Provider lookup by key found no charge; the dropped call never arrived."


def navigate(browser, wait: WebDriverWait, element: WebElement) -> None:
    """Click `element` and wait until the page it loads has replaced the current one.

    Waiting on the new page's content alone can read an element of the old page while it is
    being torn down; waiting for the old document to go stale first makes each step start on
    the page it expects.
    """
    page = browser.find_element(By.TAG_NAME, "html")
    element.click()
    wait.until(lambda _: _detached(page))


def _detached(element: WebElement) -> bool:
    # Chromium reports a node of a replaced document either as a stale element or as a node that
    # "does not belong to the document"; both mean the page was replaced.
    try:
        element.is_enabled()
    except WebDriverException:
        return True
    return False


def test_operator_resolves_a_case_in_the_browser_and_the_request_moves_on(
    browser, live_server, operator, process_env, tmp_path
):
    # A read that races a page being replaced can raise any WebDriverException; a wait retries
    # until its condition holds or the deadline passes, so only the deadline fails the test.
    wait = WebDriverWait(browser, WAIT_SECONDS, ignored_exceptions=(WebDriverException,))
    with JsonProvider(respond=charged) as provider:
        catalog = write_catalog(tmp_path, provider)
        provider.plan(CHARGES, drop(apply=False))
        execution = accept_charge()
        log = tmp_path / "worker.log"
        with registry_from(catalog), runworker(process_env, catalog, log) as worker:
            wait_for_reconciliation(execution, worker, log)

            # Log in to the admin and open the queue.
            browser.get(f"{live_server.url}/admin/login/?next=/admin/reconciliation/")
            browser.find_element(By.ID, "id_username").send_keys("olga")
            browser.find_element(By.ID, "id_password").send_keys("pw-olga")
            navigate(browser, wait, browser.find_element(By.CSS_SELECTOR, "input[type=submit]"))
            queue = wait.until(ec.element_to_be_clickable((By.LINK_TEXT, "Reconciliation cases")))
            navigate(browser, wait, queue)

            # The case is in the queue; open it and read the evidence.
            case = wait.until(ec.element_to_be_clickable((By.LINK_TEXT, str(execution.pk))))
            navigate(browser, wait, case)
            wait.until(ec.text_to_be_present_in_element((By.ID, "case-status"), "RECONCILIATION"))
            row = browser.find_element(By.ID, "checkpoint-charge").text
            assert f"{execution.pk}:charge" in row and "NON_IDEMPOTENT_WRITE" in row

            # Ask the provider; its answer is stored as evidence and shown.
            navigate(browser, wait, browser.find_element(By.ID, "lookup-charge"))
            wait.until(
                ec.text_to_be_present_in_element(
                    (By.ID, "case-lookups"), "the write did not happen"
                )
            )

            # Resolve: the write did not happen, with a reason.
            browser.find_element(By.ID, "not_happened_reason").send_keys(REASON)
            navigate(browser, wait, browser.find_element(By.ID, "submit-not-happened"))
            wait.until(
                ec.text_to_be_present_in_element((By.CSS_SELECTOR, ".messagelist"), "resolved 1")
            )

            # The worker replays the charge once and the request moves on.
            assert wait_for_finish(execution, worker, log) == "SUCCEEDED", log.read_text()
            page = browser.find_element(By.TAG_NAME, "html")
            browser.refresh()
            wait.until(lambda _: _detached(page))
            wait.until(ec.text_to_be_present_in_element((By.ID, "request-state"), "CHARGED"))
            assert browser.find_element(By.ID, "case-status").text == "SUCCEEDED"
            assert "RECONCILIATION_RESOLVED" in browser.find_element(By.ID, "case-timeline").text

    request = request_of(execution)
    assert request.state == "CHARGED" and request.blocked_by_id is None
    resolved = AuditEvent.objects.get(execution=execution, type=AuditType.RECONCILIATION_RESOLVED)
    assert (resolved.actor, resolved.payload["reason"]) == ("olga", REASON)
    assert resolved.payload["evidence"]["lookup"]["happened"] is False
    key = f"{execution.pk}:charge"
    assert [r.headers.get("idempotency-key") for r in provider.requests(CHARGES)] == [key, key]
