"""An operator's walk through the reconciliation admin in a real browser (headless Chromium at
1400x1000), with a real worker and a real provider on loopback: each kind of uncertain write
lands on the desk — the first one a worker SIGKILLed while its charge was in flight — the case
page explains itself within the first screen, the lookup settles what it can, a choice against
the provider's answer needs a second confirmation, each request moves on, a replay whose answer
is lost too comes back about its own attempt with nothing pre-selected (a replay on the earlier
answer is refused) and is settled by asking again, an operator without resolution permissions
sees no resolution control, and under the two-person rule a replay is proposed by one operator
and applied only on another's approval.

Screenshots of every step are kept under tests/browser's ARTEFACTS folder (see README)."""

import os
import signal

import pytest
from selenium.common.exceptions import WebDriverException
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support import expected_conditions as ec
from selenium.webdriver.support.ui import WebDriverWait

from executions.models import AuditEvent, AuditType
from tests.integration.reconciliation.conftest import VIEW
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
from tests.support.providers import JsonProvider, drop, slow, status

from .conftest import POLL_SECONDS, WAIT_SECONDS

pytestmark = [pytest.mark.browser, pytest.mark.process, pytest.mark.django_db(transaction=True)]

REASON = "Provider lookup by key answered; resolved as it says."

# A worker that dies mid-call: a lease short enough that the surviving worker reclaims its
# execution within the walk's waits, long enough for the charge's 3 s timeout (at most half).
DOOMED_WORKER = {"WORKER_LEASE_SECONDS": "8", "WORKER_RENEW_SECONDS": "2"}

# (name, the provider's first answer to the charge, whether it applied the charge)
KINDS = [
    ("dropped-after-applying", drop(apply=True), True),
    ("500-after-applying", status(500, apply=True), True),
    ("500-before-applying", status(500, apply=False), False),
    ("timeout-after-applying", slow(6, apply=True), True),
    ("dropped-before-applying", drop(apply=False), False),
]


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


def in_first_screen(browser, element_id: str) -> bool:
    """Whether the element is wholly inside the viewport of a page that was not scrolled."""
    return browser.execute_script(
        "window.scrollTo(0, 0);"
        "const r = document.getElementById(arguments[0]).getBoundingClientRect();"
        "return r.top >= 0 && r.left >= 0 && r.bottom <= window.innerHeight"
        " && r.right <= window.innerWidth;",
        element_id,
    )


def log_in(browser, wait, live_server, username: str) -> None:
    browser.delete_all_cookies()
    browser.get(f"{live_server.url}/admin/login/?next=/admin/reconciliation/")
    browser.find_element(By.ID, "id_username").send_keys(username)
    browser.find_element(By.ID, "id_password").send_keys(f"pw-{username}")
    navigate(browser, wait, browser.find_element(By.CSS_SELECTOR, "input[type=submit]"))
    wait.until(ec.element_to_be_clickable((By.LINK_TEXT, "Reconciliation cases")))


def case_page(browser, wait, live_server, execution) -> None:
    browser.get(f"{live_server.url}/admin/reconciliation/reconciliationcase/{execution.pk}/change/")
    wait.until(ec.presence_of_element_located((By.ID, "case-explained")))


def crash_in_flight(provider, process_env, catalog, tmp_path):
    """A charge sent by a runworker that is SIGKILLed while the provider holds the call open
    (the provider has applied it): what happened is for an operator to find out."""
    provider.plan(CHARGES, slow(30, apply=True))
    execution = accept_charge(amount=39, customer="cus_crash")
    with runworker({**process_env, **DOOMED_WORKER}, catalog, tmp_path / "doomed.log") as doomed:
        provider.wait_for_calls(1, CHARGES, timeout=WAIT_SECONDS)
        os.kill(doomed.pid, signal.SIGKILL)
        assert doomed.wait(timeout=WAIT_SECONDS) == -signal.SIGKILL
    return execution


def test_operator_walks_every_kind_of_case_in_the_browser(
    browser, live_server, operator, make_user, process_env, tmp_path, screenshots, settings
):
    # A read that races a page being replaced can raise any WebDriverException; a wait retries
    # until its condition holds or the deadline passes, so only the deadline fails the test.
    wait = WebDriverWait(
        browser, WAIT_SECONDS, POLL_SECONDS, ignored_exceptions=(WebDriverException,)
    )
    make_user("victor", *VIEW)  # may read cases, resolve none
    make_user("petra", *VIEW, "resolve_write_not_happened")  # the second of two operators
    with JsonProvider(respond=charged) as provider:
        catalog = write_catalog(tmp_path, provider)
        log = tmp_path / "worker.log"
        with registry_from(catalog):
            crashed = crash_in_flight(provider, process_env, catalog, tmp_path)
        with registry_from(catalog), runworker(process_env, catalog, log) as worker:
            # The surviving worker reclaims the dead one's execution and hands it to a person.
            wait_for_reconciliation(crashed, worker, log)
            log_in(browser, wait, live_server, "olga")
            walk_crash_case(browser, wait, live_server, crashed, screenshots)
            assert wait_for_finish(crashed, worker, log) == "SUCCEEDED", log.read_text()
            sent = [
                r
                for r in provider.requests(CHARGES)
                if r.headers.get("idempotency-key") == f"{crashed.pk}:charge"
            ]
            assert len(sent) == 1  # the charge that happened was never sent again

            for number, (kind, reply, applied) in enumerate(KINDS):
                provider.plan(CHARGES, reply)
                execution = accept_charge(amount=40 + number)
                wait_for_reconciliation(execution, worker, log)
                key = f"{execution.pk}:charge"

                # The case explains itself, and what the operator needs is in the first screen.
                case_page(browser, wait, live_server, execution)
                screenshots(browser, f"{kind}-case")
                for element_id in (
                    "case-why",
                    "case-summary-fields",
                    "case-suggestion",
                    "lookup-charge",
                    "case-replay-risk",
                ):
                    assert in_first_screen(browser, element_id), (kind, element_id)
                summary = browser.find_element(By.ID, "case-summary-fields").text
                assert "cus_ada" in summary and str(40 + number) in summary
                assert "Ask the provider" in browser.find_element(By.ID, "case-suggestion").text

                # Ask the provider: its answer becomes the suggestion.
                navigate(browser, wait, browser.find_element(By.ID, "lookup-charge"))
                expected = "The write happened" if applied else "The write did not happen"
                wait.until(ec.text_to_be_present_in_element((By.ID, "case-suggestion"), expected))
                screenshots(browser, f"{kind}-answered")
                assert in_first_screen(browser, "case-suggestion")

                if number == 0:
                    # Replaying after "happened" needs a second confirmation naming the risk.
                    browser.find_element(By.ID, "not_happened_reason").send_keys("Replay anyway.")
                    navigate(browser, wait, browser.find_element(By.ID, "submit-not-happened"))
                    wait.until(ec.presence_of_element_located((By.ID, "case-explained")))
                    form = browser.find_element(By.ID, "resolve-not-happened").text
                    assert "Confirm that you choose this all the same" in form
                    assert "second charge" in form
                    assert (
                        browser.find_element(By.ID, "not_happened_reason").get_attribute("value")
                        == "Replay anyway."
                    )  # what was typed is kept
                    screenshots(browser, f"{kind}-confirmation-needed")
                    assert request_of(execution).blocked_by_id == execution.pk  # nothing written

                # Follow the suggestion, with a reason.
                which = "happened" if applied else "not_happened"
                browser.find_element(By.ID, f"{which}_reason").send_keys(REASON)
                navigate(
                    browser, wait, browser.find_element(By.ID, f"submit-{which.replace('_', '-')}")
                )
                wait.until(
                    ec.text_to_be_present_in_element(
                        (By.CSS_SELECTOR, ".messagelist"), "resolved 1"
                    )
                )
                assert "olga" in browser.find_element(By.ID, "case-resolved").text
                screenshots(browser, f"{kind}-resolved")

                # The request moves on; a write that happened is never sent again.
                assert wait_for_finish(execution, worker, log) == "SUCCEEDED", log.read_text()
                assert request_of(execution).state == "CHARGED"
                sent = [
                    r for r in provider.requests(CHARGES) if r.headers.get("idempotency-key") == key
                ]
                assert len(sent) == (1 if applied else 2), kind
                resolved = AuditEvent.objects.get(
                    execution=execution, type=AuditType.RECONCILIATION_RESOLVED
                )
                assert resolved.payload["evidence"]["lookup"]["happened"] is applied
                browser.refresh()
                wait.until(ec.text_to_be_present_in_element((By.ID, "case-status"), "SUCCEEDED"))
                screenshots(browser, f"{kind}-succeeded")

            walk_lost_replay(browser, wait, live_server, provider, worker, log, screenshots)

            # An operator without resolution permissions reads the case and sees no control.
            provider.plan(CHARGES, drop(apply=False))
            waiting = accept_charge(amount=99)
            wait_for_reconciliation(waiting, worker, log)

            # The home page shows the desk; the queue tells the open case apart at a glance.
            browser.get(f"{live_server.url}/admin/")
            desk = wait.until(ec.presence_of_element_located((By.ID, "desk-overview"))).text
            assert "Open cases 1" in desk and "payments.charge@1: 1" in desk
            assert "8 by operators" in desk
            screenshots(browser, "home")
            browser.get(f"{live_server.url}/admin/reconciliation/reconciliationcase/")
            row = (
                wait.until(ec.presence_of_element_located((By.LINK_TEXT, str(waiting.pk)[:8])))
                .find_element(By.XPATH, "./ancestor::tr")
                .text
            )
            assert "cus_ada" in row and "not asked" in row
            screenshots(browser, "queue")

            # The Workers page shows the running worker as live.
            browser.get(f"{live_server.url}/admin/reconciliation/workerprocess/")
            table = wait.until(ec.presence_of_element_located((By.ID, "result_list"))).text
            assert f":{worker.pid}:" in table and "live" in table
            screenshots(browser, "workers")
            log_in(browser, wait, live_server, "victor")
            browser.get(
                f"{live_server.url}/admin/reconciliation/reconciliationcase/{waiting.pk}/change/"
            )
            wait.until(ec.presence_of_element_located((By.ID, "no-resolution-permission")))
            screenshots(browser, "limited-user")
            assert browser.find_elements(By.CSS_SELECTOR, "#case-resolutions form") == []
            assert browser.find_elements(By.ID, "lookup-charge") == []
            assert "Suggested resolution" in browser.find_element(By.ID, "case-suggestion").text

            # The two-person rule: olga proposes the replay, petra approves it.
            settings.RECONCILIATION_TWO_PERSON = True
            walk_two_person_replay(browser, wait, live_server, waiting, screenshots)
            assert wait_for_finish(waiting, worker, log) == "SUCCEEDED", log.read_text()
            sent = [
                r
                for r in provider.requests(CHARGES)
                if r.headers.get("idempotency-key") == f"{waiting.pk}:charge"
            ]
            assert len(sent) == 2  # replayed once, on the second operator's approval


def walk_crash_case(browser, wait, live_server, execution, screenshots) -> None:
    """The case of a worker killed mid-call: explained, answered by the provider, and a replay
    against that answer needs the confirmation before the operator records what happened."""
    case_page(browser, wait, live_server, execution)
    screenshots(browser, "crash-in-flight-case")
    for element_id in (
        "case-why",
        "case-summary-fields",
        "case-suggestion",
        "lookup-charge",
        "case-replay-risk",
    ):
        assert in_first_screen(browser, element_id), element_id
    assert "in flight" in browser.find_element(By.ID, "case-why").text
    assert "cus_crash" in browser.find_element(By.ID, "case-summary-fields").text

    navigate(browser, wait, browser.find_element(By.ID, "lookup-charge"))
    wait.until(ec.text_to_be_present_in_element((By.ID, "case-suggestion"), "The write happened"))
    assert in_first_screen(browser, "case-suggestion")
    screenshots(browser, "crash-in-flight-answered")

    browser.find_element(By.ID, "not_happened_reason").send_keys("Replay anyway.")
    navigate(browser, wait, browser.find_element(By.ID, "submit-not-happened"))
    wait.until(ec.presence_of_element_located((By.ID, "case-explained")))
    form = browser.find_element(By.ID, "resolve-not-happened").text
    assert "Confirm that you choose this all the same" in form
    # The refusal is also said at the top, where the page opens.
    assert in_first_screen(browser, "refusal-form-link")
    assert "Not done" in browser.find_element(By.CSS_SELECTOR, ".messagelist .error").text
    screenshots(browser, "crash-in-flight-confirmation-needed")
    assert request_of(execution).blocked_by_id == execution.pk  # nothing written

    browser.find_element(By.ID, "happened_reason").send_keys(REASON)
    navigate(browser, wait, browser.find_element(By.ID, "submit-happened"))
    wait.until(ec.text_to_be_present_in_element((By.CSS_SELECTOR, ".messagelist"), "resolved 1"))
    screenshots(browser, "crash-in-flight-resolved")


def walk_lost_replay(browser, wait, live_server, provider, worker, log, screenshots) -> None:
    """A charge lost before it applied; the provider says "not found" and the operator replays
    it; the replay applies and its answer is lost too. The page, refreshing itself, comes back
    to the case about attempt 2: not asked about it, nothing pre-selected, a replay on the
    answer about attempt 1 refused; asked again, the provider has the charge: charged once."""
    provider.plan(CHARGES, drop(apply=False), drop(apply=True))
    execution = accept_charge(amount=77, customer="cus_twice")
    key = f"{execution.pk}:charge"
    wait_for_reconciliation(execution, worker, log)
    case_page(browser, wait, live_server, execution)
    navigate(browser, wait, browser.find_element(By.ID, "lookup-charge"))
    wait.until(
        ec.text_to_be_present_in_element((By.ID, "case-suggestion"), "The write did not happen")
    )
    browser.find_element(By.ID, "not_happened_reason").send_keys(REASON)
    navigate(browser, wait, browser.find_element(By.ID, "submit-not-happened"))
    wait.until(ec.text_to_be_present_in_element((By.CSS_SELECTOR, ".messagelist"), "resolved 1"))

    # The resolved page refreshes itself until the execution is final; the lost replay brings
    # the case back open, about attempt 2.
    wait.until(ec.presence_of_element_located((By.ID, "evidence-not-asked")))
    screenshots(browser, "lost-replay-case")
    assert "at attempt 2" in browser.find_element(By.ID, "case-why").text
    evidence = browser.find_element(By.ID, "case-evidence").text
    assert "not asked yet about attempt 2" in evidence and "was about attempt 1" in evidence
    suggestion = browser.find_element(By.ID, "case-suggestion").text
    assert "Ask the provider about attempt 2, or check with it directly." in suggestion
    assert browser.find_elements(By.CSS_SELECTOR, ".case-suggested") == []  # nothing pre-selected
    for element_id in ("case-why", "case-evidence", "case-suggestion", "lookup-charge"):
        assert in_first_screen(browser, element_id), element_id

    # A replay on the answer about attempt 1 is refused, said at the top; nothing is written.
    browser.find_element(By.ID, "not_happened_reason").send_keys("It said not found.")
    navigate(browser, wait, browser.find_element(By.ID, "submit-not-happened"))
    wait.until(ec.presence_of_element_located((By.ID, "case-explained")))
    told = browser.find_element(By.CSS_SELECTOR, ".messagelist .error").text
    assert told.startswith("Not done: “The write did not happen” was refused")
    assert "Without evidence" in told
    assert in_first_screen(browser, "refusal-form-link")
    screenshots(browser, "lost-replay-refused")
    assert (
        len([r for r in provider.requests(CHARGES) if r.headers.get("idempotency-key") == key]) == 2
    )

    # Asked about attempt 2, the provider has the charge; recording it finishes the request.
    navigate(browser, wait, browser.find_element(By.ID, "lookup-charge"))
    wait.until(ec.text_to_be_present_in_element((By.ID, "case-suggestion"), "The write happened"))
    assert "about attempt 2" in browser.find_element(By.ID, "case-evidence").text
    screenshots(browser, "lost-replay-answered")
    browser.find_element(By.ID, "happened_reason").send_keys(REASON)
    navigate(browser, wait, browser.find_element(By.ID, "submit-happened"))
    wait.until(ec.text_to_be_present_in_element((By.CSS_SELECTOR, ".messagelist"), "resolved 1"))
    assert wait_for_finish(execution, worker, log) == "SUCCEEDED", log.read_text()
    sent = [r for r in provider.requests(CHARGES) if r.headers.get("idempotency-key") == key]
    assert len(sent) == 2  # the lost call and one replay, never a third
    assert len([e for e in provider.effects(CHARGES) if e.key == key]) == 1  # charged once


def walk_two_person_replay(browser, wait, live_server, execution, screenshots) -> None:
    """Under RECONCILIATION_TWO_PERSON: a proposal shown at the top, no approval for its
    proposer or for a reader, and the replay applied on a second operator's approval."""
    log_in(browser, wait, live_server, "olga")
    case_page(browser, wait, live_server, execution)
    navigate(browser, wait, browser.find_element(By.ID, "lookup-charge"))
    wait.until(
        ec.text_to_be_present_in_element((By.ID, "case-suggestion"), "The write did not happen")
    )
    assert browser.find_element(By.ID, "two-person-note").is_displayed()
    browser.find_element(By.ID, "not_happened_reason").send_keys("No charge at the provider.")
    navigate(browser, wait, browser.find_element(By.ID, "submit-not-happened"))
    wait.until(ec.presence_of_element_located((By.ID, "case-proposal")))
    assert in_first_screen(browser, "case-proposal")
    proposal = browser.find_element(By.ID, "case-proposal").text
    assert "olga" in proposal and "No charge at the provider." in proposal
    assert browser.find_elements(By.ID, "approve-proposal") == []  # never to its proposer
    screenshots(browser, "two-person-proposed")
    assert request_of(execution).blocked_by_id == execution.pk  # nothing applied

    log_in(browser, wait, live_server, "victor")
    case_page(browser, wait, live_server, execution)
    assert browser.find_element(By.ID, "proposal-waiting").is_displayed()
    assert browser.find_elements(By.ID, "decide-proposal") == []

    log_in(browser, wait, live_server, "petra")
    case_page(browser, wait, live_server, execution)
    screenshots(browser, "two-person-second-operator")
    browser.find_element(By.ID, "decide_reason").send_keys("Checked: the provider has no charge.")
    navigate(browser, wait, browser.find_element(By.ID, "approve-proposal"))
    wait.until(ec.presence_of_element_located((By.ID, "case-resolved")))
    assert "olga (proposed), petra (approved)" in browser.find_element(By.ID, "case-resolved").text
    screenshots(browser, "two-person-approved")
