"""POST /api/v1/callbacks/{capability}@{version}: an asynchronous provider reports its output,
signed with the route's secret; a forged signature changes nothing."""

import hashlib
import hmac
import json

import pytest
from django.test import Client

from actions.registry import use_registry
from tests.integration.actions.conftest import catalog_registry
from tests.support.worker import (
    action,
    audit_events,
    checkpoint_rows,
    claim,
    create_flow,
    enqueue,
    execution_row,
    flow_definition,
)

from .conftest import api_enabled, assert_error

pytestmark = pytest.mark.django_db(transaction=True)

SECRET = "callback-secret-0123456789-abcdefghij"
CAPABILITY = "docs.check"
PATH = f"/api/v1/callbacks/{CAPABILITY}@1"
OUTPUT_SCHEMA = {
    "type": "object",
    "required": ["verified"],
    "properties": {"verified": {"type": "boolean"}},
}


@pytest.fixture
def async_route(monkeypatch):
    monkeypatch.setenv("DOCS_CALLBACK_SECRET", SECRET)
    document = {
        "contracts": {f"{CAPABILITY}@1": {"effect": "READ_ONLY", "output_schema": OUTPUT_SCHEMA}},
        "routes": {
            f"{CAPABILITY}@1": {
                "adapter": "http.json",
                "url": "http://127.0.0.1:9/check",
                "async": True,
                "callback_secret_from_env": "DOCS_CALLBACK_SECRET",
            }
        },
    }
    with api_enabled(), use_registry(catalog_registry(document, {"DOCS_CALLBACK_SECRET": SECRET})):
        yield


@pytest.fixture
def accepted_call(runtime_conn):
    """An execution whose provider accepted the call (202): ACCEPTED checkpoint, SUSPENDED."""
    flow_id = create_flow(runtime_conn, flow_definition([action("check", CAPABILITY)]))
    accepted = enqueue(runtime_conn, flow_id)
    (found,) = claim(runtime_conn, "worker-a", lease_seconds=30)
    runtime_conn.execute(
        "INSERT INTO action_execution (execution_id, action_id, sequence, capability, "
        "capability_version, effect, status, input_hash, external_key, fencing_token) "
        "VALUES (%s, 'check', 0, %s, 1, 'READ_ONLY', 'ACCEPTED', 'h', %s, %s)",
        [accepted.execution_id, CAPABILITY, f"{accepted.execution_id}:check", found.fence.token],
    )
    runtime_conn.execute(
        "UPDATE execution SET status = 'SUSPENDED', lease_owner = NULL, lease_expires_at = NULL,"
        " next_attempt_at = now() + interval '1 hour' WHERE id = %s",
        [accepted.execution_id],
    )
    return accepted


def body_of(accepted, output=None) -> bytes:
    return json.dumps(
        {"externalKey": f"{accepted.execution_id}:check", "output": output or {"verified": True}}
    ).encode()


def sign(body: bytes, secret: str = SECRET) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def post(body: bytes, signature: str | None, path: str = PATH):
    headers = {} if signature is None else {"HTTP_X_SIGNATURE": signature}
    return Client().generic("POST", path, data=body, content_type="application/json", **headers)


def test_callback__a_signed_output_resumes_the_execution(runtime_conn, async_route, accepted_call):
    token = execution_row(runtime_conn, accepted_call.execution_id)["fencing_token"]
    body = body_of(accepted_call)

    response = post(body, sign(body))

    assert response.status_code == 200, response.content
    assert response.json() == {
        "executionId": str(accepted_call.execution_id),
        "actionId": "check",
        "replay": False,
    }
    execution = execution_row(runtime_conn, accepted_call.execution_id)
    assert (execution["status"], execution["fencing_token"]) == ("PENDING", token + 1)
    check = checkpoint_rows(runtime_conn, accepted_call.execution_id)["check"]
    assert (check["status"], check["output"]) == ("SUCCEEDED", {"verified": True})
    kind, payload = audit_events(runtime_conn, accepted_call.request_id)[-1]
    assert (kind, payload) == ("EXECUTION_RESUMED", {"actionId": "check", "event": "callback"})

    again = post(body, sign(body))  # the provider retries the same callback

    assert again.status_code == 200 and again.json()["replay"] is True
    assert execution_row(runtime_conn, accepted_call.execution_id)["fencing_token"] == token + 1


@pytest.mark.parametrize(
    "signature",
    [None, "", "sha256=" + "0" * 64, "md5=abc", sign(b"another body"), "SIGN"],
)
def test_callback__a_missing_or_forged_signature_is_refused_and_changes_nothing(
    runtime_conn, async_route, accepted_call, signature
):
    before = execution_row(runtime_conn, accepted_call.execution_id)
    assert_error(post(body_of(accepted_call), signature), 401, "UNAUTHENTICATED", "X-Signature")
    assert execution_row(runtime_conn, accepted_call.execution_id) == before
    assert checkpoint_rows(runtime_conn, accepted_call.execution_id)["check"]["status"] == (
        "ACCEPTED"
    )


def test_callback__signed_with_another_secret_is_refused(runtime_conn, async_route, accepted_call):
    body = body_of(accepted_call)
    assert_error(post(body, sign(body, "x" * 40)), 401, "UNAUTHENTICATED")


def test_callback__an_unknown_key_is_not_found(runtime_conn, async_route, accepted_call):
    body = json.dumps({"externalKey": "nope:check", "output": {"verified": True}}).encode()
    assert_error(post(body, sign(body)), 404, "NOT_FOUND")


def test_callback__an_output_the_contract_refuses_is_output_invalid(
    runtime_conn, async_route, accepted_call
):
    body = body_of(accepted_call, {"verified": "yes"})
    found = assert_error(post(body, sign(body)), 422, "OUTPUT_INVALID", "verified")
    assert found["problems"]
    assert execution_row(runtime_conn, accepted_call.execution_id)["status"] == "SUSPENDED"


@pytest.mark.parametrize(
    "raw", [b"not json", b"[1]", b'{"externalKey": "k"}', b'{"externalKey": 1, "output": {}}']
)
def test_callback__a_malformed_body_is_invalid(runtime_conn, async_route, accepted_call, raw):
    assert_error(post(raw, sign(raw)), 400, "INVALID_BODY")


def test_callback__a_call_not_accepted_yet_is_not_waiting(runtime_conn, async_route, accepted_call):
    runtime_conn.execute(
        "UPDATE action_execution SET status = 'RUNNING' WHERE execution_id = %s",
        [accepted_call.execution_id],
    )
    body = body_of(accepted_call)
    assert_error(post(body, sign(body)), 409, "NOT_WAITING", "sent again")


def test_callback__an_unknown_or_synchronous_capability_is_unauthenticated(async_route):
    body = b'{"externalKey": "k", "output": {}}'
    assert_error(post(body, sign(body), "/api/v1/callbacks/other.thing@1"), 401, "UNAUTHENTICATED")
    assert_error(post(body, sign(body), "/api/v1/callbacks/not-a-name"), 404, "NOT_FOUND")
