"""How an HTTP call's fate maps to an outcome class, given the effect of what was called (the
table and why each choice: INTEGRATIONS.md#outcome-classes).

Nothing sent: TRANSIENT. Sent without a status: TRANSIENT for a read, UNKNOWN for a write. 408,
429: TRANSIENT. Other 5xx: TRANSIENT, but UNKNOWN for a NON_IDEMPOTENT_WRITE. 3xx (never
followed): PERMANENT for a read, UNKNOWN for a write. Other 4xx: PERMANENT. Error details are
fixed phrases plus a status code: never a header or a byte of the body.
"""

import dataclasses

from orquestador import errors

from .base import ActionResult, Outcome
from .transport import Stage, TransportError

READ_ONLY = "READ_ONLY"
NON_IDEMPOTENT_WRITE = "NON_IDEMPOTENT_WRITE"


def transient(detail: str, retry_after: float | None = None) -> ActionResult:
    return ActionResult(
        outcome=Outcome.TRANSIENT,
        error_code=errors.TRANSIENT_FAILURE,
        error_detail=detail,
        retry_after=retry_after,
    )


def permanent(detail: str, code: str = errors.PERMANENT_FAILURE) -> ActionResult:
    return ActionResult(outcome=Outcome.PERMANENT, error_code=code, error_detail=detail)


def unknown(detail: str, code: str = errors.UNCERTAIN_WRITE) -> ActionResult:
    return ActionResult(outcome=Outcome.UNKNOWN, error_code=code, error_detail=detail)


def from_status(status: int, effect: str, retry_after: float | None) -> ActionResult | None:
    """The outcome of a non-2xx status, or None for 2xx (the caller reads the body)."""
    if 200 <= status < 300:
        return None
    if status == 429:
        return dataclasses.replace(
            transient(f"provider answered HTTP {status}", retry_after), rate_limited=True
        )
    if status == 408:
        return transient(f"provider answered HTTP {status}", retry_after)
    if 300 <= status < 400:
        if effect == READ_ONLY:
            return permanent(f"provider answered HTTP {status}; redirects are not followed")
        return unknown(
            f"provider answered HTTP {status} to a write; redirects are not followed and the "
            "write may have been applied"
        )
    if 400 <= status < 500:
        return permanent(f"provider refused the call with HTTP {status}")
    # 5xx, and anything outside the defined ranges, is a server-side failure.
    if effect == NON_IDEMPOTENT_WRITE:
        return unknown(
            f"provider answered HTTP {status} to a non-idempotent write; it may have been applied"
        )
    return transient(f"provider answered HTTP {status}", retry_after)


def from_transport_error(error: TransportError, effect: str) -> ActionResult:
    """The outcome of a call that produced no complete response."""
    if error.stage is Stage.NOT_SENT:
        if error.final:
            return permanent(error.reason)
        return transient(f"{error.reason}; nothing was sent")
    if effect == READ_ONLY:
        if error.final:  # over the size limit: asking again returns the same body
            return permanent(error.reason, errors.OUTPUT_INVALID)
        return transient(error.reason)
    if error.stage is Stage.SENT:
        return unknown(f"{error.reason}; the write may have been applied")
    # A 2xx whose body could not be read: the provider acted, its output is lost.
    code = errors.OUTPUT_INVALID if error.final else errors.UNCERTAIN_WRITE
    return unknown(
        f"provider answered HTTP {error.status} but {error.reason}; the write was applied and "
        "its output is unknown",
        code,
    )
