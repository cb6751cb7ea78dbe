"""Shared secrets presented as bearer tokens: the one rule for what a token may be, and the one
comparison, used by GET /metrics, the worker's metrics port and the worker endpoint.

Invariants:
- a configured token (METRICS_TOKEN, WORKER_ENDPOINT_TOKEN) is at least MIN_TOKEN_LENGTH
  characters with no whitespace, checked once at start (settings, runworker) with a message
  naming the variable;
- a presented token is compared in constant time, and only as `Authorization: Bearer <token>`;
  no token configured admits nobody here (callers that are open without a token say so).
"""

import hmac

MIN_TOKEN_LENGTH = 32  # characters of a shared secret, at least


def token_problem(name: str, token: str) -> str | None:
    """Why the set value of the variable `name` is not an acceptable token, or None."""
    if len(token) < MIN_TOKEN_LENGTH or any(c.isspace() for c in token):
        return f"{name} must be at least {MIN_TOKEN_LENGTH} characters with no spaces"
    return None


def bearer_matches(authorization: str | None, token: str) -> bool:
    """Does an Authorization header present `token` as a bearer token? Never when `token` is
    empty."""
    if not token:
        return False
    scheme, _, presented = (authorization or "").partition(" ")
    if scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(presented.strip().encode(), token.encode())


def metrics_token_matches(authorization: str | None, token: str) -> bool:
    """May this scrape read the metrics (GET /metrics, a worker's metrics port)? Yes when no
    METRICS_TOKEN is set (open by choice), otherwise only with the token as a bearer token."""
    return not token or bearer_matches(authorization, token)
