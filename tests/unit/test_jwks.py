"""Keys from the identity provider (orquestador/jwks.py), fetched from a real JWKS endpoint on
127.0.0.1: a key by its kid and its algorithm by the key, the keys that are never used, rotation
without a restart, keys kept through an outage, the refetch bound under a flood of unknown kids,
and what a fetch refuses to read or follow."""

import logging
import threading
import time

import pytest
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from django.core.exceptions import ImproperlyConfigured

from orquestador import jwks, tokencache
from orquestador.auth import TokenInvalid, principal_from_token
from tests.support import jwks as jwks_support
from tests.support import tokens


class Clock:
    """jwks.py's clock only (PyJWT and the tokens keep the real one), moved by the test."""

    def __init__(self) -> None:
        self.now = time.monotonic()

    def monotonic(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def server():
    with jwks_support.JwksServer() as running:
        yield running


@pytest.fixture
def provider(settings, server):
    settings.JWT_SECRET = ""
    settings.JWT_PUBLIC_KEY = ""
    settings.JWT_JWKS_URL = server.url
    settings.JWT_JWKS_CACHE_SECONDS = 300
    settings.JWT_ISSUER = tokens.ISSUER
    settings.JWT_AUDIENCE = tokens.AUDIENCE
    jwks.forget_all()
    tokencache.forget_all()
    yield server
    jwks.forget_all()
    tokencache.forget_all()


@pytest.fixture
def clock(monkeypatch) -> Clock:
    moved = Clock()
    monkeypatch.setattr(jwks, "time", moved)
    return moved


def refused(token: str) -> str:
    with pytest.raises(TokenInvalid) as caught:
        principal_from_token(token)
    return str(caught.value)


def signed(signer: tokens.Signer, **overrides) -> str:
    overrides.setdefault("kid", signer.kid)
    return tokens.token(key=signer.key, algorithm=signer.algorithm, **overrides)


def test_each_key_by_its_kid__its_algorithm_from_the_key(provider):
    signers = [jwks_support.signer(algorithm) for algorithm in jwks_support.ALGORITHMS]
    for signer in signers:
        provider.publish(signer)
    for signer in signers:
        principal = principal_from_token(signed(signer, sub=signer.algorithm))
        assert principal.subject == signer.algorithm
    assert provider.fetches == 1


def test_a_key_without_alg__its_algorithm_from_kty_and_crv(provider):
    # Entra ID publishes RSA keys with no `alg`.
    signers = [jwks_support.signer(algorithm) for algorithm in jwks_support.ALGORITHMS]
    for signer in signers:
        provider.publish(jwks_support.public_jwk(signer.key, str(signer.kid), alg=False))
    for signer in signers:
        assert principal_from_token(signed(signer)).subject == "alice"


def test_a_header_alg_other_than_the_keys__refused(provider):
    rsa_signer, ec_signer = jwks_support.signer("RS256"), jwks_support.signer("ES256")
    provider.publish(rsa_signer)
    provider.publish(ec_signer)
    # Signed by the P-256 key, naming the RSA key's kid: the RSA key verifies RS256 only.
    token = tokens.token(key=ec_signer.key, algorithm="ES256", kid=rsa_signer.kid)
    assert "'ES256' is not accepted" in refused(token)
    assert "for this key" in refused(token)


def test_algorithm_confusion_and_alg_none__refused(provider):
    signer = jwks_support.signer("RS256")
    provider.publish(signer)
    public_pem = tokens.public_pem(signer.key).encode()
    with tokens.signing_with(signer):
        assert "'HS256' is not accepted" in refused(tokens.hmac_signed(public_pem))
        jwk_bytes = str(jwks_support.public_jwk(signer.key, str(signer.kid))).encode()
        assert "'HS256' is not accepted" in refused(tokens.hmac_signed(jwk_bytes))
        assert "'none' is not accepted" in refused(tokens.unsigned())


def test_no_kid_or_an_unknown_kid__refused(provider):
    signer = jwks_support.signer("RS256")
    provider.publish(signer)
    assert "(kid)" in refused(tokens.token(key=signer.key, algorithm="RS256"))
    assert "(kid)" in refused(tokens.token(key=signer.key, algorithm="RS256", kid=""))
    assert "(kid)" in refused(tokens.token(key=signer.key, algorithm="RS256", kid="k" * 257))
    unknown = tokens.token(key=signer.key, algorithm="RS256", kid="not-published")
    assert "not one the identity provider publishes" in refused(unknown)


def _weak_rsa():
    # A deliberately weak key: the server must not use it.
    return rsa.generate_private_key(public_exponent=65537, key_size=1024)  # noqa: S505


NEVER_USED = {
    "another algorithm (RS384)": lambda key: (
        jwks_support.public_jwk(key, "k", alg=False) | {"alg": "RS384"}
    ),
    "an encryption key": lambda key: jwks_support.public_jwk(key, "k", use="enc"),
    "verify not among its key_ops": lambda key: jwks_support.public_jwk(
        key, "k", key_ops=["encrypt"]
    ),
    "a private key": lambda key: jwks_support.public_jwk(key, "k") | {"d": "AQAB"},
    "an RSA key under 2048 bits": lambda key: jwks_support.public_jwk(_weak_rsa(), "k"),
    "a P-384 key": lambda key: jwks_support.public_jwk(
        ec.generate_private_key(ec.SECP384R1()), "k"
    ),
    "a symmetric key (HS256)": lambda key: {"kty": "oct", "kid": "k", "k": "c2VjcmV0"},
}


@pytest.mark.parametrize("kind", sorted(NEVER_USED))
def test_keys_that_are_never_used(kind):
    key = jwks_support.shared_private_key("RS256")
    usable = jwks_support.public_jwk(key, "good")
    assert set(jwks.signing_keys({"keys": [NEVER_USED[kind](key), usable]})) == {"good"}


def test_rotation__new_kid_fetched__old_valid_while_listed__removed_refused_after_refresh(
    provider, clock
):
    old, new = jwks_support.signer("RS256", kid="old"), jwks_support.signer("ES256", kid="new")
    provider.publish(old)
    old_token = signed(old)
    assert principal_from_token(old_token).subject == "alice"

    # The provider adds a key and signs with it: its first token brings the new set (once the
    # minute since the last fetch is over), and the old key's tokens still verify.
    provider.publish(new)
    clock.advance(jwks.MIN_REFETCH_SECONDS)
    assert principal_from_token(signed(new, sub="bob")).subject == "bob"
    assert principal_from_token(old_token).subject == "alice"
    assert provider.fetches == 2

    # The old key leaves the set: refused once the set is refreshed, remembered token or not.
    provider.withdraw("old")
    clock.advance(299)
    assert principal_from_token(old_token).subject == "alice"  # the set held is still fresh
    clock.advance(2)
    assert "not one the identity provider publishes" in refused(old_token)
    assert "not one the identity provider publishes" in refused(signed(old, sub="carol"))
    assert principal_from_token(signed(new)).subject == "alice"
    assert provider.fetches == 3


def test_outage__keys_held_keep_working__one_warning__retried_once_a_minute(
    provider, clock, caplog
):
    signer = jwks_support.signer("RS256")
    provider.publish(signer)
    assert principal_from_token(signed(signer)).subject == "alice"
    provider.stop()
    caplog.set_level(logging.INFO, logger="orquestador.jwks")
    clock.advance(301)  # the set is due for a refresh, and the endpoint is down
    for n in range(50):
        assert principal_from_token(signed(signer, sub=f"user{n}")).subject == f"user{n}"
        clock.advance(5)  # 250 seconds of calls: five tries at most
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings
    assert "keep verifying" in warnings[0].getMessage()
    assert provider.fetches == 1  # the stopped server counted none

    provider.start()  # the same port
    clock.advance(jwks.MIN_REFETCH_SECONDS)
    assert principal_from_token(signed(signer, sub="again")).subject == "again"
    assert provider.fetches == 2
    assert any("fetched again" in r.getMessage() for r in caplog.records)


def test_outage_before_the_first_fetch__refused__then_served(provider, clock):
    signer = jwks_support.signer("RS256")
    provider.publish(signer)
    provider.stop()
    assert "not one the identity provider publishes" in refused(signed(signer))
    provider.start()
    assert "not one the identity provider publishes" in refused(signed(signer))  # within the minute
    clock.advance(jwks.MIN_REFETCH_SECONDS)
    assert principal_from_token(signed(signer)).subject == "alice"


def test_flood_of_unknown_kids__at_most_one_fetch_a_minute(provider, clock):
    signer = jwks_support.signer("RS256")
    provider.publish(signer)
    attacker = jwks_support.signer("RS256", index=7)
    minutes = 10
    sent = [0]
    lock = threading.Lock()

    def flood(count: int) -> None:
        for _ in range(count):
            with pytest.raises(TokenInvalid, match="not one the identity provider publishes"):
                principal_from_token(signed(attacker, kid=jwks_support.random_kid()))
            with lock:
                sent[0] += 1

    # Two tokens each second of ten minutes, and each minute a burst from eight threads at once.
    for second in range(minutes * 60):
        if second % 60 == 0:
            burst = [threading.Thread(target=flood, args=(5,)) for _ in range(8)]
            for thread in burst:
                thread.start()
            for thread in burst:
                thread.join()
        flood(2)
        clock.advance(1)
    print(f"\n{sent[0]} tokens with random kids over {minutes} minutes: {provider.fetches} fetches")
    assert sent[0] == minutes * (60 * 2 + 8 * 5)
    assert provider.fetches <= minutes + 1
    assert principal_from_token(signed(signer)).subject == "alice"  # the real key, unharmed


def test_flood_in_real_time__one_fetch(provider):
    signer = jwks_support.signer("RS256")
    provider.publish(signer)
    assert principal_from_token(signed(signer)).subject == "alice"
    deadline = time.monotonic() + 2.0
    sent = [0]
    lock = threading.Lock()

    def flood() -> None:
        while time.monotonic() < deadline:
            with pytest.raises(TokenInvalid):
                principal_from_token(signed(signer, kid=jwks_support.random_kid()))
            with lock:
                sent[0] += 1

    workers = [threading.Thread(target=flood) for _ in range(8)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    print(f"\n{sent[0]} tokens with random kids in 2 s, 8 threads: {provider.fetches} fetch(es)")
    assert sent[0] > 100 and provider.fetches == 1


def _answer(status: int, body: bytes, **headers: str):
    return lambda path: (status, headers, body)


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        (_answer(500, b"{}"), "HTTP 500"),
        (_answer(200, b"<html>"), "not JSON"),
        (_answer(200, b'{"keys": {}}'), "not a JWKS document"),
        (_answer(200, b" " * (jwks.MAX_DOCUMENT_BYTES + 1)), "larger than"),
        (_answer(302, b"", Location="http://idp.example/keys"), "not https"),
        (_answer(302, b"", Location="/.well-known/jwks.json"), "more than 3 redirects"),
    ],
    ids=["500", "html", "no keys list", "too large", "redirect to http", "redirect loop"],
)
def test_fetch__refused_answers_keep_the_keys_held(provider, clock, answer, reason, caplog):
    caplog.set_level(logging.WARNING, logger="orquestador.jwks")
    signer = jwks_support.signer("ES256")
    provider.publish(signer)
    assert principal_from_token(signed(signer)).subject == "alice"
    provider.respond = answer
    with pytest.raises(jwks.FetchFailed, match=reason):
        jwks.signing_keys(jwks.fetch_document(provider.url))
    clock.advance(301)
    assert principal_from_token(signed(signer, sub="bob")).subject == "bob"
    assert reason in caplog.text


def test_fetch__follows_a_redirect_to_a_url_it_may_fetch(provider):
    signer = jwks_support.signer("EdDSA")
    provider.publish(signer)
    document = provider.document()
    provider.respond = lambda path: (
        (302, {"Location": "/moved"}, b"") if path != "/moved" else (200, {}, document)
    )
    assert set(jwks.signing_keys(jwks.fetch_document(provider.url))) == {signer.kid}


def test_fetch__bounded_in_time(provider, monkeypatch):
    release = threading.Event()

    def stall(path: str):
        release.wait(10)
        return 200, {}, b"{}"

    provider.respond = stall
    monkeypatch.setattr(jwks, "FETCH_TIMEOUT_SECONDS", 0.3)
    began = time.monotonic()
    try:
        with pytest.raises(jwks.FetchFailed, match="Timeout"):
            jwks.fetch_document(provider.url)
    finally:
        release.set()
    assert time.monotonic() - began < 3


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"JWT_SECRET": tokens.SECRET}, "not both"),
        ({"JWT_PUBLIC_KEY": "pem"}, "not both"),
        ({"JWT_JWKS_URL": "http://idp.example/keys"}, "https://"),
        ({"JWT_JWKS_URL": "ftp://127.0.0.1/keys"}, "https://"),
        ({"JWT_JWKS_CACHE_SECONDS": 0}, "JWT_JWKS_CACHE_SECONDS"),
        ({"JWT_SCOPE_CLAIM": " , "}, "JWT_SCOPE_CLAIM"),
    ],
)
def test_configuration__refused(provider, settings, changes, message):
    for name, value in changes.items():
        setattr(settings, name, value)
    with pytest.raises(ImproperlyConfigured, match=message):
        principal_from_token(tokens.token())


@pytest.mark.parametrize(
    "url",
    ["https://idp.example/keys", "http://127.0.0.1:8080/keys", "http://localhost/keys"],
)
def test_configuration__urls_accepted(url):
    assert jwks.url_problem(url) is None
