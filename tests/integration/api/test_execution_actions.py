"""GET /api/v1/executions/{id}/actions: an execution's steps in the order they ran, what a client
shows as progress, and never an input, output, external key or provider answer."""

import uuid

import pytest
from django.db.models.functions import Now

from executions.models import ActionExecution

from .conftest import assert_error

pytestmark = pytest.mark.django_db

STEP_FIELDS = {
    "actionId",
    "capability",
    "version",
    "effect",
    "status",
    "attempts",
    "startedAt",
    "finishedAt",
    "errorCode",
    "compensates",
}


@pytest.fixture
def accepted(alice, flow) -> dict:
    created = alice.create()
    response = alice.accept(created["id"], "submit", 1)
    assert response.status_code == 202
    return response.json()


def step(execution_id: str, action_id: str, sequence: int, **fields) -> None:
    ActionExecution.objects.create(
        execution_id=execution_id,
        action_id=action_id,
        sequence=sequence,
        capability=fields.pop("capability", "payments.charge"),
        capability_version=fields.pop("capability_version", 2),
        effect=fields.pop("effect", "NON_IDEMPOTENT_WRITE"),
        status=fields.pop("status", "SUCCEEDED"),
        input_hash="f" * 64,
        external_key=f"{execution_id}:{action_id}",
        fencing_token=7,
        **fields,
    )


def test_actions__in_the_order_they_ran_with_only_the_public_fields(alice, accepted):
    execution_id = accepted["id"]
    step(execution_id, "reserve", 1, effect="IDEMPOTENT_WRITE", finished_at=Now(), attempt=2)
    step(
        execution_id,
        "charge",
        2,
        status="FAILED",
        error_code="PERMANENT_FAILURE",
        error_detail="HTTP 402 from https://payments.internal: card SECRET-4242",
        output={"provider": "raw SECRET answer"},
        finished_at=Now(),
    )
    step(execution_id, "reserve:compensate", 3, capability="payments.release", status="RUNNING")
    response = alice.get(f"/api/v1/executions/{execution_id}/actions")
    assert response.status_code == 200, response.content
    body = response.json()
    assert set(body) == {"results"}
    steps = body["results"]
    assert [s["actionId"] for s in steps] == ["reserve", "charge", "reserve:compensate"]
    assert all(set(s) == STEP_FIELDS for s in steps)
    first, second, third = steps
    assert (first["capability"], first["version"], first["effect"]) == (
        "payments.charge",
        2,
        "IDEMPOTENT_WRITE",
    )
    assert (first["status"], first["attempts"], first["errorCode"]) == ("SUCCEEDED", 2, None)
    assert first["startedAt"].endswith("Z") and first["finishedAt"].endswith("Z")
    assert (second["status"], second["errorCode"]) == ("FAILED", "PERMANENT_FAILURE")
    assert (first["compensates"], second["compensates"]) == (None, None)
    assert (third["compensates"], third["finishedAt"]) == ("reserve", None)
    text = response.content.decode()
    for hidden in ("SECRET", "payments.internal", "ffffffff", f"{execution_id}:", "fencing"):
        assert hidden not in text


def test_actions__none_yet_is_an_empty_list(alice, accepted):
    response = alice.get(f"/api/v1/executions/{accepted['id']}/actions")
    assert response.status_code == 200
    assert response.json() == {"results": []}


def test_actions__the_tenants_reader_sees_them(auditor, accepted):
    step(accepted["id"], "reserve", 1)
    response = auditor.get(f"/api/v1/executions/{accepted['id']}/actions")
    assert [s["actionId"] for s in response.json()["results"]] == ["reserve"]


@pytest.mark.parametrize("who", ["bob", "alice_elsewhere"])
def test_actions__another_owners_or_tenants_execution_is_not_found(request, accepted, who):
    step(accepted["id"], "reserve", 1)
    other = request.getfixturevalue(who)
    response = other.get(f"/api/v1/executions/{accepted['id']}/actions")
    assert_error(response, 404, "NOT_FOUND", "no such execution")


@pytest.mark.parametrize("execution_id", [str(uuid.uuid4()), "abc"])
def test_actions__an_unknown_or_malformed_id_is_not_found(alice, flow, execution_id):
    response = alice.get(f"/api/v1/executions/{execution_id}/actions")
    assert_error(response, 404, "NOT_FOUND", "no such execution")


def test_actions__needs_a_read_permission(api, accepted):
    from .conftest import caller

    writer_only = caller(sub="alice", tenant="acme", scope="requests:write")
    response = writer_only.get(f"/api/v1/executions/{accepted['id']}/actions")
    assert_error(response, 403, "FORBIDDEN")
    assert_error(writer_only.get("/api/v1/executions"), 403, "FORBIDDEN")
    assert_error(writer_only.get("/api/v1/requests"), 403, "FORBIDDEN")
