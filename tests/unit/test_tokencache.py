"""Verified tokens remembered (orquestador/tokencache.py): a token's next call skips the
verification, and the cache never accepts what a verification would refuse: a token past its
exp, one verified under other settings (a rotated key, another issuer or audience), one that
never verified, one verified too long ago."""

import base64
import json
import time

import jwt
import pytest

from orquestador import auth, tokencache
from orquestador.auth import LEEWAY_SECONDS, TokenInvalid, principal_from_token
from tests.support import tokens


@pytest.fixture(autouse=True)
def hs256(settings):
    settings.JWT_SECRET = tokens.SECRET
    settings.JWT_PUBLIC_KEY = ""
    settings.JWT_ISSUER = tokens.ISSUER
    settings.JWT_AUDIENCE = tokens.AUDIENCE
    tokencache.forget_all()
    yield settings
    tokencache.forget_all()


@pytest.fixture
def verifications(monkeypatch) -> list[str]:
    """Each full verification of a token (PyJWT's decode), counted as it runs."""
    seen: list[str] = []
    real = jwt.decode

    def counting(token, *args, **kwargs):
        seen.append(token)
        return real(token, *args, **kwargs)

    monkeypatch.setattr(auth.jwt, "decode", counting)
    return seen


def refused(token: str) -> str:
    with pytest.raises(TokenInvalid) as caught:
        principal_from_token(token)
    return str(caught.value)


def test_a_verified_token__is_not_verified_again(verifications):
    token = tokens.token(sub="alice", tenant="acme", scope="requests:read")
    first = principal_from_token(token)
    again = principal_from_token(token)
    assert again == first and again.subject == "alice" and again.has("requests:read")
    assert len(verifications) == 1


def test_a_token_past_its_exp__is_verified_every_time(verifications):
    # Past exp but within the leeway: accepted, and never remembered (only until exp).
    token = tokens.token(exp_in=-5)
    assert principal_from_token(token).subject == "alice"
    assert principal_from_token(token).subject == "alice"
    assert len(verifications) == 2


class Clock:
    """The cache's clock only (PyJWT keeps the real one), set to a moment of the test's."""

    def __init__(self, now: float) -> None:
        self.now = now

    def time(self) -> float:
        return self.now


def test_a_remembered_token__is_verified_again_once_its_exp_is_past(verifications, monkeypatch):
    token = tokens.token(exp_in=60)
    payload = token.split(".")[1]
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    principal_from_token(token)
    monkeypatch.setattr(tokencache, "time", Clock(claims["exp"] - 0.001))
    principal_from_token(token)
    assert len(verifications) == 1  # still before exp: remembered
    monkeypatch.setattr(tokencache, "time", Clock(claims["exp"]))
    principal_from_token(token)  # PyJWT's clock is still before exp: it verifies, and accepts
    assert len(verifications) == 2


def test_a_remembered_token__is_verified_again_after_max_age(verifications, monkeypatch):
    token = tokens.token(exp_in=3600)
    principal_from_token(token)
    later = time.time() + tokencache.MAX_AGE_SECONDS + 1
    monkeypatch.setattr(tokencache, "time", Clock(later))
    assert principal_from_token(token).subject == "alice"
    assert len(verifications) == 2


def test_a_remembered_token__is_refused_after_the_key_changed(hs256, verifications):
    token = tokens.token()
    principal_from_token(token)
    hs256.JWT_SECRET = tokens.OTHER_SECRET  # the key rotated: old tokens no longer verify
    assert "signature" in refused(token)
    assert len(verifications) == 2


@pytest.mark.parametrize(
    ("setting", "value", "fragment"),
    [("JWT_ISSUER", "someone-else", "issuer"), ("JWT_AUDIENCE", "another-api", "audience")],
)
def test_a_remembered_token__is_refused_under_another_issuer_or_audience(
    hs256, setting, value, fragment
):
    token = tokens.token()
    principal_from_token(token)
    setattr(hs256, setting, value)
    assert fragment in refused(token)


def test_a_refused_token__is_never_remembered(verifications):
    forged = tokens.token(key=tokens.OTHER_SECRET)
    for _ in range(3):
        assert "signature" in refused(forged)
    assert len(verifications) == 3


def test_a_forgery_of_a_remembered_token__is_refused():
    real = tokens.token(tenant="acme")
    principal_from_token(real)
    header, _payload, signature = real.split(".")
    other_payload = tokens.token(tenant="globex").split(".")[1]
    assert "signature" in refused(f"{header}.{other_payload}.{signature}")
    assert "signature" in refused(real[:-2] + ("AA" if not real.endswith("AA") else "BB"))


def test_not_yet_valid__is_refused_every_time(verifications):
    early = tokens.token(nbf_in=LEEWAY_SECONDS + 60)
    assert "not valid yet" in refused(early)
    assert "not valid yet" in refused(early)
    assert len(verifications) == 2


def test_the_cache__is_bounded(monkeypatch):
    monkeypatch.setattr(tokencache, "MAX_ENTRIES", 3)
    for subject in ("a", "b", "c", "d", "e"):
        principal_from_token(tokens.token(sub=subject))
    assert len(tokencache._entries) == 3


def test_the_cache__holds_no_token():
    token = tokens.token()
    principal_from_token(token)
    assert all(token.encode() not in key for key in tokencache._entries)
    assert all(len(key) == 20 for key in tokencache._entries)
