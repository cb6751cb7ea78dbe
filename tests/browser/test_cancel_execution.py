"""An operator cancels an execution in a real browser: selects it in the executions list, picks
"Cancel execution", writes the reason, and the request is released."""

import pytest
from selenium.common.exceptions import WebDriverException
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as ec
from selenium.webdriver.support.ui import Select, WebDriverWait

from executions.models import AuditEvent, Execution, ExecutionStatus, Request
from tests.integration.reconciliation.conftest import VIEW
from tests.integration.reconciliation.factories import ExecutionFactory, RequestFactory

from .conftest import POLL_SECONDS, WAIT_SECONDS
from .test_reconciliation import navigate

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

REASON = "The customer withdrew the quote by phone."


def test_operator_cancels_an_execution_in_the_browser(browser, live_server, make_user):
    wait = WebDriverWait(
        browser, WAIT_SECONDS, POLL_SECONDS, ignored_exceptions=(WebDriverException,)
    )
    make_user("carla", *VIEW, "cancel_execution")
    request = RequestFactory()
    execution = ExecutionFactory(
        request=request, status=ExecutionStatus.SUSPENDED, error_code=None, fencing_token=4
    )
    request.blocked_by = execution
    request.save(update_fields=["blocked_by"])

    browser.get(f"{live_server.url}/admin/login/?next=/admin/executions/execution/")
    browser.find_element(By.ID, "id_username").send_keys("carla")
    browser.find_element(By.ID, "id_password").send_keys("pw-carla")
    navigate(browser, wait, browser.find_element(By.CSS_SELECTOR, "input[type=submit]"))

    # Select the execution and the action.
    box = wait.until(
        ec.element_to_be_clickable(
            (By.CSS_SELECTOR, f"input[name=_selected_action][value='{execution.pk}']")
        )
    )
    box.click()
    Select(browser.find_element(By.NAME, "action")).select_by_visible_text("Cancel execution")
    navigate(browser, wait, browser.find_element(By.NAME, "index"))

    # The reason page lists it; submitting without a reason is refused and changes nothing.
    wait.until(ec.text_to_be_present_in_element((By.ID, "cancel-executions"), str(execution.pk)))
    browser.execute_script("document.getElementById('id_reason').removeAttribute('required')")
    form = browser.find_element(By.ID, "cancel-form")
    navigate(browser, wait, form.find_element(By.CSS_SELECTOR, "input[type=submit]"))
    wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, ".errorlist")))
    assert Execution.objects.get(pk=execution.pk).status == ExecutionStatus.SUSPENDED

    browser.find_element(By.ID, "id_reason").send_keys(REASON)
    form = browser.find_element(By.ID, "cancel-form")
    navigate(browser, wait, form.find_element(By.CSS_SELECTOR, "input[type=submit]"))
    wait.until(ec.text_to_be_present_in_element((By.CSS_SELECTOR, ".messagelist"), "Cancelled 1"))

    execution.refresh_from_db()
    assert (execution.status, execution.fencing_token) == (ExecutionStatus.CANCELLED, 5)
    assert Request.objects.get(pk=request.pk).blocked_by_id is None
    event = AuditEvent.objects.get(execution=execution, type="EXECUTION_CANCELLED")
    assert (event.actor, event.payload["reason"]) == ("carla", REASON)
