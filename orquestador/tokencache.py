"""Bearer tokens already verified, remembered so a client's next call skips the verification
(docs/adr/0021-an-entrance-as-fast-as-the-engine.md).

Only a token that verified in full is kept, with its principal, under the key, issuer and
audience it verified against, until the first of: its own `exp` (the leeway is never extended),
MAX_AGE_SECONDS after it was verified, or a change of the JWT settings. A refused token is never
kept, so a forged or expired one is refused on every call. Entries are keyed by a digest of the
token (the cache holds no token); at most MAX_ENTRIES, the oldest dropped first.
"""

from __future__ import annotations

import hashlib
import threading
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .auth import Principal

MAX_ENTRIES = 4096  # tokens remembered per process
MAX_AGE_SECONDS = 300.0  # seconds a verification is trusted, whatever the token's exp

# digest -> (the settings it verified under, its principal, until when it may be used)
_entries: dict[bytes, tuple[tuple[Any, ...], Principal, float]] = {}
_lock = threading.Lock()


def _digest(token: str) -> bytes:
    return hashlib.blake2b(token.encode("utf-8", "surrogatepass"), digest_size=20).digest()


def remembered(token: str, config: tuple[Any, ...]) -> Principal | None:
    """The principal `token` verified to under `config`, if that is still to be trusted."""
    entry = _entries.get(_digest(token))
    if entry is None:
        return None
    verified_under, principal, until = entry
    if verified_under != config or time.time() >= until:
        return None
    return principal


def remember(token: str, config: tuple[Any, ...], principal: Principal, expires: Any) -> None:
    """Note that `token` verified to `principal` under `config`; `expires` is its `exp` claim."""
    if isinstance(expires, bool) or not isinstance(expires, int | float):
        return  # PyJWT verified it as a number; anything else is not worth guessing about
    until = min(float(expires), time.time() + MAX_AGE_SECONDS)
    digest = _digest(token)
    with _lock:
        _entries.pop(digest, None)
        while len(_entries) >= MAX_ENTRIES:
            del _entries[next(iter(_entries))]
        _entries[digest] = (config, principal, until)


def forget_all() -> None:
    """Drop every entry (tests; a process never needs it: a settings change already misses)."""
    with _lock:
        _entries.clear()
