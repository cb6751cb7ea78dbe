"""Tokens shaped as Entra ID, Keycloak and Auth0 issue them, verified with their provider's keys
(JWT_JWKS_URL on 127.0.0.1): the tenant and the permissions read from the claims
JWT_TENANT_CLAIM and JWT_SCOPE_CLAIM name, over HTTP, down to the request's owner and tenant."""

import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import jwt
import pytest

from executions.models import Execution, Request
from orquestador import jwks, tokencache
from tests.support import jwks as jwks_support

from .conftest import Caller, api_enabled, assert_error

pytestmark = pytest.mark.django_db

ENTRA_TENANT = "72f988bf-86f1-41af-91ab-2d7cd011db47"
ENTRA_SUB = "AAAAAAAAAAAAAAAAAAAAAIkzqFVrSaSaFHy782bbtaQ"
ENTRA_API = "0c5e2a3b-6f0d-4e8a-9b1c-7d2e4f6a8b90"  # v2 tokens: aud is the API's client id
ENTRA_ISSUER = f"https://login.microsoftonline.com/{ENTRA_TENANT}/v2.0"
KEYCLOAK_ISSUER = "https://sso.example.com/realms/acme"
AUTH0_ISSUER = "https://acme.eu.auth0.com/"
AUTH0_TENANT_CLAIM = "https://example.com/tenant"


@pytest.fixture
def jwks_server() -> Iterator[jwks_support.JwksServer]:
    tokencache.forget_all()
    jwks.forget_all()
    with jwks_support.JwksServer() as server:
        yield server
    jwks.forget_all()
    tokencache.forget_all()


@contextmanager
def provider(server: jwks_support.JwksServer, signer, **jwt_settings: Any) -> Iterator[None]:
    # Entra ID publishes RSA keys with no `alg`; Keycloak and Auth0 name it.
    server.publish(jwks_support.public_jwk(signer.key, signer.kid, alg=signer.kid != "entra"))
    with api_enabled(secret="", jwks_url=server.url, **jwt_settings):
        yield


def sign(signer, claims: dict[str, Any]) -> str:
    now = int(time.time())
    claims = {"iat": now, "nbf": now, "exp": now + 3600, **claims}
    return jwt.encode(claims, signer.key, algorithm=signer.algorithm, headers={"kid": signer.kid})


def entra_token(signer, **changes: Any) -> str:
    """An Entra ID v2 access token: tenant in `tid`, delegated scopes in `scp` (a string), app
    roles in `roles` (a list)."""
    claims = {
        "aud": ENTRA_API,
        "iss": ENTRA_ISSUER,
        "aio": "E2ZgYJg8eHw3",
        "azp": "f3b5c1a2-0000-4000-8000-000000000001",
        "azpacr": "1",
        "oid": "00000000-0000-0000-66f3-3332eca7ea81",
        "rh": "0.AAAA",
        "sub": ENTRA_SUB,
        "tid": ENTRA_TENANT,
        "uti": "fqiBqXLPj0eQa82S-IYFAA",
        "ver": "2.0",
        "scp": "requests:read",
        "roles": ["requests:write"],
        **changes,
    }
    return sign(signer, {name: value for name, value in claims.items() if value is not None})


def keycloak_token(signer, **changes: Any) -> str:
    """A Keycloak access token (client credentials): `scope` a string, the tenant in a claim of a
    mapper's (`tenant_id`), roles in `realm_access` (not read)."""
    claims = {
        "jti": str(uuid.uuid4()),
        "iss": KEYCLOAK_ISSUER,
        "aud": ["orquestador-api", "account"],
        "sub": "7d3f2a10-9c1e-4bd4-9a4e-0c2b8a1f5e11",
        "typ": "Bearer",
        "azp": "billing-service",
        "acr": "1",
        "realm_access": {"roles": ["offline_access", "uma_authorization"]},
        "resource_access": {"account": {"roles": ["manage-account"]}},
        "scope": "profile email requests:write requests:read",
        "clientHost": "127.0.0.1",
        "tenant_id": "acme",
        "preferred_username": "service-account-billing-service",
        **changes,
    }
    return sign(signer, {name: value for name, value in claims.items() if value is not None})


def auth0_token(signer, **changes: Any) -> str:
    """An Auth0 access token (client credentials): `scope` a string, the tenant in a namespaced
    custom claim, `permissions` a list (RBAC)."""
    claims = {
        "iss": AUTH0_ISSUER,
        "sub": "Ab3xQ9zK@clients",
        "aud": "https://api.example.com/orquestador",
        "scope": "requests:write requests:read",
        "gty": "client-credentials",
        "azp": "Ab3xQ9zK",
        "permissions": ["requests:write", "requests:read"],
        AUTH0_TENANT_CLAIM: "acme",
        **changes,
    }
    return sign(signer, {name: value for name, value in claims.items() if value is not None})


def creates_and_accepts(token: str) -> Request:
    who = Caller(token)
    created = who.create()
    accepted = who.accept(created["id"], "submit", 1)
    assert accepted.status_code == 202, accepted.content
    assert who.get(f"/api/v1/requests/{created['id']}").status_code == 200
    return Request.objects.get(id=created["id"])


ENTRA = {
    "JWT_ISSUER": ENTRA_ISSUER,
    "JWT_AUDIENCE": ENTRA_API,
    "JWT_TENANT_CLAIM": "tid",
    "JWT_SCOPE_CLAIM": "scp,roles",
}


def test_entra_id__tid_is_the_tenant__scp_and_roles_the_permissions(flow, jwks_server):
    signer = jwks_support.signer("RS256", kid="entra")
    with provider(jwks_server, signer, **ENTRA):
        request = creates_and_accepts(entra_token(signer))
        assert (request.owner, request.scope) == (ENTRA_SUB, ENTRA_TENANT)
        execution = Execution.objects.get(request=request)
        assert execution.actor_snapshot["roles"] == ["requests:read", "requests:write"]

        # An application's token (client credentials) has roles and no scp.
        app_only = Caller(entra_token(signer, scp=None, roles=["requests:write", "requests:read"]))
        assert app_only.create()["id"]
        # Neither claim holding the permission: forbidden, not unauthenticated.
        reader = Caller(entra_token(signer, roles=None))
        assert_error(reader.post("/api/v1/requests", {"flowKey": "claims"}), 403, "FORBIDDEN")
        # Without tid: refused, the claim named.
        no_tenant = Caller(entra_token(signer, tid=None))
        assert_error(no_tenant.get("/api/v1/flows"), 401, "UNAUTHENTICATED", "'tid'")
        # roles must be strings.
        bad_roles = Caller(entra_token(signer, roles=[{"value": "requests:write"}]))
        assert_error(bad_roles.get("/api/v1/flows"), 401, "UNAUTHENTICATED", "'roles'")


def test_keycloak__a_mapper_claim_is_the_tenant__scope_a_string(flow, jwks_server):
    signer = jwks_support.signer("RS256", kid="keycloak")
    settings = {
        "JWT_ISSUER": KEYCLOAK_ISSUER,
        "JWT_AUDIENCE": "orquestador-api",
        "JWT_TENANT_CLAIM": "tenant_id",
    }
    with provider(jwks_server, signer, **settings):
        request = creates_and_accepts(keycloak_token(signer))
        assert (request.owner, request.scope) == ("7d3f2a10-9c1e-4bd4-9a4e-0c2b8a1f5e11", "acme")
        # Another realm's token, or one for another client only, is refused.
        other_realm = Caller(keycloak_token(signer, iss="https://sso.example.com/realms/other"))
        assert_error(other_realm.get("/api/v1/flows"), 401, "UNAUTHENTICATED", "issuer")
        account_only = Caller(keycloak_token(signer, aud="account"))
        assert_error(account_only.get("/api/v1/flows"), 401, "UNAUTHENTICATED", "audience")
        no_tenant = Caller(keycloak_token(signer, tenant_id=None))
        assert_error(no_tenant.get("/api/v1/flows"), 401, "UNAUTHENTICATED", "'tenant_id'")


def test_auth0__a_namespaced_claim_is_the_tenant(flow, jwks_server):
    signer = jwks_support.signer("RS256", kid="auth0")
    settings = {
        "JWT_ISSUER": AUTH0_ISSUER,
        "JWT_AUDIENCE": "https://api.example.com/orquestador",
        "JWT_TENANT_CLAIM": AUTH0_TENANT_CLAIM,
    }
    with provider(jwks_server, signer, **settings):
        request = creates_and_accepts(auth0_token(signer))
        assert (request.owner, request.scope) == ("Ab3xQ9zK@clients", "acme")
        # The scope string decides, not `permissions`, unless JWT_SCOPE_CLAIM names it.
        narrow = Caller(auth0_token(signer, scope="requests:read"))
        assert_error(narrow.post("/api/v1/requests", {"flowKey": "claims"}), 403, "FORBIDDEN")
        no_tenant = Caller(auth0_token(signer, **{AUTH0_TENANT_CLAIM: None}))
        assert_error(no_tenant.get("/api/v1/flows"), 401, "UNAUTHENTICATED", AUTH0_TENANT_CLAIM)
    with provider(jwks_server, signer, **settings, JWT_SCOPE_CLAIM="permissions"):
        by_permissions = Caller(auth0_token(signer, scope="openid"))
        assert by_permissions.create()["id"]


def test_the_default_tenant_claim_is_not_required_once_another_is_named(flow, jwks_server):
    signer = jwks_support.signer("ES256", kid="custom")
    with provider(jwks_server, signer, JWT_TENANT_CLAIM="org"):
        token = sign(
            signer,
            {
                "iss": "orquestador",
                "aud": "orquestador-api",
                "sub": "svc",
                "org": "acme",
                "scope": "requests:write requests:read",
            },
        )
        assert creates_and_accepts(token).scope == "acme"
