"""GET /api/v1/executions/{id}: the ExecutionView and nothing more."""

import uuid

import pytest
from django.db.models.functions import Now

from executions.models import Execution, ExecutionStatus

from .conftest import assert_error
from .test_transitions import EXECUTION_FIELDS

pytestmark = pytest.mark.django_db


@pytest.fixture
def accepted(alice, flow) -> dict:
    created = alice.create()
    response = alice.accept(created["id"], "submit", 1)
    assert response.status_code == 202
    return response.json()


def test_get__returns_the_view_at_the_location(alice, accepted):
    response = alice.get(f"/api/v1/executions/{accepted['id']}")
    assert response.status_code == 200
    assert response.json() == accepted


def test_get__shows_the_business_result_and_safe_code_only(alice, accepted):
    Execution.objects.filter(id=accepted["id"]).update(
        status=ExecutionStatus.FAILED,
        attempts=3,
        fencing_token=987654321,
        lease_owner="worker-host-7:1234",
        result={"outcome": "REJECTED", "targetState": "CLOSED", "raw": "provider-said-SECRET"},
        error_code="PERMANENT_FAILURE",
        error_detail="HTTP 400 from https://payments.internal/charges: card SECRET-4242",
        actor_snapshot={"subject": "alice", "scope": "acme", "roles": ["token-SECRET"]},
        finished_at=Now(),
    )
    response = alice.get(f"/api/v1/executions/{accepted['id']}")
    view = response.json()
    assert set(view) == EXECUTION_FIELDS
    assert view["status"] == "FAILED"
    assert (view["outcome"], view["targetState"]) == ("REJECTED", "CLOSED")
    assert (view["errorCode"], view["attempts"]) == ("PERMANENT_FAILURE", 3)
    assert view["finishedAt"].endswith("Z")
    text = response.content.decode()
    for hidden in ("SECRET", "worker-host", "payments.internal", "987654321", "roles", "lease"):
        assert hidden not in text


@pytest.mark.parametrize("who", ["bob", "alice_elsewhere"])
def test_get__another_owners_or_tenants_execution_is_not_found(request, accepted, who):
    other = request.getfixturevalue(who)
    assert_error(other.get(f"/api/v1/executions/{accepted['id']}"), 404, "NOT_FOUND")


@pytest.mark.parametrize("execution_id", [str(uuid.uuid4()), "abc", "12345"])
def test_get__missing_or_malformed_id_is_not_found(alice, flow, execution_id):
    assert_error(alice.get(f"/api/v1/executions/{execution_id}"), 404, "NOT_FOUND")


def test_get__tenant_reader_sees_its_tenants_executions(auditor, accepted):
    assert auditor.get(f"/api/v1/executions/{accepted['id']}").status_code == 200


def test_get__needs_a_read_permission(accepted):
    from .conftest import caller

    writer_only = caller(sub="alice", tenant="acme", scope="requests:write")
    response = writer_only.get(f"/api/v1/executions/{accepted['id']}")
    assert_error(response, 403, "FORBIDDEN", "requests:read", "requests:read:tenant")
