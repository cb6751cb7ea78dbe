"""Canonical JSON: the one byte form used for checksums, input hashes and size limits.

Canonical form sorts object keys, uses compact separators and keeps non-ASCII text as UTF-8, so
the same JSON value always hashes the same whatever its key order. NaN and infinities are not
JSON and are refused (ValueError).
"""

import hashlib
import json
from typing import Any

# Built once: json.dumps with any non-default option builds an encoder per call. An encoder
# keeps no state between calls, so threads share these.
_CANONICAL = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
)
_COMPACT = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def canonical_json(value: Any) -> str:
    """Return `value` as canonical JSON text (sorted keys, compact, UTF-8 kept)."""
    return _CANONICAL.encode(value)


def sha256_hex(value: Any) -> str:
    """Return the SHA-256 hex digest of `value`'s canonical JSON encoded as UTF-8."""
    return hashlib.sha256(canonical_json(value).encode("utf-8")).hexdigest()


def compact_size(value: Any) -> int:
    """Return the size in bytes of `value` as compact UTF-8 JSON (key order as given)."""
    return len(_COMPACT.encode(value).encode("utf-8"))
