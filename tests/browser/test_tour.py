"""README's five-minute tour, walked for real: `manage.py sandboxprovider`, a `runworker` and
the web application on examples/integrations.toml and examples/order.json; orders placed through
the API until one reaches an operator (the sandbox loses writes on purpose, seeded here so the
walk is the same every time), then that case opened in the admin (headless Chromium at
1400x1000) and resolved as the provider's evidence says; the request ends PAID with one charge.

On the way: a reservation whose answer was lost is retried and makes one reservation, and a
charge applied before its answer was lost is found by the automatic probe and settles itself.
Screenshots of every step are kept under tests/browser's ARTEFACTS folder (see README)."""

import contextlib
import json
import re
import signal
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from selenium.common.exceptions import WebDriverException
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as ec
from selenium.webdriver.support.ui import WebDriverWait

from actions.catalog import load_catalog
from actions.registry import ADAPTERS, build_registry, use_registry
from executions.models import AuditEvent, AuditType, Execution
from tests.conftest import ROOT, manage
from tests.integration.api.conftest import api_enabled
from tests.integration.reconciliation.worker import runworker
from tests.support import tokens
from tests.support.worker import wait_until

from .conftest import POLL_SECONDS, WAIT_SECONDS
from .test_reconciliation import log_in, navigate

pytestmark = [pytest.mark.browser, pytest.mark.process, pytest.mark.django_db(transaction=True)]

PAYMENTS_AUTH = "Bearer sandbox-tour"
# The sandbox's defaults, spelled out, and a seed whose draws give: an order whose reservation
# is retried and whose charge settles itself, another charge that settles itself, then an order
# whose charge never reached the sandbox, which waits for an operator; the replay goes through.
SANDBOX = ["--fail-after-apply", "0.2", "--fail-before-apply", "0.3", "--seed", "8"]
MOST_ORDERS = 10
FINAL = ("SUCCEEDED", "FAILED", "CANCELLED")
ORDER = {"customer": "cus_ada", "sku": "book-42", "quantity": 1, "amount": 2500, "currency": "EUR"}
REASON = "The sandbox has no charge with this key: one replay."


@contextlib.contextmanager
def sandboxprovider(env: dict[str, str], log: Path) -> Iterator[int]:
    """`manage.py sandboxprovider` on a free port; yields the port, stops it by its PID."""
    with log.open("wb") as out:
        process = subprocess.Popen(
            manage("sandboxprovider", "--port", "0", *SANDBOX),
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:

        def announced() -> int | None:
            if process.poll() is not None:
                raise AssertionError(f"sandboxprovider exited:\n{log.read_text()}")
            found = re.search(r"on http://127\.0\.0\.1:(\d+)", log.read_text())
            return int(found.group(1)) if found else None

        yield wait_until(announced, timeout=WAIT_SECONDS, what="the sandbox to listen")
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=WAIT_SECONDS)


def example_catalog(directory: Path, port: int) -> Path:
    """examples/integrations.toml with the sandbox's port, as scripts/start writes it."""
    text = (ROOT / "examples" / "integrations.toml").read_text()
    path = directory / "integrations.toml"
    path.write_text(text.replace("http://127.0.0.1:9000/", f"http://127.0.0.1:{port}/"))
    return path


def api(base: str, method: str, path: str, token: str, body: Any = None) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(f"{base}{path}", data=data, method=method)  # noqa: S310
    request.add_header("Authorization", f"Bearer {token}")
    request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310 (loopback)
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def sandbox_lookup(port: int, collection: str, key: str) -> tuple[int, Any]:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/{collection}/by-key/{urllib.request.quote(key, safe='')}"
    )
    request.add_header("Authorization", PAYMENTS_AUTH)
    try:
        with urllib.request.urlopen(request, timeout=5) as response:  # noqa: S310 (loopback)
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def place_order(base: str, token: str) -> tuple[str, str]:
    """The tour's first two steps: create a request on `order`, accept its `place`."""
    status, created = api(
        base, "POST", "/api/v1/requests", token, {"flowKey": "order", "data": ORDER}
    )
    assert status == 201, created
    status, execution = api(
        base,
        "POST",
        f"/api/v1/requests/{created['id']}/transitions",
        token,
        {"transitionId": "place", "expectedRevision": created["revision"]},
    )
    assert status == 202 and execution["status"] == "PENDING", execution
    return created["id"], execution["id"]


def settled(execution_id: str, worker: subprocess.Popen, log: Path) -> str:
    """Watch the execution until it is final, or waits for an operator with the probe's answer
    in (a charge the probe finds settles itself and runs on, so only "not found" waits)."""

    def where() -> str | None:
        if worker.poll() is not None:
            raise AssertionError(f"runworker exited:\n{log.read_text()}")
        status = Execution.objects.values_list("status", flat=True).get(pk=execution_id)
        if status in FINAL:
            return status
        probed = AuditEvent.objects.filter(
            execution_id=execution_id,
            type=AuditType.RECONCILIATION_EVIDENCE,
            payload__happened=False,
        )
        return "OPERATOR" if status == "RECONCILIATION_REQUIRED" and probed.exists() else None

    return wait_until(where, timeout=WAIT_SECONDS, what="the order to settle")


def checkpoint_attempts(execution_id: str, action_id: str) -> int:
    return Execution.objects.get(pk=execution_id).checkpoints.get(action_id=action_id).attempt


def test_tour__from_an_order_to_a_resolved_case(
    browser, live_server, operator, process_env, tmp_path, screenshots, monkeypatch
):
    wait = WebDriverWait(
        browser, WAIT_SECONDS, POLL_SECONDS, ignored_exceptions=(WebDriverException,)
    )
    monkeypatch.setenv("PAYMENTS_AUTH", PAYMENTS_AUTH)  # read at each call, lookups included
    env = {
        **process_env,
        "PAYMENTS_AUTH": PAYMENTS_AUTH,
        "SIMULATION_MODE": "true",
        "WORKER_RETRY_BASE_SECONDS": "0.2",
        "WORKER_RETRY_MAX_SECONDS": "1",
    }
    log = tmp_path / "worker.log"
    with sandboxprovider(env, tmp_path / "sandbox.log") as port:
        catalog = example_catalog(tmp_path, port)
        subprocess.run(
            manage("loadflow", str(ROOT / "examples" / "order.json")),
            env={**env, "INTEGRATIONS_FILE": str(catalog)},
            check=True,
            capture_output=True,
            timeout=WAIT_SECONDS,
        )
        loaded = load_catalog(
            catalog, adapters=ADAPTERS, lease_seconds=60, environ={"PAYMENTS_AUTH": PAYMENTS_AUTH}
        )
        with (
            api_enabled(),
            use_registry(build_registry(loaded)),
            runworker(env, catalog, log) as worker,
        ):
            token = tokens.token(sub="alice", tenant="acme", scope=tokens.WRITE_READ)
            outcomes: list[str] = []
            for _ in range(MOST_ORDERS):
                request_id, execution_id = place_order(live_server.url, token)
                outcomes.append(settled(execution_id, worker, log))
                if outcomes[-1] == "OPERATOR":
                    break
            assert outcomes == ["SUCCEEDED", "SUCCEEDED", "OPERATOR"], outcomes
            first = Execution.objects.filter(flow__key="order").earliest("created_at")
            # A lost reservation answer, retried: one reservation under its key.
            assert checkpoint_attempts(first.pk, "reserve") == 2
            assert sandbox_lookup(port, "reservations", f"{first.pk}:reserve")[0] == 200
            # A charge applied and then lost: the probe found it; nothing was charged twice.
            automatic = AuditEvent.objects.get(
                execution=first, type=AuditType.RECONCILIATION_RESOLVED
            )
            assert automatic.actor == "system:prober"
            assert sandbox_lookup(port, "charges", f"{first.pk}:charge")[1]["chargesWithKey"] == 1

            # The operator's side: the desk, the queue, the case, the evidence, the resolution.
            log_in(browser, wait, live_server, "olga")
            browser.get(f"{live_server.url}/admin/")
            desk = wait.until(ec.presence_of_element_located((By.ID, "desk-overview"))).text
            screenshots(browser, "desk")
            assert "system:prober" in desk  # the two charges that settled themselves
            browser.get(f"{live_server.url}/admin/reconciliation/reconciliationcase/")
            navigate(
                browser,
                wait,
                wait.until(ec.element_to_be_clickable((By.LINK_TEXT, execution_id[:8]))),
            )
            wait.until(ec.presence_of_element_located((By.ID, "case-explained")))
            screenshots(browser, "case")
            assert "cus_ada" in browser.find_element(By.ID, "case-summary-fields").text
            suggestion = browser.find_element(By.ID, "case-suggestion").text
            assert "The write did not happen" in suggestion  # the probe's answer, on the page

            browser.find_element(By.ID, "not_happened_reason").send_keys(REASON)
            navigate(browser, wait, browser.find_element(By.ID, "submit-not-happened"))
            wait.until(
                ec.text_to_be_present_in_element((By.CSS_SELECTOR, ".messagelist"), "resolved 1")
            )
            screenshots(browser, "resolved")
            assert settled(execution_id, worker, log) == "SUCCEEDED"
            status, request = api(live_server.url, "GET", f"/api/v1/requests/{request_id}", token)
            assert (status, request["state"], request["blocked"]) == (200, "PAID", False)
            found = sandbox_lookup(port, "charges", f"{execution_id}:charge")
            assert found[0] == 200 and found[1]["chargesWithKey"] == 1  # charged once
            browser.refresh()
            wait.until(ec.text_to_be_present_in_element((By.ID, "case-status"), "SUCCEEDED"))
            screenshots(browser, "case-succeeded")
            browser.get(f"{live_server.url}/admin/executions/execution/{execution_id}/change/")
            wait.until(ec.presence_of_element_located((By.ID, "content")))
            screenshots(browser, "execution")
            browser.get(f"{live_server.url}/admin/executions/request/{request_id}/change/")
            wait.until(ec.presence_of_element_located((By.ID, "content")))
            screenshots(browser, "request")

            # The flow's other transition: cancel refunds the charge and releases the stock.
            status, cancel = api(
                live_server.url,
                "POST",
                f"/api/v1/requests/{request_id}/transitions",
                token,
                {"transitionId": "cancel", "expectedRevision": request["revision"]},
            )
            assert status == 202, cancel
            assert settled(cancel["id"], worker, log) == "SUCCEEDED"
            status, request = api(live_server.url, "GET", f"/api/v1/requests/{request_id}", token)
            assert request["state"] == "CANCELLED"
            assert request["data"]["refund"]["chargeId"] == found[1]["chargeId"]
            assert request["data"]["reservation"]["status"] == "released"
            assert sandbox_lookup(port, "charges", f"{execution_id}:charge")[1]["status"] == (
                "refunded"
            )
