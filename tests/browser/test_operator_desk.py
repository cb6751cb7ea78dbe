"""The operator's desk at 1400x1000 in headless Chromium: a refusal said where the page opens, the
risk of a replay in the first screen, a bulk confirmation that shows each case's evidence and
risk, a queue that fits without scrolling sideways with one "By flow" choice per flow key, and a
NUL in a filter answered with a plain 400 page.

The cases are rows as the worker leaves them (tests/integration/reconciliation/factories.py), with
the provider's answers recorded as the lookup records them; the walk with a real worker and a
real provider is test_reconciliation.py. Screenshots go under tests/browser's ARTEFACTS folder.
"""

import pytest
from django.urls import reverse
from selenium.common.exceptions import WebDriverException
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as ec
from selenium.webdriver.support.ui import Select, WebDriverWait

from executions.models import AuditType, Execution, ExecutionStatus
from tests.integration.reconciliation.conftest import charge_registry  # noqa: F401
from tests.integration.reconciliation.factories import FlowFactory, audit, reconciliation_case

from .conftest import POLL_SECONDS, WAIT_SECONDS
from .test_reconciliation import case_page, in_first_screen, log_in, navigate

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("charge_registry"),  # payments.charge@1, its lookup and its schema
]

OUTPUT = {"chargeId": "ch_1", "status": "paid"}
LONG_DETAIL = (
    "action 'charge': the outcome of a NON_IDEMPOTENT_WRITE is unknown after the request was sent "
    "(read timed out after 3 s); the provider may have applied it"
)


def _lookup(case: Execution, *, happened: bool | None) -> None:
    """A provider's answer, recorded as checkpoint_record_lookup records it."""
    audit(
        case.request,
        case,
        AuditType.RECONCILIATION_EVIDENCE,
        actionId="charge",
        happened=happened,
        output=OUTPUT if happened else None,
        outputValid=True if happened else None,
        outputProblems=[],
        detail="",
        operator="olga",
    )


def _wait(browser) -> WebDriverWait:
    return WebDriverWait(
        browser, WAIT_SECONDS, POLL_SECONDS, ignored_exceptions=(WebDriverException,)
    )


def _selector_in_first_screen(browser, selector: str) -> bool:
    """Whether the first element matching `selector` is wholly in the viewport, unscrolled."""
    return browser.execute_script(
        "window.scrollTo(0, 0);"
        "const r = document.querySelector(arguments[0]).getBoundingClientRect();"
        "return r.top >= 0 && r.left >= 0 && r.bottom <= window.innerHeight"
        " && r.right <= window.innerWidth;",
        selector,
    )


def _in_view(browser, element_id: str) -> bool:
    """Whether the element is wholly in the viewport as the page is scrolled now."""
    return browser.execute_script(
        "const r = document.getElementById(arguments[0]).getBoundingClientRect();"
        "return r.top >= 0 && r.bottom <= window.innerHeight;",
        element_id,
    )


def test_case_page__the_refusal_and_the_replay_risk_are_in_the_first_screen(
    browser, live_server, operator, screenshots
):
    wait = _wait(browser)
    case = reconciliation_case()
    _lookup(case, happened=True)
    log_in(browser, wait, live_server, "olga")
    case_page(browser, wait, live_server, case)
    screenshots(browser, "case")
    assert in_first_screen(browser, "case-replay-risk")
    risk = browser.find_element(By.ID, "case-replay-risk").text
    assert "does not deduplicate" in risk and "double charge" in risk
    assert f"{case.pk}:charge" in risk

    # Replaying against the provider's answer without the confirmation is refused, and said at
    # the top of the page it reloads to, not only beside the form far below.
    browser.find_element(By.ID, "not_happened_reason").send_keys("Replay anyway.")
    navigate(browser, wait, browser.find_element(By.ID, "submit-not-happened"))
    wait.until(ec.presence_of_element_located((By.ID, "case-explained")))
    screenshots(browser, "refused")
    # At the case's own address (post/redirect/get): a reload or a copied link opens the case.
    case_url = reverse("admin:reconciliation_reconciliationcase_change", args=[case.pk])
    assert browser.current_url == live_server.url + case_url
    assert _selector_in_first_screen(browser, ".messagelist .error")
    told = browser.find_element(By.CSS_SELECTOR, ".messagelist .error").text
    assert told.startswith("Not done: “The write did not happen” was refused")
    assert "Against the evidence" in told and "Confirm that you choose this all the same" in told
    assert Execution.objects.get(pk=case.pk).status == ExecutionStatus.RECONCILIATION_REQUIRED

    # Its link leads to the form, which kept what was typed.
    browser.find_element(By.ID, "refusal-form-link").click()
    wait.until(lambda _: _in_view(browser, "not_happened_confirm_risk"))
    screenshots(browser, "refused-form")
    reason = browser.find_element(By.ID, "not_happened_reason")
    assert reason.get_attribute("value") == "Replay anyway."
    browser.find_element(By.ID, "not_happened_confirm_risk").click()
    navigate(browser, wait, browser.find_element(By.ID, "submit-not-happened"))
    wait.until(ec.text_to_be_present_in_element((By.CSS_SELECTOR, ".messagelist"), "resolved 1"))
    screenshots(browser, "resolved")
    assert Execution.objects.get(pk=case.pk).status == ExecutionStatus.PENDING
    # The header says who resolved it, how and why.
    assert browser.find_element(By.ID, "resolved-operator").text == "olga"
    assert browser.find_element(By.ID, "resolved-reason").text == "Replay anyway."
    assert browser.current_url == live_server.url + case_url


def test_queue__fits_1400_px_with_one_flow_choice_per_key(
    browser, live_server, operator, screenshots
):
    wait = _wait(browser)
    latest = [FlowFactory(version=version) for version in range(2, 64)][-1]  # a day of use
    cases = [reconciliation_case() for _ in range(3)]
    Execution.objects.filter(pk__in=[c.pk for c in cases]).update(error_detail=LONG_DETAIL)
    Execution.objects.filter(pk=cases[0].pk).update(flow=latest)
    log_in(browser, wait, live_server, "olga")
    browser.get(f"{live_server.url}/admin/reconciliation/reconciliationcase/")
    wait.until(ec.presence_of_element_located((By.ID, "result_list")))
    screenshots(browser, "queue")

    results = browser.find_element(By.CSS_SELECTOR, "#changelist-form .results")
    assert browser.execute_script(
        "return arguments[0].scrollWidth <= arguments[0].clientWidth;", results
    ), "the queue scrolls sideways"
    assert browser.execute_script("return document.documentElement.scrollWidth;") <= 1400
    for cell in browser.find_elements(By.CSS_SELECTOR, "#result_list td.field-created"):
        right = browser.execute_script("return arguments[0].getBoundingClientRect().right;", cell)
        assert right <= browser.execute_script("return window.innerWidth;")
        assert cell.is_displayed()
    whys = browser.find_elements(By.CSS_SELECTOR, "#result_list td.field-why")
    assert len(whys) == 3
    assert all(why.text == f"UNCERTAIN_WRITE: {LONG_DETAIL}" for why in whys)

    flows = browser.find_element(By.CSS_SELECTOR, "details[data-filter-title='flow']")
    assert [a.text for a in flows.find_elements(By.TAG_NAME, "a")] == [
        "All",
        "billing (latest v63)",
    ]
    navigate(browser, wait, flows.find_element(By.LINK_TEXT, "billing (latest v63)"))
    rows = wait.until(
        ec.presence_of_all_elements_located((By.CSS_SELECTOR, "#result_list tbody tr"))
    )
    assert len(rows) == 3  # every version of the flow
    screenshots(browser, "queue-by-flow")


def test_bulk_confirmation__shows_each_cases_evidence_and_risk(
    browser, live_server, operator, screenshots
):
    wait = _wait(browser)
    found, absent, unasked = reconciliation_case(), reconciliation_case(), reconciliation_case()
    _lookup(found, happened=True)
    _lookup(absent, happened=False)
    log_in(browser, wait, live_server, "olga")
    browser.get(f"{live_server.url}/admin/reconciliation/reconciliationcase/")
    wait.until(ec.presence_of_element_located((By.ID, "result_list")))
    for checkbox in browser.find_elements(By.CSS_SELECTOR, "#result_list input.action-select"):
        checkbox.click()
    Select(browser.find_element(By.NAME, "action")).select_by_value("resolve_write_not_happened")
    navigate(browser, wait, browser.find_element(By.NAME, "index"))
    table = wait.until(ec.presence_of_element_located((By.ID, "resolve-plans")))
    screenshots(browser, "confirmation")
    assert table.is_displayed()

    def row(case: Execution) -> str:
        return browser.find_element(By.ID, f"plan-{case.pk}").text

    assert "the provider says the write did not happen" in row(absent)
    assert "asked by olga at" in row(absent) and "will be resolved:" in row(absent)
    assert "does not deduplicate applies the write a second time" in row(absent)
    assert "the provider says the write happened" in row(found) and "skipped:" in row(found)
    assert "not asked yet" in row(unasked) and "skipped:" in row(unasked)

    browser.find_element(By.ID, "id_reason").send_keys("Lookups checked one by one.")
    navigate(
        browser, wait, browser.find_element(By.CSS_SELECTOR, "#content form input[type=submit]")
    )
    wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, ".messagelist")))
    screenshots(browser, "done")
    assert Execution.objects.get(pk=absent.pk).status == ExecutionStatus.PENDING
    assert Execution.objects.get(pk=found.pk).status == ExecutionStatus.RECONCILIATION_REQUIRED


def test_nul_in_a_filter__is_a_plain_400_page(browser, live_server, operator, screenshots):
    wait = _wait(browser)
    log_in(browser, wait, live_server, "olga")
    browser.get(f"{live_server.url}/admin/executions/request/?state=%00")
    page = wait.until(ec.presence_of_element_located((By.ID, "plain-page")))
    screenshots(browser, "nul")
    assert page.get_attribute("data-status") == "400"
    assert "The query parameter “state” holds a NUL character (%00)" in page.text
    navigate(browser, wait, browser.find_element(By.ID, "plain-link"))
    wait.until(ec.presence_of_element_located((By.ID, "changelist")))  # served, with no NUL
