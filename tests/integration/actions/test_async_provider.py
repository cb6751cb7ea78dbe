"""An asynchronous provider end to end: http.json with `async = true` against a loopback
provider that answers 202, then a signed callback resumes the execution; a forged one changes
nothing; an overdue callback is retried for a safe effect and reconciled for a write."""

import hashlib
import hmac
import json

import pytest
from django.test import Client

from actions.registry import Registry, use_registry
from tests.integration.api.conftest import api_enabled
from tests.support.providers import status
from tests.support.worker import (
    action,
    audit_events,
    checkpoint_rows,
    claim,
    create_flow,
    enqueue,
    execution_row,
    flow_definition,
    request_row,
    run_next,
    runtime_for,
    wait_until,
)

from .conftest import catalog_registry

pytestmark = pytest.mark.django_db(transaction=True)

SECRET = "verify-callback-secret-0123456789abcdef"
ENV = {"VERIFY_CALLBACK_SECRET": SECRET}


def registry_for(provider, *, effect: str, callback_timeout: float = 3600) -> Registry:
    document = {
        "contracts": {
            "kyc.verify@1": {
                "effect": effect,
                "timeout_seconds": 2,
                "callback_timeout_seconds": callback_timeout,
                "output_schema": {
                    "type": "object",
                    "properties": {"verified": {"type": "boolean"}},
                },
            }
        },
        "routes": {
            "kyc.verify@1": {
                "adapter": "http.json",
                "url": provider.url("/verify"),
                "async": True,
                "callback_secret_from_env": "VERIFY_CALLBACK_SECRET",
            }
        },
    }
    return catalog_registry(document, ENV)


@pytest.fixture
def flow_id(runtime_conn):
    actions = [action("verify", "kyc.verify", input={"who": {"from": "/data/who"}})]
    return create_flow(
        runtime_conn,
        flow_definition(actions, updates=[{"path": "/kyc", "from": "/actions/verify"}]),
    )


def callback(accepted, output, secret: str = SECRET):
    body = json.dumps({"externalKey": f"{accepted.execution_id}:verify", "output": output}).encode()
    signature = "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return Client().generic(
        "POST",
        "/api/v1/callbacks/kyc.verify@1",
        data=body,
        content_type="application/json",
        HTTP_X_SIGNATURE=signature,
    )


def test_async__202_suspends_then_a_signed_callback_completes_the_run(
    runtime_conn, runtime_dsn, provider, flow_id, monkeypatch
):
    monkeypatch.setenv("VERIFY_CALLBACK_SECRET", SECRET)
    provider.plan("/verify", status(202, body=b"{}"))
    reg = registry_for(provider, effect="READ_ONLY")
    accepted = enqueue(runtime_conn, flow_id, data={"who": "ada"})
    with api_enabled(), use_registry(reg), runtime_for(runtime_dsn, reg) as runtime:
        suspended = run_next(runtime_conn, runtime)
        assert suspended.status == "suspended"
        assert suspended.suspended_on["event"] == "callback"
        execution = execution_row(runtime_conn, accepted.execution_id)
        assert execution["status"] == "SUSPENDED"
        assert checkpoint_rows(runtime_conn, accepted.execution_id)["verify"]["status"] == (
            "ACCEPTED"
        )

        forged = callback(accepted, {"verified": True}, secret="x" * 40)
        assert forged.status_code == 401
        assert execution_row(runtime_conn, accepted.execution_id)["status"] == "SUSPENDED"

        assert callback(accepted, {"verified": True}).status_code == 200
        completed = run_next(runtime_conn, runtime)

    assert completed.status == "completed"
    assert provider.calls("/verify") == 1  # never called again
    request = request_row(runtime_conn, accepted.request_id)
    assert (request["state"], request["data"]["kyc"]) == ("DONE", {"verified": True})
    kinds = [kind for kind, _ in audit_events(runtime_conn, accepted.request_id)]
    assert kinds[-3:] == ["EXECUTION_SUSPENDED", "EXECUTION_RESUMED", "TRANSITION_COMPLETED"]


def _overdue(runtime_conn, execution_id) -> bool:
    return runtime_conn.execute(
        "SELECT next_attempt_at <= clock_timestamp() FROM execution WHERE id = %s",
        [execution_id],
    ).fetchone()[0]


def test_async__an_overdue_callback_retries_a_safe_call_with_the_same_key(
    runtime_conn, runtime_dsn, provider, flow_id
):
    provider.plan("/verify", status(202, body=b"{}"))  # then the default: a 200 answer
    reg = registry_for(provider, effect="IDEMPOTENT_WRITE", callback_timeout=1)
    accepted = enqueue(runtime_conn, flow_id, data={"who": "ada"})
    with runtime_for(runtime_dsn, reg) as runtime:
        assert run_next(runtime_conn, runtime).status == "suspended"
        assert claim(runtime_conn, "early") == []
        wait_until(lambda: _overdue(runtime_conn, accepted.execution_id), what="the deadline")
        result = run_next(runtime_conn, runtime)

    assert result.status == "completed"
    keys = [r.headers["idempotency-key"] for r in provider.requests("/verify")]
    assert keys == [f"{accepted.execution_id}:verify"] * 2
    assert checkpoint_rows(runtime_conn, accepted.execution_id)["verify"]["attempt"] == 2


def test_async__an_overdue_callback_of_a_write_goes_to_reconciliation(
    runtime_conn, runtime_dsn, provider, flow_id
):
    provider.plan("/verify", status(202, body=b"{}"))
    reg = registry_for(provider, effect="NON_IDEMPOTENT_WRITE", callback_timeout=1)
    accepted = enqueue(runtime_conn, flow_id, data={"who": "ada"})
    with runtime_for(runtime_dsn, reg) as runtime:
        assert run_next(runtime_conn, runtime).status == "suspended"
        wait_until(lambda: _overdue(runtime_conn, accepted.execution_id), what="the deadline")
        result = run_next(runtime_conn, runtime)

    assert result.state["executionStatus"] == "RECONCILIATION_REQUIRED"
    execution = execution_row(runtime_conn, accepted.execution_id)
    assert execution["error_code"] == "UNCERTAIN_WRITE"
    assert provider.calls("/verify") == 1  # never repeated
    assert request_row(runtime_conn, accepted.request_id)["blocked_by_id"] == accepted.execution_id
