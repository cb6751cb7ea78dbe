"""What is mounted when: REQUEST_API_ENABLED, FLOW_ADMIN_ENABLED, the always-on schema, JSON 404
and 405, and the refusal to start without a JWT key."""

import subprocess
import uuid

import pytest
from django.test import Client

from tests.conftest import manage
from tests.support import tokens

from .conftest import Caller, api_enabled, assert_error, caller

pytestmark = pytest.mark.django_db

REQUEST_PATHS = [
    ("POST", "/api/v1/requests"),
    ("GET", f"/api/v1/requests/{uuid.uuid4()}"),
    ("POST", f"/api/v1/requests/{uuid.uuid4()}/transitions"),
    ("GET", f"/api/v1/executions/{uuid.uuid4()}"),
]
FLOW_PATHS = [("GET", "/api/v1/flows"), ("POST", "/api/v1/flows")]
EVERYTHING = "requests:write requests:read requests:read:tenant flows:admin"


def send(method: str, path: str):
    who = caller(scope=EVERYTHING)
    return who.get(path) if method == "GET" else who.post(path, {})


def test_both_off__no_api_path_is_mounted_but_the_schema_is():
    with api_enabled(requests=False, flows=False):
        for method, path in REQUEST_PATHS + FLOW_PATHS:
            assert_error(send(method, path), 404, "NOT_FOUND", "no such API endpoint")
        assert Client().get("/api/schema/").status_code == 200
        assert Client().get("/healthz").status_code == 200


def test_requests_on_flows_off():
    with api_enabled(requests=True, flows=False):
        for method, path in FLOW_PATHS:
            assert_error(send(method, path), 404, "NOT_FOUND", "no such API endpoint")
        assert send(*REQUEST_PATHS[1]).status_code == 404  # mounted: a 404 for the id
        assert send(*REQUEST_PATHS[1]).json()["detail"] == "no such request"


def test_flows_on_requests_off():
    with api_enabled(requests=False, flows=True):
        for method, path in REQUEST_PATHS:
            assert_error(send(method, path), 404, "NOT_FOUND", "no such API endpoint")
        assert send(*FLOW_PATHS[0]).status_code == 200


@pytest.mark.parametrize(
    "path", ["/api/", "/api/v2/requests", "/api/v1/requests/x/y", "/api/v1/nothing"]
)
def test_unknown_api_urls__are_json_404_for_any_method(api, path):
    client = Client(enforce_csrf_checks=True)
    for response in (client.get(path), client.post(path, {}), client.delete(path)):
        assert_error(response, 404, "NOT_FOUND")


def test_a_method_the_path_does_not_serve__is_json_405(alice, flow):
    created = alice.create()
    path = f"/api/v1/requests/{created['id']}"
    response = alice.client.delete(path, **alice.headers)
    assert_error(response, 405, "METHOD_NOT_ALLOWED", "DELETE")
    assert "GET" in response["Allow"]
    assert_error(alice.client.options(path, **alice.headers), 405, "METHOD_NOT_ALLOWED")
    # Without a token, the 401 comes first.
    assert_error(Caller(None).client.delete(path), 401, "UNAUTHENTICATED")


def test_accept_header_does_not_change_the_representation(alice, flow):
    created = alice.create()
    response = alice.get(f"/api/v1/requests/{created['id']}", HTTP_ACCEPT="text/html")
    assert response.status_code == 200
    assert response["Content-Type"] == "application/json"


@pytest.mark.process
@pytest.mark.parametrize(
    ("overrides", "fragments"),
    [
        (
            {"REQUEST_API_ENABLED": "true"},
            ["REQUEST_API_ENABLED", "JWT_SECRET", "JWT_PUBLIC_KEY"],
        ),
        ({"FLOW_ADMIN_ENABLED": "true"}, ["JWT_SECRET", "JWT_PUBLIC_KEY"]),
        ({"REQUEST_API_ENABLED": "true", "JWT_PUBLIC_KEY": "not a key"}, ["JWT_PUBLIC_KEY"]),
        ({"REQUEST_API_ENABLED": "true", "JWT_SECRET": "short"}, ["JWT_SECRET", "32 bytes"]),
        (
            {"REQUEST_API_ENABLED": "true", "JWT_SECRET": tokens.SECRET, "JWT_PUBLIC_KEY": "x"},
            ["only one of JWT_SECRET"],
        ),
        (
            {"JWT_JWKS_URL": "https://idp.example/keys", "JWT_SECRET": tokens.SECRET},
            ["JWT_JWKS_URL", "JWT_SECRET or JWT_PUBLIC_KEY", "not both"],
        ),
        (
            {"REQUEST_API_ENABLED": "true", "JWT_JWKS_URL": "http://idp.example/keys"},
            ["JWT_JWKS_URL must be https://", "127.0.0.1 and localhost only"],
        ),
        (
            {"JWT_JWKS_URL": "https://idp.example/keys", "JWT_JWKS_CACHE_SECONDS": "0"},
            ["JWT_JWKS_CACHE_SECONDS"],
        ),
    ],
)
def test_startup__refused_without_a_usable_jwt_key(process_env, overrides, fragments):
    env = {**process_env, "JWT_SECRET": "", "JWT_PUBLIC_KEY": "", "JWT_JWKS_URL": "", **overrides}
    result = subprocess.run(
        manage("check"), env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode != 0
    for fragment in fragments:
        assert fragment in result.stderr


@pytest.mark.process
@pytest.mark.parametrize("url", ["https://idp.example/keys", "http://127.0.0.1:9/keys"])
def test_startup__accepted_with_a_jwks_url_and_nothing_fetched(process_env, url):
    # The keys are fetched when a token first needs them: nothing listens at either URL.
    env = {**process_env, "REQUEST_API_ENABLED": "true", "JWT_SECRET": "", "JWT_JWKS_URL": url}
    result = subprocess.run(
        manage("check"), env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr


@pytest.mark.process
def test_startup__accepted_with_a_secret(process_env):
    env = {**process_env, "REQUEST_API_ENABLED": "true", "JWT_SECRET": tokens.SECRET}
    result = subprocess.run(
        manage("check"), env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr
