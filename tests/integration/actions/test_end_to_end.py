"""End to end: flows whose actions are http.json and documents.verify calls to loopback providers,
run by two real `manage.py runworker` processes on the runtime role.

Each failure class ends in the state the worker protocol prescribes (docs/worker-protocol.md;
INTEGRATIONS.md, "What the worker does with each class"). The workers, the providers and the
INTEGRATIONS_FILE are shared by the module; each test publishes the flow, accepts one transition and
waits, with a deadline, for the execution to settle.
"""

import hashlib
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings

from executions.api.services import request_create, transition_accept
from executions.flows.publication import flow_publish
from executions.models import (
    ActionExecution,
    AuditEvent,
    AuditType,
    Execution,
    ExecutionStatus,
    Request,
)
from orquestador import errors
from orquestador.auth import Principal
from tests.conftest import _dsn, manage, runtime_settings
from tests.support.providers import (
    DocumentStore,
    JsonProvider,
    drop,
    non_json,
    oversized,
    retry_after_date,
    slow,
    status,
)
from tests.support.worker import wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.process]

SECRET = "Bearer e2e-credential-value"
DEADLINE = 45.0  # seconds a scenario may take to settle
PRINCIPAL = Principal(subject="alice", tenant="acme", permissions=frozenset({"requests:write"}))
DOCUMENT = b"%PDF-1.7 signed contract\n" * 100
DOCUMENT_SHA = hashlib.sha256(DOCUMENT).hexdigest()

# scenario -> (effect, extra contract keys, extra route keys)
SCENARIOS: dict[str, tuple[str, dict[str, Any], dict[str, Any]]] = {
    "charge-drop": ("NON_IDEMPOTENT_WRITE", {}, {}),
    "upsert-drop": ("IDEMPOTENT_WRITE", {}, {"method": "PUT"}),
    "charge-429": ("NON_IDEMPOTENT_WRITE", {}, {}),
    "upsert-503": ("IDEMPOTENT_WRITE", {}, {}),
    "charge-422": ("NON_IDEMPOTENT_WRITE", {}, {}),
    "charge-500": ("NON_IDEMPOTENT_WRITE", {}, {}),
    "upsert-nonjson": ("IDEMPOTENT_WRITE", {}, {}),
    "charge-slow": ("NON_IDEMPOTENT_WRITE", {"timeout_seconds": 1}, {}),
    "charge-oversized": ("NON_IDEMPOTENT_WRITE", {}, {"max_response_bytes": 1024}),
    "score-oversized": ("READ_ONLY", {}, {"max_response_bytes": 1024}),
    "charge-nonjson": ("NON_IDEMPOTENT_WRITE", {}, {}),
    "score-nonjson": ("READ_ONLY", {}, {}),
    "charge-schema": (
        "NON_IDEMPOTENT_WRITE",
        {"output_schema": {"type": "object", "required": ["receipt"]}},
        {},
    ),
    "score-schema": (
        "READ_ONLY",
        {"output_schema": {"type": "object", "required": ["score"]}},
        {},
    ),
}


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return "{ " + ", ".join(f"{k} = {_toml(v)}" for k, v in value.items()) + " }"


def _section(header: str, table: dict[str, Any]) -> str:
    return f"[{header}]\n" + "".join(f"{k} = {_toml(v)}\n" for k, v in table.items())


def integrations_file(provider: JsonProvider, store: DocumentStore) -> str:
    sections = [
        _section('contracts."e2e.verify@1"', {"effect": "READ_ONLY", "timeout_seconds": 5}),
        _section(
            'routes."e2e.verify@1"',
            {
                "adapter": "documents.verify",
                "url": store.url("/documents/{documentId}"),
                "allowed_media_types": ["application/pdf"],
            },
        ),
        _section(
            'contracts."e2e.charge@1"',
            {
                "effect": "NON_IDEMPOTENT_WRITE",
                "auto_reconcile": "off",  # these scenarios end where an operator takes over
                "timeout_seconds": 5,
                "input_schema": {"type": "object", "required": ["amount"]},
                "output_schema": {"type": "object", "required": ["id"]},
            },
        ),
        _section(
            'routes."e2e.charge@1"',
            {
                "adapter": "http.json",
                "url": provider.url("/charges"),
                "lookup_url": provider.url("/charges/by-key/{key}"),
                "headers_from_env": {"Authorization": "E2E_PAYMENTS_AUTH"},
            },
        ),
        _section('contracts."e2e.crm@1"', {"effect": "IDEMPOTENT_WRITE", "timeout_seconds": 5}),
        _section(
            'routes."e2e.crm@1"',
            {"adapter": "http.json", "url": provider.url("/contacts"), "method": "PUT"},
        ),
    ]
    for name, (effect, contract, route) in SCENARIOS.items():
        sections.append(
            _section(
                f'contracts."e2e.{name}@1"',
                {"effect": effect, "max_attempts": 3, "timeout_seconds": 5, **contract},
            )
        )
        sections.append(
            _section(
                f'routes."e2e.{name}@1"',
                {"adapter": "http.json", "url": provider.url(f"/{name}"), **route},
            )
        )
    return "\n".join(sections)


def flow_definition() -> dict[str, Any]:
    def single(name: str, capability: str) -> dict[str, Any]:
        return {
            "id": name,
            "from": ["DRAFT"],
            "actions": [{"id": "act", "capability": capability, "version": 1, "input": {"n": 1}}],
            "decision": {
                "hitPolicy": "FIRST",
                "rules": [{"id": "done", "when": True, "target": "DONE", "outcome": "DONE"}],
            },
            "updates": [{"path": "/result", "from": "/actions/act"}],
        }

    full = {
        "id": "submit",
        "from": ["DRAFT"],
        "actions": [
            {
                "id": "verify",
                "capability": "e2e.verify",
                "version": 1,
                "input": {
                    "documentId": {"from": "/data/documentId"},
                    "sha256": {"from": "/data/sha256"},
                },
            },
            {
                "id": "charge",
                "capability": "e2e.charge",
                "version": 1,
                "input": {
                    "amount": {"from": "/data/amount"},
                    "document": {"from": "/actions/verify/sha256"},
                },
            },
            {
                "id": "crm",
                "capability": "e2e.crm",
                "version": 1,
                "input": {"chargeId": {"from": "/actions/charge/id"}},
            },
        ],
        "decision": {
            "hitPolicy": "FIRST",
            "rules": [
                {
                    "id": "ok",
                    "when": {"eq": [{"from": "/actions/verify/verified"}, True]},
                    "target": "APPROVED",
                    "outcome": "APPROVED",
                },
                {"id": "otherwise", "when": True, "target": "REJECTED", "outcome": "REJECTED"},
            ],
        },
        "updates": [
            {"path": "/verification/verified", "from": "/actions/verify/verified"},
            {"path": "/payment/chargeId", "from": "/actions/charge/id"},
            {"path": "/crm", "from": "/actions/crm"},
        ],
    }
    transitions = [full, single("missing", "e2e.missing")]
    transitions += [single(name, f"e2e.{name}") for name in SCENARIOS]
    return {
        "key": "integrations-e2e",
        "version": 1,
        "initialState": "DRAFT",
        "states": ["DRAFT", "APPROVED", "REJECTED", "DONE"],
        "dataSchema": {"type": "object"},
        "transitions": transitions,
    }


# ------------------------------------------------------------------------------
# The running system: providers, INTEGRATIONS_FILE and two runworker processes
# ------------------------------------------------------------------------------
class System:
    def __init__(self, provider: JsonProvider, store: DocumentStore, logs: list[Path]) -> None:
        self.provider, self.store, self.logs = provider, store, logs

    def log_text(self) -> str:
        return "".join(path.read_text(errors="replace") for path in self.logs)


@pytest.fixture(scope="module")
def system(django_db_setup, tmp_path_factory) -> Iterator[System]:
    workdir = tmp_path_factory.mktemp("e2e")
    with JsonProvider() as provider, DocumentStore() as store:
        path = workdir / "integrations.toml"
        path.write_text(integrations_file(provider, store))
        env = {
            **os.environ,
            "DATABASE_URL": _dsn(runtime_settings()),
            "MIGRATION_DATABASE_URL": _dsn(settings.DATABASES["default"]),
            "DJANGO_SETTINGS_MODULE": "orquestador.settings",
            "PYTHONUNBUFFERED": "1",
            "INTEGRATIONS_FILE": str(path),
            "E2E_PAYMENTS_AUTH": SECRET,
            "SIMULATION_MODE": "false",
            "WORKER_ENABLED": "true",
            "WORKER_CONCURRENCY": "4",
            "WORKER_POLL_MS": "100",
            "WORKER_RETRY_BASE_SECONDS": "0.2",
            "WORKER_RETRY_MAX_SECONDS": "1",
            "LOG_LEVEL": "DEBUG",
        }
        workers, logs = [], []
        try:
            for n in range(2):
                out = (workdir / f"worker-{n}.log").open("wb")
                logs.append(Path(out.name))
                workers.append(
                    subprocess.Popen(manage("runworker"), env=env, stdout=out, stderr=out)
                )
                out.close()
            yield System(provider, store, logs)
        finally:
            for worker in workers:
                if worker.poll() is None:
                    worker.send_signal(signal.SIGTERM)
            for worker in workers:
                try:
                    worker.wait(timeout=40)
                except subprocess.TimeoutExpired:
                    worker.kill()
                    worker.wait(timeout=10)


@pytest.fixture
def flow(system):
    flow, _ = flow_publish(definition=flow_definition())
    return flow


def accept(transition: str, data: dict[str, Any] | None = None) -> Execution:
    request = request_create(
        principal=PRINCIPAL, flow_key="integrations-e2e", flow_version=1, data=data or {}
    )
    accepted, _ = transition_accept(
        principal=PRINCIPAL,
        request_id=str(request.id),
        transition_id=transition,
        expected_revision=request.revision,
    )
    return Execution.objects.get(id=accepted.id)


SETTLED = {
    ExecutionStatus.SUCCEEDED,
    ExecutionStatus.FAILED,
    ExecutionStatus.RECONCILIATION_REQUIRED,
    ExecutionStatus.CANCELLED,
}


def settle(execution: Execution, system: System) -> Execution:
    """Wait until the execution reaches a settled status; fail with the workers' logs if not."""

    def settled() -> Execution | None:
        current = Execution.objects.get(pk=execution.pk)
        return current if current.status in SETTLED else None

    try:
        return wait_until(settled, timeout=DEADLINE, what=f"execution {execution.pk} to settle")
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{system.log_text()[-4000:]}") from None


def checkpoint(execution: Execution) -> ActionExecution:
    return ActionExecution.objects.get(execution=execution, action_id="act")


def retried(execution: Execution) -> bool:
    return AuditEvent.objects.filter(execution=execution, type=AuditType.RETRY_SCHEDULED).exists()


def assert_released(execution: Execution) -> None:
    request = Request.objects.get(pk=execution.request_id)
    assert request.blocked_by_id is None
    assert request.state == "DRAFT"


def assert_blocked(execution: Execution) -> None:
    assert Request.objects.get(pk=execution.request_id).blocked_by_id == execution.pk


# ------------------------------------------------------------------------------
# The whole flow
# ------------------------------------------------------------------------------
def test_flow__verify_charge_upsert__approved(system, flow):
    system.store.put("contract-7", DOCUMENT, "application/pdf")
    data = {"documentId": "contract-7", "sha256": DOCUMENT_SHA, "amount": 25}

    done = settle(accept("submit", data), system)

    assert done.status == ExecutionStatus.SUCCEEDED, done.error_detail
    request = Request.objects.get(pk=done.request_id)
    assert request.state == "APPROVED"
    assert request.blocked_by_id is None
    (charge,) = [e for e in system.provider.effects("/charges") if e.key == f"{done.pk}:charge"]
    assert request.data["verification"] == {"verified": True}
    assert request.data["payment"] == {"chargeId": charge.response["id"]}
    assert charge.request == {"amount": 25, "document": DOCUMENT_SHA}
    (contact,) = [e for e in system.provider.effects("/contacts") if e.key == f"{done.pk}:crm"]
    assert contact.request == {"chargeId": charge.response["id"]}
    assert request.data["crm"] == contact.response
    assert {r.headers["authorization"] for r in system.provider.requests("/charges")} == {SECRET}
    logs = system.log_text()
    assert "integration call" in logs  # the workers' log lines were captured...
    assert SECRET not in logs  # ...and the credential is in none of them


def test_flow__document_hash_differs__rejected(system, flow):
    system.store.put("contract-8", DOCUMENT, "application/pdf")
    data = {"documentId": "contract-8", "sha256": "0" * 64, "amount": 25}

    done = settle(accept("submit", data), system)

    assert done.status == ExecutionStatus.SUCCEEDED
    assert Request.objects.get(pk=done.request_id).state == "REJECTED"


def test_flow__missing_route__integration_unavailable_before_any_call(system, flow):
    calls_before = system.provider.calls()

    done = settle(accept("missing"), system)

    assert done.status == ExecutionStatus.FAILED
    assert done.error_code == errors.INTEGRATION_UNAVAILABLE
    assert not ActionExecution.objects.filter(execution=done).exists()
    assert system.provider.calls() == calls_before
    assert_released(done)


# ------------------------------------------------------------------------------
# Connections
# ------------------------------------------------------------------------------
def test_non_idempotent_write__dropped__reconciliation_and_still_blocked(system, flow):
    system.provider.plan("/charge-drop", drop())

    done = settle(accept("charge-drop"), system)

    assert done.status == ExecutionStatus.RECONCILIATION_REQUIRED
    assert done.error_code == errors.UNCERTAIN_WRITE
    assert checkpoint(done).status == "UNKNOWN"
    assert_blocked(done)
    assert system.provider.calls("/charge-drop") == 1  # never repeated


def test_idempotent_write__dropped__retried_with_same_key_and_applied_once(system, flow):
    system.provider.plan("/upsert-drop", drop())

    done = settle(accept("upsert-drop"), system)

    assert done.status == ExecutionStatus.SUCCEEDED
    assert retried(done)
    seen = system.provider.requests("/upsert-drop")
    assert len(seen) == 2
    assert {r.headers["idempotency-key"] for r in seen} == {f"{done.pk}:act"}
    assert len(system.provider.effects("/upsert-drop")) == 1
    assert checkpoint(done).attempt == 2


def test_non_idempotent_write__read_timeout__reconciliation(system, flow):
    system.provider.plan("/charge-slow", slow(30))

    done = settle(accept("charge-slow"), system)

    assert done.status == ExecutionStatus.RECONCILIATION_REQUIRED
    assert done.error_code == errors.UNCERTAIN_WRITE
    assert_blocked(done)


# ------------------------------------------------------------------------------
# Statuses
# ------------------------------------------------------------------------------
def test_429_with_retry_after_seconds__retry_scheduled_then_success(system, flow):
    system.provider.plan("/charge-429", status(429, retry_after=2))

    done = settle(accept("charge-429"), system)

    assert done.status == ExecutionStatus.SUCCEEDED
    assert retried(done)
    first, second = system.provider.requests("/charge-429")
    assert second.at - first.at >= 1.5  # the provider's Retry-After was honoured
    assert len(system.provider.effects("/charge-429")) == 1


def test_503_with_retry_after_date__retry_scheduled_then_success(system, flow):
    system.provider.plan("/upsert-503", status(503, retry_after=retry_after_date(2)))

    done = settle(accept("upsert-503"), system)

    assert done.status == ExecutionStatus.SUCCEEDED
    assert retried(done)
    first, second = system.provider.requests("/upsert-503")
    assert second.at - first.at >= 0.9  # an HTTP-date has whole seconds only


def test_4xx__failed_and_request_released(system, flow):
    system.provider.plan("/charge-422", status(422))

    done = settle(accept("charge-422"), system)

    assert done.status == ExecutionStatus.FAILED
    assert done.error_code == errors.PERMANENT_FAILURE
    assert "provider-secret-detail" not in (done.error_detail or "")
    assert system.provider.calls("/charge-422") == 1
    assert_released(done)


def test_5xx_on_non_idempotent_write__reconciliation_not_retried(system, flow):
    system.provider.plan("/charge-500", status(500, retry_after=1, apply=True))

    done = settle(accept("charge-500"), system)

    assert done.status == ExecutionStatus.RECONCILIATION_REQUIRED
    assert done.error_code == errors.UNCERTAIN_WRITE
    assert system.provider.calls("/charge-500") == 1
    assert_blocked(done)


# ------------------------------------------------------------------------------
# Bodies and schemas
# ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("scenario", "reply"),
    [
        ("charge-oversized", oversized(4096)),
        ("charge-nonjson", non_json()),
        ("charge-schema", None),  # the default output lacks "receipt"
    ],
)
def test_write__unusable_output__reconciliation_with_request_blocked(system, flow, scenario, reply):
    if reply is not None:
        system.provider.plan(f"/{scenario}", reply)

    done = settle(accept(scenario), system)

    assert done.status == ExecutionStatus.RECONCILIATION_REQUIRED
    cp = checkpoint(done)
    assert cp.status == "UNKNOWN"
    assert cp.error_code == errors.OUTPUT_INVALID
    assert "provider-secret-detail" not in (cp.error_detail or "")
    assert_blocked(done)
    assert system.provider.calls(f"/{scenario}") == 1


@pytest.mark.parametrize(
    ("scenario", "reply"),
    [
        ("score-oversized", oversized(4096)),
        ("score-nonjson", non_json()),
        ("score-schema", None),  # the default output lacks "score"
    ],
)
def test_read__unusable_output__failed_output_invalid_and_released(system, flow, scenario, reply):
    if reply is not None:
        system.provider.plan(f"/{scenario}", reply)

    done = settle(accept(scenario), system)

    assert done.status == ExecutionStatus.FAILED
    assert done.error_code == errors.OUTPUT_INVALID
    assert checkpoint(done).status == "FAILED"
    assert_released(done)


def test_idempotent_write__unusable_output_every_time__reconciliation_after_max_attempts(
    system, flow
):
    system.provider.plan("/upsert-nonjson", non_json(), non_json(), non_json())

    done = settle(accept("upsert-nonjson"), system)

    # Retried with the same key (safe), never released: the provider did act.
    assert done.status == ExecutionStatus.RECONCILIATION_REQUIRED
    assert system.provider.calls("/upsert-nonjson") == 3
    assert len(system.provider.effects("/upsert-nonjson")) == 1
    cp = checkpoint(done)
    assert (cp.status, cp.error_code, cp.attempt) == ("UNKNOWN", errors.OUTPUT_INVALID, 3)
    assert_blocked(done)
