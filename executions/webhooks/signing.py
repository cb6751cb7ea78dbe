"""Webhook signatures: `Orquestador-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256>` over
"<t>.<raw body>", one `v1=` per secret that signs (two during a rotation). A receiver verifies
with `signature_verify` or its own copy of these few lines."""

import hashlib
import hmac
import secrets
import time
from collections.abc import Sequence

SECRET_PREFIX = "whsec_"  # noqa: S105  # a prefix, not a secret
DEFAULT_TOLERANCE_SECONDS = 300  # seconds a receiver should accept a signature's timestamp for


def secret_new() -> str:
    """A new signing secret: 256 random bits."""
    return SECRET_PREFIX + secrets.token_urlsafe(32)


def _mac(secret: str, timestamp: int, body: bytes) -> str:
    return hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()


def signature_header(*, secrets: Sequence[str], timestamp: int, body: bytes) -> str:
    """The header value for `body` sent at `timestamp`, signed with each of `secrets`."""
    return ",".join([f"t={timestamp}", *(f"v1={_mac(s, timestamp, body)}" for s in secrets)])


def signature_verify(
    *,
    header: str,
    body: bytes,
    secret: str,
    tolerance_seconds: float = DEFAULT_TOLERANCE_SECONDS,
    now: float | None = None,
) -> bool:
    """Whether `header` signs `body` with `secret`, at a timestamp within the tolerance."""
    timestamp: int | None = None
    macs: list[str] = []
    for part in header.split(","):
        name, _, value = part.strip().partition("=")
        if name == "t" and value.isdigit():
            timestamp = int(value)
        elif name == "v1":
            macs.append(value)
    if timestamp is None:
        return False
    if abs((time.time() if now is None else now) - timestamp) > tolerance_seconds:
        return False
    expected = _mac(secret, timestamp, body)
    return any(hmac.compare_digest(expected, mac) for mac in macs)
