"""JWT validation (orquestador/auth.py): what a token must be, and every way one is refused,
with a static key and with an identity provider's keys (JWT_JWKS_URL, served on 127.0.0.1)."""

import io
import time

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from django.core.exceptions import ImproperlyConfigured
from django.core.management import CommandError, call_command

from orquestador import jwks, tokencache
from orquestador.auth import (
    LEEWAY_SECONDS,
    MAX_TOKEN_BYTES,
    Principal,
    TokenInvalid,
    principal_from_token,
    token_encode,
)
from tests.support import jwks as jwks_support
from tests.support import tokens


@pytest.fixture
def hs256(settings):
    settings.JWT_SECRET = tokens.SECRET
    settings.JWT_PUBLIC_KEY = ""
    settings.JWT_ISSUER = tokens.ISSUER
    settings.JWT_AUDIENCE = tokens.AUDIENCE
    return settings


@pytest.fixture(scope="module")
def jwks_server():
    with jwks_support.JwksServer() as server:
        yield server


KEYS = ["HS256 secret", "JWKS RS256", "JWKS ES256", "JWKS EdDSA"]


@pytest.fixture(params=KEYS)
def keys(request, settings, jwks_server):
    """Every check below, with the HS256 secret and with a provider's key of each kind."""
    settings.JWT_ISSUER = tokens.ISSUER
    settings.JWT_AUDIENCE = tokens.AUDIENCE
    tokencache.forget_all()
    jwks.forget_all()
    if request.param == "HS256 secret":
        settings.JWT_SECRET, settings.JWT_PUBLIC_KEY, settings.JWT_JWKS_URL = tokens.SECRET, "", ""
        yield tokens.HS256
        return
    signer = jwks_support.signer(request.param.split()[1])
    jwks_server.keys.clear()
    jwks_server.publish(signer)
    settings.JWT_SECRET, settings.JWT_PUBLIC_KEY = "", ""
    settings.JWT_JWKS_URL = jwks_server.url
    with tokens.signing_with(signer):
        yield signer
    jwks.forget_all()
    tokencache.forget_all()


@pytest.fixture
def rs256(settings):
    private, public = tokens.rsa_pair()
    settings.JWT_SECRET = ""
    settings.JWT_PUBLIC_KEY = public
    settings.JWT_ISSUER = tokens.ISSUER
    settings.JWT_AUDIENCE = tokens.AUDIENCE
    return private, public


@pytest.fixture
def es256(settings):
    private, public = tokens.ec_pair()
    settings.JWT_SECRET = ""
    settings.JWT_PUBLIC_KEY = public
    settings.JWT_ISSUER = tokens.ISSUER
    settings.JWT_AUDIENCE = tokens.AUDIENCE
    return private, public


def refused(token: str) -> str:
    with pytest.raises(TokenInvalid) as caught:
        principal_from_token(token)
    return str(caught.value)


def test_principal__from_a_valid_token(keys):
    principal = principal_from_token(
        tokens.token(sub="alice", tenant="acme", scope="requests:write  flows:admin")
    )
    assert principal == Principal(
        subject="alice", tenant="acme", permissions=frozenset({"requests:write", "flows:admin"})
    )
    assert principal.snapshot() == {
        "subject": "alice",
        "scope": "acme",
        "roles": ["flows:admin", "requests:write"],
    }


def test_principal__without_scope_has_no_permissions(keys):
    assert principal_from_token(tokens.token(scope=None)).permissions == frozenset()


def test_principal__audience_list_containing_ours_is_accepted(keys):
    principal = principal_from_token(tokens.token(aud=["elsewhere", tokens.AUDIENCE]))
    assert principal.subject == "alice"


def test_refused__expired(keys):
    assert "expired" in refused(tokens.token(exp_in=-(LEEWAY_SECONDS + 30)))


def test_accepted__expired_within_the_leeway(keys):
    assert principal_from_token(tokens.token(exp_in=-5)).subject == "alice"


def test_refused__not_valid_yet(keys):
    assert "not valid yet" in refused(tokens.token(nbf_in=LEEWAY_SECONDS + 60))


def test_accepted__nbf_within_the_leeway(keys):
    assert principal_from_token(tokens.token(nbf_in=5)).subject == "alice"


def test_refused__wrong_issuer(keys):
    assert "issuer" in refused(tokens.token(iss="someone-else"))


def test_refused__wrong_audience(keys):
    assert "audience" in refused(tokens.token(aud="another-api"))


def test_refused__forged_with_another_key(keys):
    assert "signature" in refused(tokens.forged())


def test_refused__tampered_payload(keys):
    header, _payload, signature = tokens.token(tenant="acme").split(".")
    other_payload = tokens.token(tenant="globex").split(".")[1]
    assert "signature" in refused(f"{header}.{other_payload}.{signature}")


def test_refused__alg_none(keys):
    assert "'none' is not accepted" in refused(tokens.unsigned())


@pytest.mark.parametrize("claim", ["exp", "iss", "aud", "sub", "tenant"])
def test_refused__missing_claim(keys, claim):
    overrides = {"exp_in": None} if claim == "exp" else {claim: None}
    assert f"no '{claim}' claim" in refused(tokens.token(**overrides))


@pytest.mark.parametrize(
    ("claim", "value"),
    [("sub", 42), ("sub", ""), ("tenant", "   "), ("tenant", ["acme"]), ("sub", "x" * 256)],
)
def test_refused__identity_claim_of_the_wrong_shape(keys, claim, value):
    assert f"'{claim}' claim must be" in refused(tokens.token(**{claim: value}))


def _dates(**values):
    now = int(time.time())
    numeric = {"iat": now, "nbf": now, "exp": now + 300}
    return {name: values.get(name, numeric[name]) for name in numeric}


@pytest.mark.parametrize("claim", ["exp", "nbf", "iat"])
@pytest.mark.parametrize("shape", [str, lambda n: f" {n} "])
def test_refused__a_date_claim_that_is_a_string_of_digits(keys, claim, shape):
    # RFC 7519 §2: a NumericDate is a JSON number; PyJWT alone reads "1760000000" as one.
    now = int(time.time())
    dates = _dates(**{claim: shape({"exp": now + 300}.get(claim, now))})
    message = refused(tokens.token(exp_in=None, **dates))
    assert f"'{claim}' claim must be a number" in message


@pytest.mark.parametrize("claim", ["nbf", "iat"])
def test_refused__a_date_claim_that_is_a_boolean(keys, claim):
    # PyJWT reads true as 1 (1970); a boolean is no number here.
    message = refused(tokens.token(exp_in=None, **_dates(**{claim: True})))
    assert f"'{claim}' claim must be a number" in message


@pytest.mark.parametrize("claim", ["exp", "nbf", "iat"])
def test_accepted__a_date_claim_with_a_fraction(keys, claim):
    now = int(time.time())
    dates = _dates(**{claim: {"exp": now + 300.5}.get(claim, now - 0.5)})
    assert principal_from_token(tokens.token(exp_in=None, **dates)).subject == "alice"


@pytest.mark.parametrize("scope", [42, {"requests:write": True}, ["requests:write", 3], True])
def test_refused__scope_that_is_neither_a_string_nor_a_list_of_strings(keys, scope):
    assert "'scope' claim must be a space-separated string or a list" in refused(
        tokens.token(scope=scope)
    )


def test_accepted__scope_as_a_list(keys):
    # As Entra ID's `roles` and Auth0's `permissions` come.
    principal = principal_from_token(tokens.token(scope=["requests:write", "flows:admin"]))
    assert principal.permissions == frozenset({"requests:write", "flows:admin"})


@pytest.mark.parametrize("value", ["", "abc", "a.b.c", "not a token at all", "e30"])
def test_refused__malformed(keys, value):
    assert "JWT" in refused(value)


def test_refused__header_without_alg(keys):
    assert "no algorithm" in refused("e30.e30.")


def test_refused__oversized_token_is_not_parsed(keys):
    assert str(MAX_TOKEN_BYTES) in refused("a" * (MAX_TOKEN_BYTES + 1))


def test_rs256__accepted_with_the_configured_public_key(rs256):
    private, _public = rs256
    token = tokens.token(key=private, algorithm="RS256", sub="bob")
    assert principal_from_token(token).subject == "bob"


def test_rs256__refuses_a_token_signed_by_another_key(rs256):
    other, _ = tokens.rsa_pair()
    assert "signature" in refused(tokens.token(key=other, algorithm="RS256"))


def test_rs256__refuses_hs256_keyed_with_the_public_key(rs256):
    # Algorithm confusion: an attacker who knows the public key signs HS256 with it.
    _private, public = rs256
    assert "'HS256' is not accepted" in refused(tokens.hmac_signed(public.encode()))


def test_rs256__refuses_es256_and_none(rs256):
    other, _ = tokens.ec_pair()
    assert "'ES256' is not accepted" in refused(tokens.token(key=other, algorithm="ES256"))
    assert "'none' is not accepted" in refused(tokens.unsigned())


def test_es256__accepted_with_the_configured_public_key(es256):
    private, _public = es256
    token = tokens.token(key=private, algorithm="ES256", tenant="globex")
    assert principal_from_token(token).tenant == "globex"


def test_es256__refuses_rs256_and_hs256(es256):
    _private, public = es256
    other, _ = tokens.rsa_pair()
    assert "'RS256' is not accepted" in refused(tokens.token(key=other, algorithm="RS256"))
    assert "'HS256' is not accepted" in refused(tokens.hmac_signed(public.encode()))


@pytest.mark.parametrize(
    ("secret", "public_key", "message"),
    [
        (tokens.SECRET, "pem", "only one of JWT_SECRET"),
        ("short", "", "at least 32 bytes"),
        ("", "", "Neither JWT_SECRET"),
        ("", "-----BEGIN PUBLIC KEY-----\nnot a key\n-----END PUBLIC KEY-----\n", "not a PEM"),
    ],
)
def test_configuration__refused_keys(settings, secret, public_key, message):
    settings.JWT_SECRET = secret
    settings.JWT_PUBLIC_KEY = public_key
    with pytest.raises(ImproperlyConfigured, match=message):
        principal_from_token(tokens.token())


def test_configuration__refuses_weak_rsa_and_other_curves(settings):
    # A deliberately weak key: the server must refuse it.
    weak = tokens.public_pem(rsa.generate_private_key(public_exponent=65537, key_size=1024))  # noqa: S505
    p384 = tokens.public_pem(ec.generate_private_key(ec.SECP384R1()))
    settings.JWT_SECRET = ""
    settings.JWT_PUBLIC_KEY = weak
    with pytest.raises(ImproperlyConfigured, match="2048"):
        principal_from_token(tokens.token())
    settings.JWT_PUBLIC_KEY = p384
    with pytest.raises(ImproperlyConfigured, match="P-256"):
        principal_from_token(tokens.token())


def test_token_encode__round_trips(hs256):
    token = token_encode(subject="carol", tenant="acme", scope="flows:admin", ttl_seconds=60)
    assert jwt.get_unverified_header(token)["alg"] == "HS256"
    principal = principal_from_token(token)
    assert (principal.subject, principal.tenant) == ("carol", "acme")
    assert principal.permissions == frozenset({"flows:admin"})


def test_minttoken__prints_a_token_the_api_accepts(hs256):
    out = io.StringIO()
    call_command(
        "minttoken", "--sub", "alice", "--tenant", "acme", "--scope", "requests:read", stdout=out
    )
    principal = principal_from_token(out.getvalue().strip())
    assert principal == Principal("alice", "acme", frozenset({"requests:read"}))


def test_minttoken__ttl_sets_the_expiry(hs256):
    out = io.StringIO()
    call_command("minttoken", "--sub", "a", "--tenant", "t", "--ttl", "120", stdout=out)
    payload = jwt.decode(out.getvalue().strip(), options={"verify_signature": False})
    assert payload["exp"] - payload["iat"] == 120


def test_minttoken__refuses_without_jwt_secret(rs256):
    with pytest.raises(CommandError, match="JWT_SECRET is not set"):
        call_command("minttoken", "--sub", "alice", "--tenant", "acme", stdout=io.StringIO())


def test_minttoken__refuses_a_bad_ttl(hs256):
    with pytest.raises(CommandError, match="--ttl"):
        call_command("minttoken", "--sub", "a", "--tenant", "t", "--ttl", "0")
