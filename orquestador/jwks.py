"""The identity provider's signing keys (JWT_JWKS_URL), kept per process (docs/api.md#keys-from-
the-identity-provider). A key is found by the token's `kid`; its algorithm (RS256, ES256, EdDSA)
comes from the key, never from the token. The set is fetched again after JWT_JWKS_CACHE_SECONDS;
a `kid` it lacks fetches it at most once a minute, however many threads and tokens ask; a fetch
that fails keeps the set already held (one WARNING per outage) and is tried again a minute later.

Why not PyJWKClient: it drops its set when the set expires and the fetch fails, retries a failing
endpoint on every unknown `kid`, reads an answer of any size, and uses urllib where the application
has one HTTP client, aiohttp (docs/adr/0016): the fetch here is aiohttp, bounded in time and size.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import itertools
import json
import logging
import math
import ssl
import threading
import time
import urllib.parse
from dataclasses import dataclass
from typing import Any

import aiohttp
import certifi
import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

logger = logging.getLogger(__name__)

ALGORITHMS = ("RS256", "ES256", "EdDSA")  # what a provider's key may verify here
# (kty, crv) of a JWK -> the one algorithm it verifies; any other key is not used.
_ALGORITHM_OF: dict[tuple[Any, Any], str] = {
    ("RSA", None): "RS256",
    ("EC", "P-256"): "ES256",
    ("OKP", "Ed25519"): "EdDSA",
}
MIN_REFETCH_SECONDS = 60.0  # at most one fetch a minute for unknown kids, or while failing
FETCH_TIMEOUT_SECONDS = 5.0  # the whole fetch, a request's thread waits for it
MAX_DOCUMENT_BYTES = 256 * 1024  # a JWKS answer larger than this is refused unread
MAX_REDIRECTS = 3  # followed only to URLs the setting itself could name
MAX_KID_LENGTH = 256  # characters of a token's kid looked up
MIN_RSA_BITS = 2048
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")


# Generations of key sets, unique in the process: a token remembered under one (tokencache.py) is
# never taken for verified under another.
_generations = itertools.count(1)


class FetchFailed(Exception):
    """The key set could not be fetched; the message is safe to log."""


def url_problem(url: str) -> str | None:
    """Why `url` may not serve keys (None when it may): https, or plain http on loopback."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme == "https" and parts.hostname:
        return None
    if parts.scheme == "http" and parts.hostname in LOOPBACK_HOSTS:
        return None
    return "must be an https:// URL (plain http only on 127.0.0.1 or localhost)"


@dataclass(frozen=True)
class SigningKey:
    kid: str
    algorithm: str
    key: Any  # a cryptography public key


def signing_keys(document: Any) -> dict[str, SigningKey]:
    """The usable keys of a JWKS document, by kid; raises FetchFailed if it is no JWKS."""
    if not isinstance(document, dict) or not isinstance(document.get("keys"), list):
        raise FetchFailed("the answer is not a JWKS document (an object with a 'keys' list)")
    keys: dict[str, SigningKey] = {}
    for jwk in document["keys"]:
        found = _signing_key(jwk)
        if found is not None and found.kid not in keys:  # a repeated kid: the first one
            keys[found.kid] = found
    return keys


def _signing_key(jwk: Any) -> SigningKey | None:
    if not isinstance(jwk, dict) or "d" in jwk:  # a private key is never published, nor used
        return None
    kid = jwk.get("kid")
    if not isinstance(kid, str) or not kid or jwk.get("use", "sig") != "sig":
        return None
    operations = jwk.get("key_ops")
    if operations is not None and (not isinstance(operations, list) or "verify" not in operations):
        return None
    kty = jwk.get("kty")
    algorithm = _ALGORITHM_OF.get((kty, None if kty == "RSA" else jwk.get("crv")))
    if algorithm is None or jwk.get("alg", algorithm) != algorithm:
        return None  # another algorithm (RS384, PS256, HS256, ...) or a key for none of ours
    try:
        key = jwt.PyJWK(jwk, algorithm).key
    except (jwt.PyJWKError, jwt.InvalidKeyError, ValueError, TypeError):
        return None
    if isinstance(key, rsa.RSAPublicKey) and key.key_size < MIN_RSA_BITS:
        return None
    return SigningKey(kid=kid, algorithm=algorithm, key=key)


class KeySet:
    """One JWKS endpoint's keys in this process, shared by its threads."""

    def __init__(self, url: str, cache_seconds: float) -> None:
        self.url = url
        self.cache_seconds = cache_seconds
        self.generation = 0  # changes whenever the keys held change (the token cache's key)
        self.fetches = 0  # fetches tried, counted for tests and the benchmark
        self._keys: dict[str, SigningKey] = {}
        # What the keys held are (kid, algorithm, public key), to see a change.
        self._held: frozenset[tuple[str, str, bytes]] = frozenset()
        self._lock = threading.Lock()  # one fetch at a time
        self._fresh_until = -math.inf  # monotonic: a refresh is due from then on
        self._last_attempt = -math.inf  # monotonic: when the last fetch began
        self._failing = False  # an outage is under way: its WARNING was logged

    def current(self) -> int:
        """The generation of the keys held, after a refresh if one is due. A thread that finds
        a fetch under way goes on with the keys held."""
        if time.monotonic() >= self._fresh_until and self._lock.acquire(blocking=False):
            try:
                if time.monotonic() >= self._fresh_until:
                    self._fetch_locked()
            finally:
                self._lock.release()
        return self.generation

    def key(self, kid: str) -> SigningKey | None:
        """The key `kid` names, fetching the set again for an unknown one at most once a minute."""
        found = self._keys.get(kid)
        if found is not None:
            return found
        with self._lock:  # a fetch under way may bring it: wait for that one
            found = self._keys.get(kid)
            if found is None and time.monotonic() - self._last_attempt >= MIN_REFETCH_SECONDS:
                self._fetch_locked()
                found = self._keys.get(kid)
        return found

    def _fetch_locked(self) -> None:
        began = time.monotonic()
        self._last_attempt = began
        self.fetches += 1
        try:
            keys = signing_keys(fetch_document(self.url))
        except FetchFailed as exc:
            self._fresh_until = began + MIN_REFETCH_SECONDS
            if not self._failing:
                self._failing = True
                held = (
                    f"the {len(self._keys)} key(s) already fetched keep verifying tokens"
                    if self._keys
                    else "no key was fetched yet: every token is refused"
                )
                logger.warning(
                    "JWKS fetch from %s failed (%s); %s; the fetch is tried again at most once "
                    "a minute",
                    urllib.parse.urlsplit(self.url).netloc,
                    exc,
                    held,
                )
            return
        if self._failing:
            self._failing = False
            logger.info("JWKS fetched again: %d signing key(s)", len(keys))
        now_held = frozenset((k.kid, k.algorithm, _public_bytes(k.key)) for k in keys.values())
        if now_held != self._held:
            self._keys, self._held = keys, now_held
            self.generation = next(_generations)
        self._fresh_until = began + self.cache_seconds


def _public_bytes(key: Any) -> bytes:
    return key.public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )


_sets: dict[tuple[str, float], KeySet] = {}
_sets_lock = threading.Lock()


def key_set(url: str, cache_seconds: float) -> KeySet:
    """The process's one KeySet for this endpoint and cache time."""
    with _sets_lock:
        found = _sets.get((url, cache_seconds))
        if found is None:
            found = _sets[(url, cache_seconds)] = KeySet(url, cache_seconds)
        return found


def forget_all() -> None:
    """Drop every key set (tests: a fresh process's state)."""
    with _sets_lock:
        _sets.clear()


def fetch_document(url: str) -> Any:
    """GET `url` and parse its JSON; raises FetchFailed with the reason."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(_get(url))
    # A thread that runs an event loop (not the web's) blocks it no longer than the fetch.
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, _get(url)).result()


@functools.lru_cache(maxsize=1)
def _tls_context() -> ssl.SSLContext:
    return ssl.create_default_context(cafile=certifi.where())


async def _get(url: str) -> Any:
    timeout = aiohttp.ClientTimeout(total=FETCH_TIMEOUT_SECONDS)
    connector = aiohttp.TCPConnector(ssl=_tls_context())
    try:
        async with aiohttp.ClientSession(
            connector=connector,
            timeout=timeout,
            trust_env=False,  # no proxies nor netrc from the environment
            cookie_jar=aiohttp.DummyCookieJar(),
        ) as session:
            for _ in range(MAX_REDIRECTS + 1):
                async with session.get(
                    url, allow_redirects=False, headers={"Accept": "application/json"}
                ) as answer:
                    if answer.status in (301, 302, 303, 307, 308):
                        url = urllib.parse.urljoin(url, answer.headers.get("Location", ""))
                        if url_problem(url) is not None:
                            raise FetchFailed("redirected to a URL that is not https")
                        continue
                    if answer.status != 200:
                        raise FetchFailed(f"the endpoint answered HTTP {answer.status}")
                    body = await _read_bounded(answer)
                    break
            else:
                raise FetchFailed(f"more than {MAX_REDIRECTS} redirects")
    except (aiohttp.ClientError, TimeoutError, OSError) as exc:
        raise FetchFailed(f"{type(exc).__name__}: {str(exc)[:200]}") from None
    try:
        return json.loads(body)
    except (ValueError, UnicodeDecodeError):
        raise FetchFailed("the answer is not JSON") from None


async def _read_bounded(answer: aiohttp.ClientResponse) -> bytes:
    if (answer.content_length or 0) > MAX_DOCUMENT_BYTES:
        raise FetchFailed(f"the answer is larger than {MAX_DOCUMENT_BYTES} bytes")
    body = bytearray()
    async for chunk in answer.content.iter_chunked(64 * 1024):
        body += chunk
        if len(body) > MAX_DOCUMENT_BYTES:
            raise FetchFailed(f"the answer is larger than {MAX_DOCUMENT_BYTES} bytes")
    return bytes(body)
