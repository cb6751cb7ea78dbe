"""POST /api/v1/requests and GET /api/v1/requests/{id}."""

import json
import uuid

import pytest

from executions.flows.publication import flow_publish
from executions.models import AuditEvent, AuditType, Request
from orquestador.errors import MAX_DATA_BYTES

from .conftest import assert_error, flow_definition

pytestmark = pytest.mark.django_db

VIEW_FIELDS = {
    "id",
    "flowKey",
    "flowVersion",
    "state",
    "revision",
    "data",
    "blocked",
    "createdAt",
    "updatedAt",
}


def test_create__starts_in_the_initial_state_owned_by_the_caller(alice, flow):
    response = alice.post(
        "/api/v1/requests", {"flowKey": "claims", "data": {"applicant": "Ada", "amount": 10}}
    )
    assert response.status_code == 201
    view = response.json()
    assert set(view) == VIEW_FIELDS
    assert view["flowKey"] == "claims"
    assert view["flowVersion"] == 1
    assert view["state"] == "DRAFT"
    assert view["revision"] == 1
    assert view["data"] == {"applicant": "Ada", "amount": 10}
    assert view["blocked"] is False
    assert view["createdAt"].endswith("Z")
    assert response["Location"] == f"/api/v1/requests/{view['id']}"

    stored = Request.objects.get(id=view["id"])
    assert (stored.owner, stored.scope, stored.flow_id) == ("alice", "acme", flow.id)
    event = AuditEvent.objects.get(request=stored)
    assert event.type == AuditType.REQUEST_CREATED
    assert event.actor == "alice"
    assert event.payload == {
        "flowKey": "claims",
        "flowVersion": 1,
        "state": "DRAFT",
        "principal": "alice@acme",
    }


def test_create__without_version_pins_the_highest_published(alice, flow):
    flow_publish(definition=flow_definition(version=3, initialState="SUBMITTED"))
    flow_publish(definition=flow_definition(version=2))
    view = alice.create()
    assert view["flowVersion"] == 3
    assert view["state"] == "SUBMITTED"


def test_create__with_version_pins_that_version(alice, flow):
    flow_publish(definition=flow_definition(version=2, initialState="SUBMITTED"))
    view = alice.create(flowVersion=1)
    assert (view["flowVersion"], view["state"]) == (1, "DRAFT")


def test_create__unknown_flow_is_not_found(alice, flow):
    response = alice.post("/api/v1/requests", {"flowKey": "nope", "data": {}})
    assert_error(response, 404, "NOT_FOUND", "flow 'nope' is not published")
    assert not Request.objects.exists()


def test_create__unknown_flow_version_is_not_found(alice, flow):
    response = alice.post(
        "/api/v1/requests", {"flowKey": "claims", "flowVersion": 9, "data": {"applicant": "A"}}
    )
    assert_error(response, 404, "NOT_FOUND", "version 9 is not published")


def test_create__data_against_the_schema_names_the_path(alice, flow):
    response = alice.post(
        "/api/v1/requests", {"flowKey": "claims", "data": {"applicant": "Ada", "amount": -1}}
    )
    assert_error(response, 422, "DATA_INVALID", "$.amount")
    response = alice.post("/api/v1/requests", {"flowKey": "claims", "data": {}})
    assert_error(response, 422, "DATA_INVALID", "applicant")
    assert not Request.objects.exists()


def test_create__data_over_256_kib_is_too_large(alice, flow):
    notes = "x" * MAX_DATA_BYTES
    response = alice.post(
        "/api/v1/requests", {"flowKey": "claims", "data": {"applicant": "A", "notes": notes}}
    )
    assert_error(response, 422, "DATA_TOO_LARGE", str(MAX_DATA_BYTES))
    assert not Request.objects.exists()


def test_create__data_just_under_the_limit_is_stored(alice, flow):
    envelope = len(json.dumps({"applicant": "A", "notes": ""}, separators=(",", ":")))
    notes = "x" * (MAX_DATA_BYTES - envelope)
    view = alice.create(data={"applicant": "A", "notes": notes})
    assert len(Request.objects.get(id=view["id"]).data["notes"]) == len(notes)


@pytest.mark.parametrize(
    ("body", "fragments"),
    [
        ({"flowKey": "claims", "data": {}, "owner": "mallory"}, ["owner: unknown field"]),
        ({"flowKey": "claims", "data": {}, "a": 1, "b": 2}, ["a: unknown field", "b: unknown"]),
        ({"data": {}}, ["flowKey: is required"]),
        ({"flowKey": "claims"}, ["data: is required"]),
        ({"flowKey": 5, "data": {}}, ["flowKey: must be a string"]),
        ({"flowKey": None, "data": {}}, ["flowKey: must not be null"]),
        ({"flowKey": "", "data": {}}, ["flowKey: must not be empty"]),
        ({"flowKey": "k" * 101, "data": {}}, ["flowKey: must be at most 100"]),
        ({"flowKey": "claims", "data": []}, ["data: must be a JSON object"]),
        ({"flowKey": "claims", "data": "{}"}, ["data: must be a JSON object"]),
        ({"flowKey": "claims", "flowVersion": "1", "data": {}}, ["flowVersion: must be an int"]),
        ({"flowKey": "claims", "flowVersion": True, "data": {}}, ["flowVersion: must be an int"]),
        ({"flowKey": "claims", "flowVersion": 1.5, "data": {}}, ["flowVersion: must be an int"]),
        ({"flowKey": "claims", "flowVersion": 0, "data": {}}, ["flowVersion: must be at least"]),
        ({"flowKey": "claims", "flowVersion": 2**31, "data": {}}, ["flowVersion: must be at most"]),
        ([{"flowKey": "claims"}], ["the body must be a JSON object"]),
        ("claims", ["the body must be a JSON object"]),
        (None, ["the body must be a JSON object"]),
    ],
)
def test_create__bad_body_is_invalid_and_names_the_field(alice, flow, body, fragments):
    response = alice.post("/api/v1/requests", body)
    assert_error(response, 400, "INVALID_BODY", *fragments)
    assert not Request.objects.exists()


@pytest.mark.parametrize(
    ("raw", "content_type", "fragment"),
    [
        (b'{"flowKey": "claims", "data": {', "application/json", "not valid JSON"),
        (b"", "application/json", "the body is empty"),
        (b"\xff\xfe{}", "application/json", "not UTF-8"),
        (b'{"flowKey": "claims", "data": {"amount": NaN}}', "application/json", "NaN"),
        (b'{"flowKey": "claims", "data": {"amount": 1e400}}', "application/json", "too large"),
        (b'{"flowKey": "a", "flowKey": "b", "data": {}}', "application/json", "repeats the key"),
        (b'{"flowKey": "claims", "data": {"a": "\\u0000"}}', "application/json", "NUL"),
        (b'{"flowKey": "claims", "data": {"a": "\\ud800"}}', "application/json", "surrogate"),
        (b"flowKey=claims", "application/x-www-form-urlencoded", "Content-Type"),
        (b'{"flowKey": "claims", "data": {}}', "text/plain", "Content-Type"),
        (b'{"flowKey": "claims", "data": {}}', "", "Content-Type"),
    ],
)
def test_create__malformed_body_is_invalid(alice, flow, raw, content_type, fragment):
    response = alice.post_raw("/api/v1/requests", raw, content_type)
    assert_error(response, 400, "INVALID_BODY", fragment)
    assert not Request.objects.exists()


def test_create__deeply_nested_body_is_invalid_not_a_crash(alice, flow):
    for depth in (150, 5000):
        raw = '{"flowKey": "claims", "data": ' + "[" * depth + "]" * depth + "}"
        response = alice.post_raw("/api/v1/requests", raw, "application/json")
        assert_error(response, 400, "INVALID_BODY", "nests more than")


def test_create__body_over_one_mib_is_refused_unread(alice, flow):
    raw = '{"flowKey": "claims", "data": {"notes": "' + "x" * (1024 * 1024) + '"}}'
    response = alice.post_raw("/api/v1/requests", raw, "application/json")
    assert_error(response, 400, "INVALID_BODY", "larger than 1048576 bytes")


@pytest.mark.parametrize("size", [3 * 1024 * 1024, 40 * 1024 * 1024])
def test_create__body_of_any_size_over_the_limit_is_invalid_body(alice, flow, size):
    """Past Django's own 2.5 MiB upload limit too: JSON with a code, never an HTML page."""
    raw = b'{"flowKey": "claims", "data": {"notes": "' + b"x" * size + b'"}}'
    response = alice.post_raw("/api/v1/requests", raw, "application/json")
    assert_error(response, 400, "INVALID_BODY", "larger than 1048576 bytes")
    assert not Request.objects.exists()


@pytest.mark.parametrize(
    "body",
    [
        '{"flowKey": "claims", "data": {"applicant": "Ada", "amount": %s}}',
        '{"flowKey": "claims", "flowVersion": %s, "data": {"applicant": "Ada"}}',
        '{"flowKey": "claims", "data": {"applicant": "Ada", "list": [-%s]}}',
    ],
    ids=["in-data", "flowVersion", "negative-in-a-list"],
)
def test_create__integer_over_4300_digits_is_invalid_body(alice, flow, body):
    response = alice.post_raw("/api/v1/requests", body % ("9" * 4301), "application/json")
    assert_error(response, 400, "INVALID_BODY", "integer longer than 4300 digits")
    assert not Request.objects.exists()


def test_transition__expected_revision_over_4300_digits_is_invalid_body(alice, flow):
    created = alice.create()
    raw = '{"transitionId": "submit", "expectedRevision": %s}' % ("1" * 5000)
    response = alice.post_raw(
        f"/api/v1/requests/{created['id']}/transitions", raw, "application/json"
    )
    assert_error(response, 400, "INVALID_BODY", "integer longer than 4300 digits")


def test_create__charset_parameter_is_accepted(alice, flow):
    body = json.dumps({"flowKey": "claims", "data": {"applicant": "Zoë"}}).encode()
    response = alice.post_raw("/api/v1/requests", body, "application/json; charset=utf-8")
    assert response.status_code == 201
    assert response.json()["data"] == {"applicant": "Zoë"}


def test_get__returns_the_request_view(alice, flow):
    created = alice.create(data={"applicant": "Ada"})
    response = alice.get(f"/api/v1/requests/{created['id']}")
    assert response.status_code == 200
    assert response.json() == created


@pytest.mark.parametrize("who", ["bob", "alice_elsewhere"])
def test_get__another_owners_or_tenants_request_is_not_found(request, alice, flow, who):
    created = alice.create()
    other = request.getfixturevalue(who)
    assert_error(other.get(f"/api/v1/requests/{created['id']}"), 404, "NOT_FOUND")


@pytest.mark.parametrize(
    "request_id", [str(uuid.uuid4()), "not-a-uuid", "1", "%00", "' OR 1=1 --", "x" * 300]
)
def test_get__missing_or_malformed_id_is_not_found(alice, flow, request_id):
    assert_error(alice.get(f"/api/v1/requests/{request_id}"), 404, "NOT_FOUND")


def test_get__tenant_reader_sees_every_request_of_its_tenant_only(alice, bob, auditor, flow):
    mine = alice.create()
    theirs = bob.create()
    elsewhere = Request.objects.create(
        flow=flow, owner="alice", scope="globex", data={"applicant": "A"}, state="DRAFT"
    )
    assert auditor.get(f"/api/v1/requests/{mine['id']}").status_code == 200
    assert auditor.get(f"/api/v1/requests/{theirs['id']}").status_code == 200
    assert_error(auditor.get(f"/api/v1/requests/{elsewhere.id}"), 404, "NOT_FOUND")


def test_create__needs_requests_write(auditor, flow):
    response = auditor.post("/api/v1/requests", {"flowKey": "claims", "data": {"applicant": "A"}})
    assert_error(response, 403, "FORBIDDEN", "requests:write")
    assert not Request.objects.exists()


@pytest.mark.parametrize("length", ["²", "9" * 5000, "-1", "1e9"])
def test_create__a_strange_content_length_is_never_a_500(alice, flow, length):
    body = b'{"flowKey": "claims", "data": {"applicant": "Ada"}}'
    response = alice.client.generic(
        "POST",
        "/api/v1/requests",
        data=body,
        content_type="application/json",
        CONTENT_LENGTH=length,
        **alice.headers,
    )
    assert response.status_code in (201, 400), response.content
    assert response["Content-Type"].startswith("application/json")
    assert "code" in response.json() or "id" in response.json()
