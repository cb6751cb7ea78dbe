"""POST and GET /api/v1/flows, for scope flows:admin."""

import time

import pytest

from executions.flows.canonical import sha256_hex
from executions.models import Flow, Request

from .conftest import FLOW, assert_error, caller, flow_definition

pytestmark = pytest.mark.django_db


def test_publish__new_version_is_created(admin):
    response = admin.post("/api/v1/flows", FLOW)
    assert response.status_code == 201
    view = response.json()
    assert set(view) == {"key", "version", "checksum", "publishedAt"}
    assert (view["key"], view["version"]) == ("claims", 1)
    assert view["checksum"] == sha256_hex(FLOW)
    assert Flow.objects.get().definition == FLOW


def test_publish__identical_content_is_unchanged(admin):
    first = admin.post("/api/v1/flows", FLOW).json()
    again = admin.post("/api/v1/flows", FLOW)
    assert again.status_code == 200
    assert again.json() == first
    assert Flow.objects.count() == 1


def test_publish__different_content_for_a_published_version_conflicts(admin):
    admin.post("/api/v1/flows", FLOW)
    response = admin.post("/api/v1/flows", flow_definition(initialState="SUBMITTED"))
    assert_error(response, 409, "FLOW_CONFLICT", "claims@1")
    assert Flow.objects.get().definition == FLOW


def test_publish__invalid_definition_lists_every_problem_with_its_path(admin):
    broken = flow_definition(initialState="LIMBO", states=["DRAFT", "DRAFT"], extra=1)
    body = assert_error(admin.post("/api/v1/flows", broken), 422, "FLOW_INVALID", "$.initialState")
    paths = {problem["path"] for problem in body["problems"]}
    assert {"$.extra", "$.initialState", "$.states[1]"} <= paths
    assert all(problem["message"] for problem in body["problems"])
    assert not Flow.objects.exists()


@pytest.mark.parametrize("body", [[FLOW], "claims", 1, None])
def test_publish__non_object_body_is_invalid(admin, body):
    assert_error(admin.post("/api/v1/flows", body), 400, "INVALID_BODY", "JSON object")


def test_publish__malformed_json_is_invalid(admin):
    response = admin.post_raw("/api/v1/flows", b'{"key": "claims",', "application/json")
    assert_error(response, 400, "INVALID_BODY", "not valid JSON")


def test_list__every_version_by_key_then_version(admin):
    for definition in (
        flow_definition(version=2),
        flow_definition(key="alpha"),
        flow_definition(version=1),
    ):
        assert admin.post("/api/v1/flows", definition).status_code == 201
    response = admin.get("/api/v1/flows")
    assert response.status_code == 200
    listed = response.json()
    assert [(f["key"], f["version"]) for f in listed] == [
        ("alpha", 1),
        ("claims", 1),
        ("claims", 2),
    ]
    assert all(set(f) == {"key", "version", "checksum", "publishedAt"} for f in listed)


def test_publish_then_create__the_new_version_is_used(admin, alice):
    admin.post("/api/v1/flows", FLOW)
    admin.post("/api/v1/flows", flow_definition(version=2, initialState="SUBMITTED"))
    assert alice.create()["flowVersion"] == 2


# --- Flows are platform-wide (docs/adr/0007-platform-wide-flows.md) ---------------------------


def test_platform_wide__a_flow_published_by_any_tenants_admin_serves_every_tenant(
    alice, alice_elsewhere
):
    globex_admin = caller(sub="ops", tenant="globex", scope="flows:admin")
    assert globex_admin.post("/api/v1/flows", FLOW).status_code == 201
    for requester in (alice, alice_elsewhere):
        assert requester.create()["flowVersion"] == 1
    acme_admin = caller(sub="root", tenant="acme", scope="flows:admin")
    listed = acme_admin.get("/api/v1/flows").json()
    assert [(f["key"], f["version"]) for f in listed] == [("claims", 1)]


def test_platform_wide__a_loadflow_flow_is_usable_by_every_tenant(flow, alice, alice_elsewhere):
    """`manage.py loadflow` (flow_publish, no tenant at all) publishes for everyone."""
    mine, theirs = alice.create(), alice_elsewhere.create()
    assert (mine["flowKey"], theirs["flowKey"]) == ("claims", "claims")
    assert_error(alice.get(f"/api/v1/requests/{theirs['id']}"), 404, "NOT_FOUND")


def test_platform_wide__one_token_publishes_and_creates_requests_on_its_flow(api):
    both = caller(sub="ops", tenant="acme", scope="flows:admin requests:write requests:read")
    assert both.post("/api/v1/flows", FLOW).status_code == 201
    created = both.create()
    assert created["flowKey"] == "claims"
    assert both.get(f"/api/v1/requests/{created['id']}").status_code == 200
    stored = Request.objects.get(id=created["id"])
    assert (stored.owner, stored.scope) == ("ops", "acme")  # requests stay the tenant's


def test_platform_wide__flows_admin_alone_reads_no_tenants_requests(alice, admin, flow):
    created = alice.create()
    assert_error(admin.get(f"/api/v1/requests/{created['id']}"), 403, "FORBIDDEN")


def _fan_out(depth: int) -> dict:
    """`l_i = {"anyOf": [{"$ref": "#/$defs/l_{i-1}"}] x 10}`: 17 s per request at depth 5."""
    defs: dict = {"l_0": {"type": "string"}}
    for level in range(1, depth + 1):
        defs[f"l_{level}"] = {"anyOf": [{"$ref": f"#/$defs/l_{level - 1}"} for _ in range(10)]}
    return {"$defs": defs, "$ref": f"#/$defs/l_{depth}"}


@pytest.mark.parametrize("depth", [3, 6, 29])
def test_publish__a_schema_that_fans_out_is_refused_with_the_part_where_it_does(admin, depth):
    response = admin.post("/api/v1/flows", flow_definition(dataSchema=_fan_out(depth)))
    body = assert_error(response, 422, "FLOW_INVALID", "$.dataSchema['$defs'].l_3")
    assert [p["path"] for p in body["problems"]] == ["$.dataSchema['$defs'].l_3"]
    assert "more than 10000 steps" in body["problems"][0]["message"]
    assert not Flow.objects.exists()


def test_create__a_costly_schema_stored_before_the_check_is_refused_within_the_budget(alice):
    definition = flow_definition(dataSchema=_fan_out(6))
    Flow.objects.create(key="claims", version=1, definition=definition, checksum="0" * 64)
    started = time.perf_counter()
    response = alice.post("/api/v1/requests", {"flowKey": "claims", "data": {"applicant": "A"}})
    assert time.perf_counter() - started < 8.0  # seconds; minutes, and gigabytes, before
    assert_error(response, 422, "DATA_INVALID", "would take more than 1000000 steps")
    assert not Request.objects.exists()
