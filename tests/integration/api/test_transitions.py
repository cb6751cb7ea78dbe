"""POST /api/v1/requests/{id}/transitions: acceptance, its refusals, and Idempotency-Key."""

import uuid

import pytest
from django.db import connection
from django.db.models import F
from django.test import Client

from executions.models import AuditEvent, AuditType, Execution, ExecutionStatus, Request

from .conftest import Caller, assert_error

pytestmark = pytest.mark.django_db

EXECUTION_FIELDS = {
    "id",
    "requestId",
    "transitionId",
    "status",
    "outcome",
    "targetState",
    "errorCode",
    "attempts",
    "createdAt",
    "finishedAt",
}


def finish(request_id: str, *, state: str) -> None:
    """What a worker's finalisation does to the request: new state and revision, unblocked."""
    Request.objects.filter(id=request_id).update(
        state=state, blocked_by=None, revision=F("revision") + 1, version=F("version") + 1
    )


def test_accept__creates_a_pending_execution_and_blocks_the_request(alice, flow):
    created = alice.create()
    response = alice.accept(created["id"], "submit", 1)

    assert response.status_code == 202
    view = response.json()
    assert set(view) == EXECUTION_FIELDS
    assert response["Location"] == f"/api/v1/executions/{view['id']}"
    assert view["requestId"] == created["id"]
    assert view["transitionId"] == "submit"
    assert view["status"] == "PENDING"
    assert (view["outcome"], view["targetState"], view["errorCode"]) == (None, None, None)
    assert (view["attempts"], view["finishedAt"]) == (0, None)

    execution = Execution.objects.get(id=view["id"])
    request = Request.objects.get(id=created["id"])
    assert execution.status == ExecutionStatus.PENDING
    assert execution.flow_id == flow.id == request.flow_id
    assert execution.accepted_revision == 2 == request.revision
    assert request.version == 2
    assert request.blocked_by_id == execution.id
    assert request.state == "DRAFT"  # the state moves when the worker finishes
    assert request.updated_at > request.created_at
    assert execution.actor_snapshot == {
        "subject": "alice",
        "scope": "acme",
        "roles": ["requests:read", "requests:write"],
    }
    accepted = AuditEvent.objects.get(request=request, type=AuditType.TRANSITION_ACCEPTED)
    assert accepted.execution_id == execution.id
    assert accepted.actor == "alice"
    assert accepted.payload == {
        "transitionId": "submit",
        "fromState": "DRAFT",
        "acceptedRevision": 2,
        "principal": "alice@acme",
    }

    after = alice.get(f"/api/v1/requests/{created['id']}").json()
    assert (after["revision"], after["blocked"], after["state"]) == (2, True, "DRAFT")


def test_accept__unknown_transition(alice, flow):
    created = alice.create()
    response = alice.accept(created["id"], "teleport", 1)
    assert_error(response, 422, "UNKNOWN_TRANSITION", "'teleport'")
    assert not Execution.objects.exists()


def test_accept__state_does_not_allow_it(alice, flow):
    created = alice.create()
    response = alice.accept(created["id"], "close", 1)
    assert_error(response, 422, "TRANSITION_NOT_ALLOWED", "'close'", "'DRAFT'")
    assert not Execution.objects.exists()


def test_accept__blocked_request_is_a_conflict(alice, flow):
    created = alice.create()
    first = alice.accept(created["id"], "submit", 1).json()
    response = alice.accept(created["id"], "submit", 2)
    assert_error(response, 409, "REQUEST_BLOCKED", first["id"])
    assert Execution.objects.count() == 1
    assert Request.objects.get(id=created["id"]).revision == 2


def test_accept__stale_revision_is_a_conflict(alice, flow):
    created = alice.create()
    response = alice.accept(created["id"], "submit", 7)
    assert_error(response, 409, "REVISION_CONFLICT", "expectedRevision is 7", "revision 1")
    stored = Request.objects.get(id=created["id"])
    assert (stored.revision, stored.version, stored.blocked_by_id) == (1, 1, None)


def test_accept__after_the_worker_finished_the_next_transition_is_accepted(alice, flow):
    created = alice.create()
    alice.accept(created["id"], "submit", 1)
    finish(created["id"], state="SUBMITTED")
    response = alice.accept(created["id"], "close", 3)
    assert response.status_code == 202, response.content
    assert Execution.objects.get(id=response.json()["id"]).accepted_revision == 4


@pytest.mark.parametrize("who", ["bob", "alice_elsewhere"])
def test_accept__another_owners_or_tenants_request_is_not_found(request, alice, flow, who):
    created = alice.create()
    other = request.getfixturevalue(who)
    assert_error(other.accept(created["id"], "submit", 1), 404, "NOT_FOUND")
    stored = Request.objects.get(id=created["id"])
    assert (stored.revision, stored.blocked_by_id) == (1, None)
    assert not Execution.objects.exists()


def test_accept__tenant_reader_may_not_write(alice, auditor, flow):
    created = alice.create()
    assert_error(auditor.accept(created["id"], "submit", 1), 403, "FORBIDDEN", "requests:write")
    assert not Execution.objects.exists()


@pytest.mark.parametrize("request_id", [str(uuid.uuid4()), "nope", "0"])
def test_accept__missing_or_malformed_request_is_not_found(alice, flow, request_id):
    assert_error(alice.accept(request_id, "submit", 1), 404, "NOT_FOUND")


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ({"transitionId": "submit"}, "expectedRevision: is required"),
        ({"expectedRevision": 1}, "transitionId: is required"),
        ({"transitionId": "submit", "expectedRevision": "1"}, "expectedRevision: must be an int"),
        ({"transitionId": "submit", "expectedRevision": 1.0}, "expectedRevision: must be an int"),
        ({"transitionId": "submit", "expectedRevision": 0}, "expectedRevision: must be at least"),
        ({"transitionId": "submit", "expectedRevision": 2**63}, "expectedRevision: must be at m"),
        ({"transitionId": ["submit"], "expectedRevision": 1}, "transitionId: must be a string"),
        ({"transitionId": "submit", "expectedRevision": 1, "force": True}, "force: unknown"),
        ([], "the body must be a JSON object"),
    ],
)
def test_accept__bad_body_is_invalid(alice, flow, body, fragment):
    created = alice.create()
    response = alice.post(f"/api/v1/requests/{created['id']}/transitions", body)
    assert_error(response, 400, "INVALID_BODY", fragment)
    assert not Execution.objects.exists()


def test_accept__malformed_json_is_invalid(alice, flow):
    created = alice.create()
    response = alice.post_raw(
        f"/api/v1/requests/{created['id']}/transitions", b'{"transitionId": ', "application/json"
    )
    assert_error(response, 400, "INVALID_BODY", "not valid JSON")


REFUSE_ACCEPTED_AUDIT = """
CREATE FUNCTION test_refuse_accepted_audit() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.type = 'TRANSITION_ACCEPTED' THEN
        RAISE EXCEPTION 'audit store unavailable';
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER test_refuse_accepted_audit BEFORE INSERT ON audit_event
    FOR EACH ROW EXECUTE FUNCTION test_refuse_accepted_audit();
"""


def test_accept__a_failing_step_rolls_everything_back(alice, flow):
    created = alice.create()
    with connection.cursor() as cursor:  # the test's own transaction: gone when it ends
        cursor.execute(REFUSE_ACCEPTED_AUDIT)
    client = Caller(None, Client(raise_request_exception=False))
    client.headers = alice.headers
    response = client.accept(created["id"], "submit", 1)

    assert_error(response, 500, "INTERNAL_ERROR")
    assert "audit store" not in response.content.decode()
    stored = Request.objects.get(id=created["id"])
    assert (stored.revision, stored.version, stored.blocked_by_id) == (1, 1, None)
    assert not Execution.objects.exists()


# -- Idempotency-Key -----------------------------------------------------------------------------


def test_idempotency__a_retry_returns_the_same_execution(alice, flow):
    created = alice.create()
    first = alice.accept(created["id"], "submit", 1, HTTP_IDEMPOTENCY_KEY="k-1")
    retry = alice.accept(created["id"], "submit", 1, HTTP_IDEMPOTENCY_KEY="k-1")
    assert (first.status_code, retry.status_code) == (202, 202)
    assert retry.json() == first.json()
    assert retry["Location"] == first["Location"]
    assert Execution.objects.count() == 1
    assert AuditEvent.objects.filter(type=AuditType.TRANSITION_ACCEPTED).count() == 1
    assert Request.objects.get(id=created["id"]).revision == 2


def test_idempotency__a_retry_after_the_request_moved_on_still_returns_it(alice, flow):
    created = alice.create()
    first = alice.accept(created["id"], "submit", 1, HTTP_IDEMPOTENCY_KEY="k-1").json()
    Execution.objects.filter(id=first["id"]).update(
        status=ExecutionStatus.SUCCEEDED,
        result={"outcome": "DONE", "targetState": "SUBMITTED"},
        finished_at=F("created_at"),
    )
    finish(created["id"], state="SUBMITTED")

    retry = alice.accept(created["id"], "submit", 1, HTTP_IDEMPOTENCY_KEY="k-1")
    assert retry.status_code == 202
    assert retry["Location"] == f"/api/v1/executions/{first['id']}"
    assert retry.json()["id"] == first["id"]
    assert retry.json()["status"] == "SUCCEEDED"
    assert Execution.objects.count() == 1


def test_idempotency__the_same_key_with_another_body_is_refused(alice, flow):
    created = alice.create()
    alice.accept(created["id"], "submit", 1, HTTP_IDEMPOTENCY_KEY="k-1")
    finish(created["id"], state="SUBMITTED")
    response = alice.accept(created["id"], "close", 3, HTTP_IDEMPOTENCY_KEY="k-1")
    assert_error(response, 422, "IDEMPOTENCY_KEY_REUSED", "different body")
    assert Execution.objects.count() == 1
    assert Request.objects.get(id=created["id"]).blocked_by_id is None


def test_idempotency__keys_are_per_request(alice, flow):
    one, two = alice.create(), alice.create()
    first = alice.accept(one["id"], "submit", 1, HTTP_IDEMPOTENCY_KEY="same")
    second = alice.accept(two["id"], "submit", 1, HTTP_IDEMPOTENCY_KEY="same")
    assert first.json()["id"] != second.json()["id"]
    assert Execution.objects.count() == 2


def test_idempotency__a_refused_acceptance_does_not_use_up_the_key(alice, flow):
    created = alice.create()
    stale = alice.accept(created["id"], "submit", 5, HTTP_IDEMPOTENCY_KEY="k-1")
    assert_error(stale, 409, "REVISION_CONFLICT")
    fixed = alice.accept(created["id"], "submit", 1, HTTP_IDEMPOTENCY_KEY="k-2")
    assert fixed.status_code == 202


def test_idempotency__another_owner_cannot_replay_a_key(alice, bob, flow):
    created = alice.create()
    alice.accept(created["id"], "submit", 1, HTTP_IDEMPOTENCY_KEY="k-1")
    assert_error(
        bob.accept(created["id"], "submit", 1, HTTP_IDEMPOTENCY_KEY="k-1"), 404, "NOT_FOUND"
    )


@pytest.mark.parametrize("key", ["", " padded", "x" * 256, "tab\there", "ключ", "nul\x00"])
def test_idempotency__a_malformed_key_is_invalid(alice, flow, key):
    created = alice.create()
    response = alice.accept(created["id"], "submit", 1, HTTP_IDEMPOTENCY_KEY=key)
    assert_error(response, 400, "INVALID_BODY", "Idempotency-Key")
    assert not Execution.objects.exists()


def test_idempotency__the_longest_key_is_accepted(alice, flow):
    created = alice.create()
    key = "k" * 255
    response = alice.accept(created["id"], "submit", 1, HTTP_IDEMPOTENCY_KEY=key)
    assert response.status_code == 202
    assert Execution.objects.get().idempotency_key == key
