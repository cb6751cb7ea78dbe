"""Cases made the real way: a published flow, an accepted transition, a real `manage.py
runworker` process on the runtime role, and a loopback provider that loses the worker's write.

Used by the end-to-end tests here and by the browser test.
"""

import contextlib
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from executions.api.services import request_create, transition_accept
from executions.flows.publication import flow_publish
from executions.models import Execution, Request
from orquestador.auth import Principal
from tests.conftest import manage
from tests.support.providers import JsonProvider
from tests.support.worker import wait_until

from .factories import DEFINITION

DEADLINE = 30.0  # seconds, for any wait on the worker
CHARGES = "/charges"


def charged(path: str, request: Any, number: int) -> dict[str, Any]:
    """What the provider answers a charge with (and stores under its Idempotency-Key)."""
    return {"chargeId": f"ch_{number}", "status": "paid"}


def write_catalog(directory: Path, provider: JsonProvider, *, auto_reconcile: str = "off") -> Path:
    """INTEGRATIONS_FILE routing payments.charge@1 to the provider, with its lookup (the same
    contract as conftest.charge_catalog). Automatic probes are off unless asked for: most tests
    here watch an operator settle the case."""
    base = provider.url(CHARGES)
    path = directory / "integrations.toml"
    path.write_text(
        f"""
[contracts."payments.charge@1"]
effect = "NON_IDEMPOTENT_WRITE"
auto_reconcile = "{auto_reconcile}"
max_attempts = 2
timeout_seconds = 3
input_schema = {{ type = "object", required = ["amount"] }}

[contracts."payments.charge@1".output_schema]
type = "object"
required = ["chargeId", "status"]
properties.chargeId = {{ type = "string" }}
properties.status = {{ enum = ["paid", "declined"] }}

[routes."payments.charge@1"]
adapter = "http.json"
url = "{base}"
method = "POST"
lookup_url = "{base}/by-key/{{key}}"
"""
    )
    return path


def status_of(execution_id: Any) -> str:
    return Execution.objects.values_list("status", flat=True).get(pk=execution_id)


@contextlib.contextmanager
def runworker(env: dict[str, str], catalog: Path, log: Path) -> Iterator[subprocess.Popen]:
    """A real `manage.py runworker` on the test database; stopped by its PID at the end."""
    worker_env = {
        **env,
        "WORKER_ENABLED": "true",
        "WORKER_CONCURRENCY": "2",
        "WORKER_POLL_MS": "100",
        "WORKER_DRAIN_SECONDS": "2",
        "INTEGRATIONS_FILE": str(catalog),
    }
    with log.open("wb") as out:
        process = subprocess.Popen(
            manage("runworker"), env=worker_env, stdout=out, stderr=subprocess.STDOUT
        )
        try:
            yield process
        finally:
            if process.poll() is None:
                os.kill(process.pid, signal.SIGTERM)
                try:
                    process.wait(timeout=DEADLINE)
                except subprocess.TimeoutExpired:
                    os.kill(process.pid, signal.SIGKILL)
                    process.wait(timeout=DEADLINE)


def accept_charge(amount: int = 42, customer: str = "cus_ada") -> Execution:
    """Publish the billing flow, create a request and accept its charge transition."""
    flow_publish(definition=DEFINITION)
    alice = Principal(
        subject="alice", tenant="acme", permissions=frozenset({"requests:write", "requests:read"})
    )
    request = request_create(
        principal=alice,
        flow_key=DEFINITION["key"],
        flow_version=None,
        data={"amount": amount, "customer": customer},
    )
    request.refresh_from_db()
    accepted, _ = transition_accept(
        principal=alice,
        request_id=str(request.pk),
        transition_id="charge",
        expected_revision=request.revision,
    )
    return Execution.objects.get(id=accepted.id)


def wait_for_reconciliation(execution: Execution, process: subprocess.Popen, log: Path) -> None:
    def reached() -> bool:
        if process.poll() is not None:
            raise AssertionError(f"runworker exited {process.returncode}:\n{log.read_text()}")
        return status_of(execution.pk) == "RECONCILIATION_REQUIRED"

    wait_until(reached, timeout=DEADLINE, what="the worker to hand the execution to an operator")


def wait_for_finish(execution: Execution, process: subprocess.Popen, log: Path) -> str:
    def finished() -> str | None:
        if process.poll() is not None:
            raise AssertionError(f"runworker exited {process.returncode}:\n{log.read_text()}")
        status = status_of(execution.pk)
        return status if status in ("SUCCEEDED", "FAILED", "RECONCILIATION_REQUIRED") else None

    return wait_until(
        finished, timeout=DEADLINE, what="the worker to finish the requeued execution"
    )


def request_of(execution: Execution) -> Request:
    return Request.objects.get(pk=execution.request_id)


@contextlib.contextmanager
def registry_from(catalog: Path) -> Iterator[None]:
    """Install the catalog in this process too (the admin validates outputs and asks lookups)."""
    from actions.catalog import load_catalog
    from actions.registry import ADAPTERS, build_registry, use_registry

    loaded = load_catalog(catalog, adapters=ADAPTERS, lease_seconds=60, environ={})
    with use_registry(build_registry(loaded)):
        yield
