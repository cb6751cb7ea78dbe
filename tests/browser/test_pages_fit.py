"""Pages that fit, in headless Chromium at 1400x1000 and at a phone's 390x844: every admin page
reachable from the index (each list, one row's page from each, the add forms) and the pages an
operator reads, on rows made by the worker's own code, is no wider than its window (scrollWidth
against clientWidth), and at 1400 px no list scrolls inside its box; hashes and keys are cut
short with the whole value in their title; the case's resolutions show their consequences in
the first wide screen, and on the phone the suggested one's button is within two screens.

Whole-page screenshots at both sizes (the desk, the queue, a case before and after, an execution,
its request, the flow with its compensations, the Workers page, two lists) go to ARTEFACTS.
"""

import datetime
import uuid
from urllib.parse import urlsplit

import pytest
from django.contrib.auth.models import User
from django.utils import timezone
from selenium.common.exceptions import WebDriverException
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as ec
from selenium.webdriver.support.ui import WebDriverWait

from actions.registry import use_registry
from executions.models import Execution
from executions.queue.limits import route_operator_pause
from executions.webhooks.models import WebhookDelivery, WebhookSubscription
from executions.webhooks.signing import secret_new
from reconciliation.models import WorkerProcess
from tests.integration.reconciliation.conftest import charge_registry  # noqa: F401  (a fixture)
from tests.integration.reconciliation.factories import lookup, reconciliation_case
from tests.support.meteredprovider import route_tables_clear
from tests.support.worker import (
    ScriptedAdapter,
    binding,
    create_flow,
    enqueue,
    ok,
    permanent,
    registry,
    run_next,
    runtime_for,
)

from .conftest import POLL_SECONDS, WAIT_SECONDS
from .test_reconciliation import navigate

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True),
]

WIDE = (1400, 1000)
PHONE = (390, 844)
PASSWORD = "pw-root"
# The phone's screens within which the case's suggested decision and its button must be.
DECISION_SCREENS = 2
FULL_PAGE_MOST = 8000  # px: the tallest screenshot kept of a page
# Demo-like values as long as real ones: a customer id, a reference, a delivery's error.
ORDER = {
    "customer": "cus_Q8f2LkX9mZp4Rt7Vw1Yb",
    "reference": "order-2026-12-07-000042-acme-eu-west",
    "sku": "book-42",
    "amount": 2500,
    "currency": "EUR",
}
DELIVERY_ERROR = (
    "POST https://hooks.example.com/orquestador/acme/execution-events answered 503 Service "
    "Unavailable after 10.0 s; the next attempt follows the backoff"
)


def _undoable(action_id: str, capability: str, undo: str, undo_input: dict) -> dict:
    return {
        "id": action_id,
        "capability": capability,
        "version": 1,
        "input": {"sku": {"from": "/data/sku"}, "amount": {"from": "/data/amount"}},
        "compensate": {"capability": undo, "version": 1, "input": undo_input},
    }


CHECKOUT = {
    "key": "checkout",
    "version": 1,
    "initialState": "DRAFT",
    "states": ["DRAFT", "PAID", "DECLINED"],
    "dataSchema": {"type": "object"},
    "caseSummary": ["/customer", "/reference", "/amount"],
    "transitions": [
        {
            "id": "place",
            "from": ["DRAFT"],
            "onFailure": "compensate",
            "actions": [
                _undoable(
                    "reserve",
                    "RESERVE",
                    "RELEASE",
                    {"reservationId": {"from": "/actions/reserve/reservationId"}},
                ),
                {
                    "id": "charge",
                    "capability": "CHARGE",
                    "version": 1,
                    "input": {
                        "amount": {"from": "/data/amount"},
                        "customer": {"from": "/data/customer"},
                    },
                },
            ],
            "decision": {
                "hitPolicy": "FIRST",
                "rules": [{"id": "paid", "when": True, "target": "PAID", "outcome": "PAID"}],
            },
            "updates": [{"path": "/charge", "from": "/actions/charge"}],
        }
    ],
}


def _checkout(conn, dsn: str, bindings) -> Execution:
    """One order through the checkout flow, run by the worker's code."""
    flow_id = conn.execute("SELECT id FROM flow WHERE key = 'checkout'").fetchone()
    flow_id = flow_id[0] if flow_id else create_flow(conn, CHECKOUT)
    accepted = enqueue(conn, flow_id, data=ORDER, transition_id="place")
    with runtime_for(dsn, bindings) as runtime:
        run_next(conn, runtime)
    return Execution.objects.get(pk=accepted.execution_id)


@pytest.fixture
def demo(runtime_conn, runtime_dsn, migration_dsn, charge_registry):  # noqa: F811
    """The rows an operator's day leaves: a paid order, a refused one compensated, a charge in
    doubt with the provider's answer, a webhook delivery that keeps failing, a worker, and a
    paused route."""
    route_tables_clear(migration_dsn)
    subscription = WebhookSubscription.objects.create(
        tenant="acme",
        url="https://hooks.example.com/orquestador/acme/execution-events?source=orquestador-demo",
        events=["execution.succeeded", "execution.failed", "execution.compensated"],
        secret=secret_new(),
        description="The shop's order events, signed with its whsec_ secret",
    )
    # The checkout's capabilities beside the case's payments.charge, installed for the pages too
    # (the flow's picture reads each action's effect from them): one order paid, the next
    # refused by the provider and compensated.
    reserve = ScriptedAdapter(default=ok({"reservationId": f"res_{uuid.uuid4().hex}"}))
    charge = ScriptedAdapter(
        script=[ok({"chargeId": "ch_3QdY8mL2eZvKp0", "status": "paid"})],
        default=permanent("HTTP_402"),
    )
    release = ScriptedAdapter(default=ok({"released": True}))
    bindings = registry(
        binding("RESERVE", reserve, effect="IDEMPOTENT_WRITE"),
        binding("CHARGE", charge, effect="NON_IDEMPOTENT_WRITE"),
        binding("RELEASE", release, effect="IDEMPOTENT_WRITE"),
        charge_registry.resolve("payments.charge", 1),
    )
    paid = _checkout(runtime_conn, runtime_dsn, bindings)
    compensated = _checkout(runtime_conn, runtime_dsn, bindings)
    assert (paid.status, compensated.status) == ("SUCCEEDED", "COMPENSATED")
    runtime_conn.execute(
        "UPDATE webhook_delivery SET status = 'FAILED', attempts = 7, last_response_code = 503,"
        " last_error = %s, last_response_body = %s",
        [DELIVERY_ERROR, '{"error": "upstream unavailable", "retryAfter": 30}' * 4],
    )
    assert WebhookDelivery.objects.filter(subscription=subscription).exists()
    case = reconciliation_case()
    lookup(case, happened=True, output={"chargeId": "ch_3QdY8mL2eZvKp0", "status": "paid"})
    WorkerProcess.objects.create(
        owner=f"worker-ip-10-0-12-34.eu-west-1.compute.internal-4242-{uuid.uuid4().hex}",
        host="ip-10-0-12-34.eu-west-1.compute.internal",
        pid=4242,
        concurrency=8,
        running=1,
        renew_seconds=5,
        lease_seconds=30,
        version="0.1.0",
    )
    route_operator_pause(
        route="payments.charge@1",
        until=timezone.now() + datetime.timedelta(minutes=15),
        actor="admin:root",
        reason="The provider reports an incident on its EU charge endpoint (status page #4711)",
    )
    User.objects.create_superuser("root", "root@example.test", PASSWORD)
    with use_registry(bindings):
        yield {"case": case, "paid": paid, "compensated": compensated}
    route_tables_clear(migration_dsn)  # raw tables the flush between tests does not know


# The page's width against its window's, and where to look when it is wider: the first elements
# and text that stick out (unless a scrolling box clips them), and every box whose content
# scrolls sideways inside it (a select's or a text area's own list aside).
MEASURE = """
const root = document.documentElement;
const limit = root.clientWidth;
const name = (el) => el.tagName.toLowerCase() + (el.id ? '#' + el.id : '')
  + (typeof el.className === 'string' && el.className.trim()
     ? '.' + el.className.trim().split(/\\s+/).join('.') : '');
const scrolls = (box) => ['auto', 'scroll'].includes(getComputedStyle(box).overflowX);
const clipped = (el) => {
  for (let box = el.parentElement; box && box !== document.body; box = box.parentElement) {
    if (scrolls(box) && box.getBoundingClientRect().right <= limit + 1) return true;
  }
  return false;
};
const out = [];
for (const el of document.body.querySelectorAll('*')) {
  const r = el.getBoundingClientRect();
  if (out.length < 6 && r.width && r.right > limit + 1 && !clipped(el)) {
    out.push(name(el) + ' right=' + Math.round(r.right));
  }
}
const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
for (let n = walker.nextNode(); n && out.length < 9; n = walker.nextNode()) {
  const range = document.createRange();
  range.selectNodeContents(n);
  const r = range.getBoundingClientRect();
  const el = n.parentElement;
  if (r.width && r.right > limit + 1 && !el.closest('.visually-hidden') && !clipped(el)) {
    out.push('text in ' + name(el) + ' ' + JSON.stringify(n.textContent.trim().slice(0, 50)));
  }
}
const boxes = [];
for (const box of document.body.querySelectorAll('*')) {
  if (scrolls(box) && box.scrollWidth > box.clientWidth + 1
      && !['SELECT', 'TEXTAREA'].includes(box.tagName)) {
    boxes.push(name(box) + ' ' + box.scrollWidth + ' px in ' + box.clientWidth);
  }
}
return {scrollWidth: root.scrollWidth, clientWidth: limit, innerWidth: window.innerWidth,
        offenders: out, boxes: boxes};
"""


def _resize(browser, size: tuple[int, int]) -> None:
    """The window's inner size, as a phone's or a desktop's: Chromium's own minimum width for a
    window is above a phone's, so the viewport is set through the DevTools protocol."""
    width, height = size
    browser.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride",
        {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": width < 600},
    )


def _whole_page(browser, screenshots, name: str, size: tuple[int, int]) -> None:
    """A screenshot of the whole page at this width (the window made as tall as the page, at
    most FULL_PAGE_MOST px, then put back), so what lies below the first screen is kept too."""
    height = browser.execute_script("return document.documentElement.scrollHeight;")
    _resize(browser, (size[0], min(max(height, size[1]), FULL_PAGE_MOST)))
    try:
        screenshots(browser, name)
    finally:
        _resize(browser, size)


def _wait(browser) -> WebDriverWait:
    return WebDriverWait(
        browser, WAIT_SECONDS, POLL_SECONDS, ignored_exceptions=(WebDriverException,)
    )


def _open(browser, wait, url: str) -> None:
    browser.get(url)
    wait.until(ec.presence_of_element_located((By.ID, "content")))


def _too_wide(browser, *, lists_may_scroll: bool) -> str | None:
    """None when the page fits its window (and, unless `lists_may_scroll`, a list's columns fit
    its box too); otherwise the figures and what sticks out.

    The page's width is compared with the window's less its scroll bar (clientWidth): on a
    phone Chromium widens innerWidth to the page's own width, which would always fit."""
    found = browser.execute_script(MEASURE)
    fits = found["scrollWidth"] <= found["clientWidth"] <= found["innerWidth"]
    if fits and (lists_may_scroll or not found["boxes"]):
        return None
    return (
        f"{found['scrollWidth']} px wide in a {found['clientWidth']} px window "
        f"(inner {found['innerWidth']}): {'; '.join(found['offenders'])}"
        f"; scrolling sideways inside their box: {found['boxes']}"
    )


def _admin_links(browser, base: str, selector: str) -> list[str]:
    links = []
    for anchor in browser.find_elements(By.CSS_SELECTOR, selector):
        href = anchor.get_attribute("href") or ""
        parts = urlsplit(href)
        if href.startswith(base) and parts.path.startswith("/admin/") and "logout" not in href:
            links.append(href.split("#")[0])
    return list(dict.fromkeys(links))


def _reachable(browser, wait, base: str) -> list[str]:
    """The index's links (lists and add forms) and, from each list, its first row's page."""
    _open(browser, wait, f"{base}/admin/")
    pages = _admin_links(browser, base, "#content-main a, #content-related a")
    rows = []
    for page in pages:
        if "/add/" in page:
            continue
        _open(browser, wait, page)
        first = _admin_links(browser, base, "#result_list tbody tr:first-child a")
        rows.extend(first[:1])
    return list(dict.fromkeys([f"{base}/admin/", *pages, *rows]))


def test_every_admin_page_fits_at_1400_and_at_390(browser, live_server, demo, screenshots):
    wait = _wait(browser)
    base = live_server.url
    case, compensated = demo["case"], demo["compensated"]
    browser.get(f"{base}/admin/login/?next=/admin/")
    browser.find_element(By.ID, "id_username").send_keys("root")
    browser.find_element(By.ID, "id_password").send_keys(PASSWORD)
    navigate(browser, wait, browser.find_element(By.CSS_SELECTOR, "input[type=submit]"))

    case_url = f"{base}/admin/reconciliation/reconciliationcase/{case.pk}/change/"
    shown = {
        "desk": f"{base}/admin/",
        "cases": f"{base}/admin/reconciliation/reconciliationcase/",
        "case": case_url,
        "execution": f"{base}/admin/executions/execution/{compensated.pk}/change/",
        "request": f"{base}/admin/executions/request/{compensated.request_id}/change/",
        "flow": f"{base}/admin/executions/flow/{compensated.flow_id}/change/",
        "workers": f"{base}/admin/reconciliation/workerprocess/",
        "executions": f"{base}/admin/executions/execution/",
        "deliveries": f"{base}/admin/executions/webhookdelivery/",
    }
    _resize(browser, WIDE)
    pages = list(dict.fromkeys([*_reachable(browser, wait, base), *shown.values()]))
    visited = {urlsplit(page).path for page in pages}
    # The walk reached the pages the operators read: every list and one object of each.
    for expected in (
        "/admin/reconciliation/reconciliationcase/",
        "/admin/reconciliation/blockedrequest/",
        "/admin/executions/flow/",
        "/admin/executions/request/",
        "/admin/executions/execution/",
        "/admin/executions/actionexecution/",
        "/admin/executions/auditevent/",
        "/admin/executions/webhookdelivery/",
        "/admin/executions/webhooksubscription/",
        f"/admin/executions/webhookdelivery/{WebhookDelivery.objects.order_by('-id')[0].pk}/change/",
    ):
        assert expected in visited, (expected, sorted(visited))

    too_wide = {}
    for size in (WIDE, PHONE):
        _resize(browser, size)
        for page in pages:
            _open(browser, wait, page)
            problem = _too_wide(browser, lists_may_scroll=size == PHONE)
            if problem:
                too_wide[f"{size[0]} px {page.removeprefix(base)}"] = problem
        for name, page in shown.items():
            _open(browser, wait, page)
            _whole_page(browser, screenshots, f"{name}-{size[0]}", size)
    assert not too_wide, "\n".join(f"{where}: {why}" for where, why in too_wide.items())

    # Hashes and keys cut short, whole in their title and their text (for hover and copy).
    _resize(browser, WIDE)
    _open(browser, wait, shown["execution"])
    for cell in ("input_hash_short", "external_key_short"):
        values = browser.find_elements(By.CSS_SELECTOR, f"td.field-{cell} .long-value")
        assert len(values) == 3, cell  # reserve, charge, reserve:compensate
        for value in values:
            whole = value.get_attribute("title")
            assert value.get_attribute("textContent") == whole and len(whole) > 40, whole
            assert browser.execute_script(
                "return arguments[0].clientWidth < arguments[0].scrollWidth;", value
            ), f"{whole} is not cut short"
    _open(browser, wait, f"{base}/admin/executions/flow/")
    checksum = browser.find_element(By.CSS_SELECTOR, "td.field-short_checksum .long-value")
    assert len(checksum.get_attribute("title")) == 64

    # In a wide window every resolution's consequence is in the first screen (side by side).
    _open(browser, wait, case_url)
    bottoms = browser.execute_script(
        "window.scrollTo(0, 0);"
        "return Array.from(document.querySelectorAll('#case-resolutions form'),"
        " form => [form.id, form.querySelector('h3 + p').getBoundingClientRect().bottom]);"
    )
    assert [key for key, _ in bottoms] == [
        "resolve-happened",
        "resolve-not-happened",
        "resolve-abandon",
    ]
    assert all(bottom <= WIDE[1] for _, bottom in bottoms), bottoms

    # On the phone the queue's first column, the case's link, is on screen without scrolling.
    _resize(browser, PHONE)
    _open(browser, wait, shown["cases"])
    link = browser.find_element(By.CSS_SELECTOR, "#result_list tbody tr:first-child a")
    assert browser.execute_script(
        "const r = arguments[0].getBoundingClientRect();"
        "return r.left >= 0 && r.right <= document.documentElement.clientWidth;",
        link,
    )

    # On the phone the suggested decision and its button are within the first two screens;
    # pressing it resolves the case, and the page after fits too.
    _open(browser, wait, case_url)
    button = browser.find_element(By.CSS_SELECTOR, ".case-suggested input[type=submit]")
    assert button.get_attribute("id") == "submit-happened"  # as the provider's answer says
    bottom = browser.execute_script(
        "window.scrollTo(0, 0); return arguments[0].getBoundingClientRect().bottom;", button
    )
    assert bottom <= DECISION_SCREENS * PHONE[1], f"the decision's button ends at {bottom} px"
    form = button.find_element(By.XPATH, "./ancestor::form")
    form.find_element(By.CSS_SELECTOR, "textarea[name=reason]").send_keys(
        "The provider's lookup shows the charge paid: recorded as happened."
    )
    navigate(browser, wait, button)
    wait.until(ec.text_to_be_present_in_element((By.CSS_SELECTOR, ".messagelist"), "resolved 1"))
    _open(browser, wait, case_url)
    wait.until(ec.presence_of_element_located((By.ID, "case-resolved")))
    for size in (PHONE, WIDE):
        _resize(browser, size)
        _open(browser, wait, case_url)
        assert _too_wide(browser, lists_may_scroll=size == PHONE) is None, size
        _whole_page(browser, screenshots, f"case-resolved-{size[0]}", size)
    assert Execution.objects.get(pk=case.pk).status == "PENDING"
