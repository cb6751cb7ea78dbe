"""POST and GET /api/v1/flows, for scope flows:admin."""

import pytest

from executions.flows.canonical import sha256_hex
from executions.models import Flow

from .conftest import FLOW, assert_error, flow_definition

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
