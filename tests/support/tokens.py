"""Real signed JWTs for tests: good ones, and every kind of bad one.

`token()` signs with the suite's HS256 secret by default; pass `key` and `algorithm` for RS256 or
ES256 with a key pair from `rsa_pair()` / `ec_pair()`. Claims are overridable one by one; pass
`None` to drop a claim. `unsigned()` and `hmac_signed()` build tokens PyJWT refuses to make
(alg "none", or HS256 keyed with a PEM public key: the classic algorithm confusion).
"""

import base64
import hashlib
import hmac
import json
import time
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


def token(*, key: Any = SECRET, algorithm: str = "HS256", **overrides: Any) -> str:
    return jwt.encode(claims(**overrides), key, algorithm=algorithm)


def bearer(value: str) -> dict[str, str]:
    """Headers for django.test.Client."""
    return {"HTTP_AUTHORIZATION": f"Bearer {value}"}


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def _segments(header: dict, payload: dict) -> str:
    return _b64(json.dumps(header).encode()) + "." + _b64(json.dumps(payload).encode())


def unsigned(**overrides: Any) -> str:
    """An alg "none" token with an empty signature."""
    return _segments({"alg": "none", "typ": "JWT"}, claims(**overrides)) + "."


def hmac_signed(key: bytes, **overrides: Any) -> str:
    """An HS256 token keyed with arbitrary bytes (such as a server's PEM public key)."""
    signing_input = _segments({"alg": "HS256", "typ": "JWT"}, claims(**overrides))
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
