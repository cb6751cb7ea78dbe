"""Real signed JWTs for tests: good ones, and every kind of bad one.

`token()` signs with the current Signer: the suite's HS256 secret unless `signing_with()` says
another (a provider's key and its kid, tests/support/jwks.py); pass `key` and `algorithm` for RS256
or ES256 with a key pair from `rsa_pair()` / `ec_pair()`. Claims are overridable one by one; pass
`None` to drop a claim. `forged()` signs with a key the server does not trust; `unsigned()` and
`hmac_signed()` build tokens PyJWT refuses to make (alg "none", or HS256 keyed with a PEM public
key: the classic algorithm confusion).
"""

import base64
import contextlib
import hashlib
import hmac
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

SECRET = "test-secret-that-is-long-enough-for-hs256-0123456789"
OTHER_SECRET = "another-secret-that-is-also-long-enough-for-hs256-xyz"
ISSUER = "orquestador"
AUDIENCE = "orquestador-api"
WRITE_READ = "requests:write requests:read"

_DEFAULT = object()


@dataclass(frozen=True)
class Signer:
    """How `token()` signs by default: a key, its algorithm, the kid its header names (None: no
    kid), and `other`, a key of the same kind the server does not trust (for forgeries)."""

    key: Any
    algorithm: str
    kid: str | None
    other: Any


HS256 = Signer(key=SECRET, algorithm="HS256", kid=None, other=OTHER_SECRET)
_signer = [HS256]


@contextlib.contextmanager
def signing_with(signer: Signer) -> Iterator[Signer]:
    _signer.append(signer)
    try:
        yield signer
    finally:
        _signer.remove(signer)


def current() -> Signer:
    return _signer[-1]


def claims(
    *,
    sub: Any = "alice",
    tenant: Any = "acme",
    scope: Any = WRITE_READ,
    iss: Any = ISSUER,
    aud: Any = AUDIENCE,
    exp_in: int | None = 300,
    nbf_in: int | None = None,
    **extra: Any,
) -> dict[str, Any]:
    now = int(time.time())
    values = {
        "sub": sub,
        "tenant": tenant,
        "scope": scope,
        "iss": iss,
        "aud": aud,
        "iat": now,
        "exp": None if exp_in is None else now + exp_in,
        "nbf": None if nbf_in is None else now + nbf_in,
        **extra,
    }
    return {name: value for name, value in values.items() if value is not None}


def token(
    *, key: Any = _DEFAULT, algorithm: str | None = None, kid: Any = _DEFAULT, **overrides: Any
) -> str:
    """Signed by the current Signer, or by `key` with `algorithm` (then no kid unless given)."""
    signer = current()
    if key is _DEFAULT:
        key, algorithm = signer.key, algorithm or signer.algorithm
        kid = signer.kid if kid is _DEFAULT else kid
    elif kid is _DEFAULT:
        kid = None
    headers = None if kid is None else {"kid": kid}
    return jwt.encode(claims(**overrides), key, algorithm=algorithm or "HS256", headers=headers)


def forged(**overrides: Any) -> str:
    """Like `token()`, the same algorithm and kid, signed with a key the server does not trust."""
    signer = current()
    return token(key=signer.other, algorithm=signer.algorithm, kid=signer.kid, **overrides)


def bearer(value: str) -> dict[str, str]:
    """Headers for django.test.Client."""
    return {"HTTP_AUTHORIZATION": f"Bearer {value}"}


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def _segments(header: dict, payload: dict) -> str:
    return _b64(json.dumps(header).encode()) + "." + _b64(json.dumps(payload).encode())


def _header(alg: str) -> dict[str, str]:
    kid = current().kid
    return {"alg": alg, "typ": "JWT", **({"kid": kid} if kid is not None else {})}


def unsigned(**overrides: Any) -> str:
    """An alg "none" token with an empty signature (naming the current Signer's kid, if any)."""
    return _segments(_header("none"), claims(**overrides)) + "."


def hmac_signed(key: bytes, **overrides: Any) -> str:
    """An HS256 token keyed with arbitrary bytes (such as a server's PEM public key), naming the
    current Signer's kid, if any."""
    signing_input = _segments(_header("HS256"), claims(**overrides))
    signature = hmac.new(key, signing_input.encode(), hashlib.sha256).digest()
    return signing_input + "." + _b64(signature)


def public_pem(private_key: Any) -> str:
    return (
        private_key.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode("ascii")
    )


def rsa_pair() -> tuple[Any, str]:
    """A fresh RSA private key and its PEM public key."""
    private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return private, public_pem(private)


def ec_pair() -> tuple[Any, str]:
    """A fresh P-256 private key and its PEM public key."""
    private = ec.generate_private_key(ec.SECP256R1())
    return private, public_pem(private)
