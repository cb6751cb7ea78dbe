"""Authentication and permissions over HTTP: 401 UNAUTHENTICATED with WWW-Authenticate: Bearer
for every kind of bad token, 403 FORBIDDEN for a missing permission, on every endpoint; with the
HS256 secret and with an identity provider's keys (JWT_JWKS_URL, served on 127.0.0.1)."""

import time
import uuid

import pytest

from executions.models import Execution, Request
from orquestador import jwks, tokencache
from tests.support import jwks as jwks_support
from tests.support import tokens

from .conftest import Caller, api_enabled, assert_error, caller

pytestmark = pytest.mark.django_db


@pytest.fixture(scope="module")
def jwks_server():
    with jwks_support.JwksServer() as server:
        yield server


@pytest.fixture(params=["HS256 secret", "JWKS RS256", "JWKS ES256", "JWKS EdDSA"])
def api(request, jwks_server):
    """This module's API: every test below with the secret and with a provider's key."""
    tokencache.forget_all()
    jwks.forget_all()
    if request.param == "HS256 secret":
        with api_enabled():
            yield
        return
    signer = jwks_support.signer(request.param.split()[1])
    jwks_server.keys.clear()
    jwks_server.publish(signer)
    with api_enabled(secret="", jwks_url=jwks_server.url), tokens.signing_with(signer):
        yield
    jwks.forget_all()
    tokencache.forget_all()


SOME_ID = str(uuid.uuid4())
ENDPOINTS = [
    ("POST", "/api/v1/requests", {"flowKey": "claims", "data": {"applicant": "A"}}),
    ("GET", f"/api/v1/requests/{SOME_ID}", None),
    (
        "POST",
        f"/api/v1/requests/{SOME_ID}/transitions",
        {"transitionId": "submit", "expectedRevision": 1},
    ),
    ("GET", f"/api/v1/executions/{SOME_ID}", None),
    ("GET", "/api/v1/flows", None),
    ("POST", "/api/v1/flows", {"key": "x"}),
]


def send(who: Caller, method: str, path: str, body):
    return who.get(path) if method == "GET" else who.post(path, body)


def assert_unauthenticated(response, *fragments: str) -> None:
    assert_error(response, 401, "UNAUTHENTICATED", *fragments)
    assert response["WWW-Authenticate"].startswith("Bearer")


@pytest.mark.parametrize(("method", "path", "body"), ENDPOINTS)
def test_every_endpoint__needs_a_token(api, flow, method, path, body):
    assert_unauthenticated(send(Caller(None), method, path, body), "Authorization")


BAD_TOKENS = {
    "expired": (lambda: tokens.token(exp_in=-3600), "expired"),
    "not yet valid": (lambda: tokens.token(nbf_in=3600), "not valid yet"),
    "wrong issuer": (lambda: tokens.token(iss="https://evil.example"), "issuer"),
    "wrong audience": (lambda: tokens.token(aud="another-api"), "audience"),
    "forged": (lambda: tokens.forged(), "signature"),
    "alg none": (lambda: tokens.unsigned(), "'none' is not accepted"),
    "no exp": (lambda: tokens.token(exp_in=None), "'exp'"),
    "no tenant": (lambda: tokens.token(tenant=None), "'tenant'"),
    "no sub": (lambda: tokens.token(sub=None), "'sub'"),
    # RFC 7519's NumericDate is a JSON number: a string of digits is refused, however valid.
    "exp a string": (lambda: tokens.token(exp_in=None, exp=str(int(time.time()) + 300)), "'exp'"),
    "nbf a string": (lambda: tokens.token(nbf=str(int(time.time()))), "'nbf'"),
    "iat a string": (lambda: tokens.token(iat=str(int(time.time()))), "'iat'"),
    "malformed": (lambda: "not.a.jwt", "JWT"),
    "garbage": (lambda: "%%%%", "JWT"),
}


@pytest.mark.parametrize("kind", sorted(BAD_TOKENS))
@pytest.mark.parametrize(("method", "path", "body"), ENDPOINTS)
def test_every_endpoint__refuses_a_bad_token(api, flow, kind, method, path, body):
    make, fragment = BAD_TOKENS[kind]
    response = send(Caller(make()), method, path, body)
    assert_unauthenticated(response, fragment)
    assert not Request.objects.exists()


@pytest.mark.parametrize(
    "header", ["Basic YWxpY2U6c2VjcmV0", "Bearer", "Bearer a b", "Token abc", "Bearer é"]
)
def test_malformed_authorization_header(api, flow, header):
    response = Caller(None).client.get("/api/v1/flows", HTTP_AUTHORIZATION=header)
    assert_unauthenticated(response)


def test_a_bad_token_is_refused_before_the_body_is_read(api, flow):
    response = Caller(tokens.token(exp_in=-3600)).post_raw(
        "/api/v1/requests", b"{not json", "application/json"
    )
    assert_unauthenticated(response, "expired")


def test_the_detail_never_echoes_the_token(api, flow):
    bad = tokens.forged()
    response = Caller(bad).get("/api/v1/flows")
    assert bad not in response.content.decode()
    assert bad.split(".")[1] not in response.content.decode()


MISSING_PERMISSION = [
    ("POST", "/api/v1/requests", "requests:read", "requests:write"),
    ("GET", f"/api/v1/requests/{SOME_ID}", "requests:write", "requests:read"),
    ("POST", f"/api/v1/requests/{SOME_ID}/transitions", "requests:read", "requests:write"),
    ("GET", f"/api/v1/executions/{SOME_ID}", "requests:write", "requests:read"),
    ("GET", "/api/v1/flows", "requests:write requests:read", "flows:admin"),
    ("POST", "/api/v1/flows", "requests:write requests:read", "flows:admin"),
]


@pytest.mark.parametrize(("method", "path", "scope", "needed"), MISSING_PERMISSION)
def test_every_endpoint__a_missing_permission_is_forbidden(api, flow, method, path, scope, needed):
    body = {"transitionId": "submit", "expectedRevision": 1} if "transitions" in path else {}
    response = send(caller(scope=scope), method, path, body)
    assert_error(response, 403, "FORBIDDEN", needed)
    assert not Request.objects.exists()


def test_flows_admin_alone_cannot_touch_requests(api, flow):
    admin = caller(scope="flows:admin")
    response = admin.post("/api/v1/requests", {"flowKey": "claims", "data": {"applicant": "A"}})
    assert_error(response, 403, "FORBIDDEN")


@pytest.mark.parametrize("pair", [tokens.rsa_pair, tokens.ec_pair], ids=["RS256", "ES256"])
def test_public_key_tokens__work_end_to_end(flow, pair):
    private, public = pair()
    algorithm = "RS256" if "RSA" in type(private).__name__ else "ES256"
    with api_enabled(secret="", public_key=public):
        alice = Caller(tokens.token(key=private, algorithm=algorithm))
        created = alice.create()
        accepted = alice.accept(created["id"], "submit", 1)
        assert accepted.status_code == 202, accepted.content
        assert alice.get(accepted["Location"]).status_code == 200
        assert Execution.objects.get().actor_snapshot["subject"] == "alice"

        # HS256 signed with the public key itself (algorithm confusion), HS256 with a secret,
        # and a token from another key pair are all refused.
        confused = Caller(tokens.hmac_signed(public.encode()))
        assert_unauthenticated(confused.get(f"/api/v1/requests/{created['id']}"), "HS256")
        hs256 = Caller(tokens.token())
        assert_unauthenticated(hs256.get(f"/api/v1/requests/{created['id']}"), "HS256")
        other_private, _ = pair()
        stranger = Caller(tokens.token(key=other_private, algorithm=algorithm))
        assert_unauthenticated(stranger.get(f"/api/v1/requests/{created['id']}"), "signature")
