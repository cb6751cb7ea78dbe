"""Fixtures for the API: the switches on (URLs reloaded as a process would load them), a flow,
and callers holding real signed tokens.

`api_enabled()` overrides the settings and reloads the URL modules, so the paths are mounted (or
not) by the same code a starting process runs; leaving it reloads them again as they were.
"""

import copy
import importlib
import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from django.test import Client, override_settings
from django.urls import clear_url_caches

from executions.flows.publication import flow_publish
from executions.models import Flow
from tests.support import tokens

FLOW: dict[str, Any] = {
    "key": "claims",
    "version": 1,
    "initialState": "DRAFT",
    "states": ["DRAFT", "SUBMITTED", "CLOSED"],
    "dataSchema": {
        "type": "object",
        "required": ["applicant"],
        "properties": {
            "applicant": {"type": "string", "minLength": 1},
            "amount": {"type": "number", "minimum": 0},
            "notes": {"type": "string"},
        },
    },
    "transitions": [
        {
            "id": "submit",
            "from": ["DRAFT"],
            "actions": [],
            "decision": {
                "hitPolicy": "FIRST",
                "rules": [{"id": "go", "when": True, "target": "SUBMITTED", "outcome": "DONE"}],
            },
        },
        {
            "id": "close",
            "from": ["SUBMITTED"],
            "actions": [],
            "decision": {
                "hitPolicy": "FIRST",
                "rules": [{"id": "go", "when": True, "target": "CLOSED", "outcome": "CLOSED"}],
            },
        },
    ],
}


def flow_definition(**changes: Any) -> dict[str, Any]:
    definition = copy.deepcopy(FLOW)
    definition.update(changes)
    return definition


def _reload_urls() -> None:
    import executions.api.urls
    import executions.urls
    import orquestador.urls

    importlib.reload(executions.api.urls)
    importlib.reload(executions.urls)
    importlib.reload(orquestador.urls)
    clear_url_caches()


@contextmanager
def api_enabled(
    *,
    requests: bool = True,
    flows: bool = True,
    secret: str = tokens.SECRET,
    public_key: str = "",
    jwks_url: str = "",
    **jwt_settings: Any,
) -> Iterator[None]:
    """`jwt_settings`: more JWT_* settings (JWT_TENANT_CLAIM, JWT_ISSUER, ...)."""
    with (
        override_settings(
            REQUEST_API_ENABLED=requests,
            FLOW_ADMIN_ENABLED=flows,
            JWT_SECRET=secret,
            JWT_PUBLIC_KEY=public_key,
            JWT_JWKS_URL=jwks_url,
            JWT_ISSUER=tokens.ISSUER,
            JWT_AUDIENCE=tokens.AUDIENCE,
        ),
        override_settings(**jwt_settings),
    ):
        _reload_urls()
        try:
            yield
        finally:
            clear_url_caches()
    _reload_urls()


@pytest.fixture
def api() -> Iterator[None]:
    with api_enabled():
        yield


class Caller:
    """An HTTP client holding one real signed token."""

    def __init__(self, token: str | None, client: Client | None = None) -> None:
        self.client = client or Client()
        self.headers = tokens.bearer(token) if token is not None else {}

    def get(self, path: str, **headers: Any):
        return self.client.get(path, **self.headers, **headers)

    def post(self, path: str, body: Any, **headers: Any):
        return self.client.post(
            path, data=json.dumps(body), content_type="application/json", **self.headers, **headers
        )

    def post_raw(self, path: str, raw: bytes | str, content_type: str, **headers: Any):
        return self.client.generic(
            "POST", path, data=raw, content_type=content_type, **self.headers, **headers
        )

    def create(self, data: dict | None = None, **body: Any) -> dict:
        """Create a request on the test flow; return its view."""
        payload = {"flowKey": FLOW["key"], "data": data or {"applicant": "Ada"}, **body}
        response = self.post("/api/v1/requests", payload)
        assert response.status_code == 201, response.content
        return response.json()

    def accept(self, request_id: str, transition_id: str, revision: int, **headers: Any):
        return self.post(
            f"/api/v1/requests/{request_id}/transitions",
            {"transitionId": transition_id, "expectedRevision": revision},
            **headers,
        )


def caller(**claims: Any) -> Caller:
    return Caller(tokens.token(**claims))


@pytest.fixture
def flow(db) -> Flow:
    published, _ = flow_publish(definition=copy.deepcopy(FLOW))
    return published


@pytest.fixture
def alice(api) -> Caller:
    return caller(sub="alice", tenant="acme")


@pytest.fixture
def bob(api) -> Caller:
    """Same tenant as alice, another owner."""
    return caller(sub="bob", tenant="acme")


@pytest.fixture
def alice_elsewhere(api) -> Caller:
    """The same subject as alice, in another tenant."""
    return caller(sub="alice", tenant="globex")


@pytest.fixture
def auditor(api) -> Caller:
    """Reads every request of tenant acme, writes nothing."""
    return caller(sub="carol", tenant="acme", scope="requests:read:tenant")


@pytest.fixture
def admin(api) -> Caller:
    return caller(sub="root", tenant="acme", scope="flows:admin")


def assert_error(response, status: int, code: str, *fragments: str) -> dict:
    """The response is a JSON error with this status and code, and its detail says `fragments`."""
    assert response.status_code == status, response.content
    assert response["Content-Type"].startswith("application/json"), response["Content-Type"]
    body = response.json()
    assert body["code"] == code, body
    assert isinstance(body["detail"], str) and body["detail"], body
    for fragment in fragments:
        assert fragment in body["detail"], body
    return body
