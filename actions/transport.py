"""HTTP transport shared by the trusted adapters.

Every classification an adapter makes hangs on one question: could the request have reached the
provider? This module answers it with `Stage` and keeps these invariants:
- one urllib3 `PoolManager` per thread, with no automatic retries, no redirects followed, no
  cookie kept and nothing taken from the environment (no proxies, netrc or CA overrides:
  certificates are checked against certifi's bundle, as `requests` does), so a call goes to the
  route's URL and nowhere else, and carries nothing of an earlier call;
- every call has connect and read timeouts, and a total budget: once the request is written, a
  watchdog shuts the socket at the deadline, so a provider dripping its headers or body byte by
  byte cannot hold a worker thread past it; it also shuts it as soon as the execution is told
  to stop (a `StopSignal` set: cancelled, lease lost, shutdown), so a stopped holder does not
  wait on a slow provider;
- a body is read only up to a byte limit;
- failures are `TransportError` values with a fixed, safe reason: no exception text from the
  network stack, no header, no byte of the provider's body ever leaves this module in an error.

It drives urllib3 directly rather than through `requests` (measured in docs/benchmarks.md, run F):
at the hundreds of calls per second a worker makes to slow providers, requests' layers (prepared
requests, hooks, the cookie jar, settings merged per call) cost as much CPU as the call itself,
and nothing here uses them. What requests checked before sending (header names and values, the
URL) is checked here, with the same classification.

The per-thread pool managers are in pools.py, the watchdog and its timer thread in watchdog.py.
"""

import email.utils
import enum
import http.client
import math
import re
import ssl
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

import urllib3
import urllib3.exceptions

from .base import Binding
from .pools import pool_manager
from .watchdog import Watchdog, watching

DEFAULT_CONNECT_TIMEOUT = 3.0  # seconds, capped by the contract's timeout_seconds
CHUNK_BYTES = 64 * 1024  # bytes per read while streaming a body
MAX_RETRY_AFTER_SECONDS = 86_400  # seconds; the worker applies its own, smaller cap
USER_AGENT = "orquestador"

_MEDIA_TYPE = re.compile(r"[a-z0-9!#$&^_.+-]{1,64}/[a-z0-9!#$&^_.+-]{1,64}")
# What requests accepted as a header (requests/_internal_utils.py: a name without colon or line
# break, a value without line break or leading whitespace), narrowed to what http.client can
# encode (names ASCII, values latin-1), so a bad header is refused before anything is sent.
_HEADER_NAME = re.compile(r"[^:\s\x80-\U0010ffff][^:\r\n\x80-\U0010ffff]*")
_HEADER_VALUE = re.compile(r"(?:[^\s\u0100-\U0010ffff][^\r\n\0\u0100-\U0010ffff]*)?")


class Stage(enum.StrEnum):
    NOT_SENT = "NOT_SENT"  # failed before any byte of the request could reach the provider
    SENT = "SENT"  # the request was (or may have been) sent; no status came back
    BODY = "BODY"  # a status came back; its body could not be read in full


class TransportError(Exception):
    """A call that did not produce a complete response. `reason` is safe to store and show."""

    def __init__(
        self, stage: Stage, reason: str, *, status: int | None = None, final: bool = False
    ) -> None:
        self.stage, self.reason, self.status = stage, reason, status
        # final: retrying cannot help (the request could not even be built, or the body is over
        # its limit); the adapter decides what that means for its effect.
        self.final = final
        super().__init__(f"{stage}: {reason}")


@dataclass(frozen=True)
class Deadline:
    """The total budget of one call, on the monotonic clock."""

    at: float

    @classmethod
    def after(cls, seconds: float) -> "Deadline":
        return cls(time.monotonic() + seconds)

    def remaining(self) -> float:
        return self.at - time.monotonic()


@dataclass(frozen=True)
class Reply:
    status: int
    media_type: str  # lower-cased type/subtype from Content-Type, or "" when absent or odd
    retry_after: float | None  # seconds, parsed and bounded; None when absent or unparseable
    body: bytes | None  # None when the caller did not want it (or streamed it to a sink)
    size: int  # bytes of body read


# ------------------------------------------------------------------------------
# One exchange
# ------------------------------------------------------------------------------
def exchange(
    *,
    method: str,
    url: str,
    headers: Mapping[str, str],
    body: bytes | None,
    deadline: Deadline,
    connect_timeout: float,
    max_bytes: int,
    want_body: Callable[[int], bool],
    sink: Callable[[bytes], None] | None = None,
    cancelled: threading.Event | None = None,
) -> Reply:
    """Send one request and read its reply within `deadline`.

    The body is read only when `want_body(status)` is true; it goes to `sink` chunk by chunk
    when one is given (then `Reply.body` is None), otherwise it is returned.
    """
    if cancelled is not None and cancelled.is_set():
        raise TransportError(Stage.NOT_SENT, "the execution was stopped before the call")
    remaining = deadline.remaining()
    if remaining <= 0:
        raise TransportError(Stage.NOT_SENT, "no time left in the budget before the call")
    # total bounds connect plus the wait for the status line; read bounds each socket read;
    # the watchdog bounds everything after the request is written, however slowly bytes come.
    timeout = urllib3.Timeout(
        connect=min(connect_timeout, remaining), read=remaining, total=remaining
    )
    with watching(remaining) as watchdog:
        # A StopSignal (the worker's) wakes this call as soon as the execution is told to stop.
        on_set = getattr(cancelled, "on_set", None)
        forget = on_set(watchdog.stop) if on_set is not None else None
        try:
            response = _send(method, url, headers, body, timeout, watchdog)
            consumed = False  # the body was read to its end: the connection can serve another call
            try:
                status = response.status
                reply = Reply(
                    status=status,
                    media_type=_media_type(response.headers.get("Content-Type")),
                    retry_after=parse_retry_after(response.headers.get("Retry-After")),
                    body=None,
                    size=0,
                )
                if not want_body(status):
                    return reply
                declared = response.headers.get("Content-Length", "")
                if declared.isdigit() and int(declared) > max_bytes:
                    raise TransportError(
                        Stage.BODY,
                        f"response body over {max_bytes} bytes",
                        status=status,
                        final=True,
                    )
                content, size = _read_body(response, watchdog, max_bytes, sink, cancelled)
                consumed = True
                return Reply(reply.status, reply.media_type, reply.retry_after, content, size)
            finally:
                if not consumed:  # an unread or half-read body: the connection cannot be reused
                    response.close()
                response.release_conn()
        finally:
            if forget is not None:
                forget()


def fetch(
    binding: Binding,
    url: str,
    headers: Mapping[str, str],
    *,
    max_bytes: int,
    sink: Callable[[bytes], None] | None = None,
    cancelled: threading.Event | None = None,
) -> Reply:
    """GET `url` within the binding's budget (the contract's timeout_seconds in all, the route's
    connect_timeout_seconds to connect), reading the body only of a 200."""
    return exchange(
        method="GET",
        url=url,
        headers=headers,
        body=None,
        deadline=Deadline.after(binding.contract.timeout_seconds),
        connect_timeout=binding.route.options["connect_timeout_seconds"],
        max_bytes=max_bytes,
        want_body=_is_ok,
        sink=sink,
        cancelled=cancelled,
    )


def _is_ok(status: int) -> bool:
    return status == 200


def _send(
    method: str,
    url: str,
    headers: Mapping[str, str],
    body: bytes | None,
    timeout: urllib3.Timeout,
    watchdog: Watchdog,
) -> urllib3.BaseHTTPResponse:
    """Send the request and read the status line and headers; failures become TransportError."""
    for name, value in headers.items():
        if not (_HEADER_NAME.fullmatch(name) and _HEADER_VALUE.fullmatch(value)):
            raise TransportError(Stage.NOT_SENT, "the request could not be built", final=True)
    try:
        return pool_manager().urlopen(
            method,
            url,
            body=body,
            headers=dict(headers),
            timeout=timeout,
            retries=False,
            redirect=False,
            preload_content=False,
            decode_content=True,
        )
    # urllib3 raises its own errors as they are when retries are off; the order below matters
    # (a NewConnectionError is a ConnectTimeoutError, a LocationValueError a ValueError).
    except urllib3.exceptions.NewConnectionError:  # refused, unreachable, no such host
        raise TransportError(Stage.NOT_SENT, "could not connect") from None
    except urllib3.exceptions.ConnectTimeoutError:
        raise TransportError(Stage.NOT_SENT, "timed out connecting") from None
    except urllib3.exceptions.SSLError as exc:
        if _certificate_refused(exc):
            raise TransportError(Stage.NOT_SENT, "TLS certificate refused") from None
        raise TransportError(Stage.SENT, "TLS failure during the call") from None
    except urllib3.exceptions.ReadTimeoutError:
        raise TransportError(Stage.SENT, "timed out waiting for the response") from None
    except urllib3.exceptions.LocationValueError:
        # A URL urllib3 cannot parse, a scheme it does not serve, a host no name can encode:
        # raised while the request is built, before a connection is opened or used.
        raise TransportError(Stage.NOT_SENT, "the request could not be built", final=True) from None
    except (urllib3.exceptions.ProtocolError, http.client.HTTPException, OSError):
        if watchdog.expired:
            raise TransportError(
                Stage.SENT, "the time budget ran out waiting for the response"
            ) from None
        if watchdog.stopped:
            raise TransportError(
                Stage.SENT, "the execution was stopped while waiting for the response"
            ) from None
        raise TransportError(Stage.SENT, "connection lost after sending") from None
    except (urllib3.exceptions.HTTPError, ValueError):
        raise TransportError(Stage.SENT, "the call failed after sending") from None


def _read_body(
    response: urllib3.BaseHTTPResponse,
    watchdog: Watchdog,
    max_bytes: int,
    sink: Callable[[bytes], None] | None,
    cancelled: threading.Event | None,
) -> tuple[bytes | None, int]:
    status = response.status
    chunks: list[bytes] = []
    size = 0
    try:
        for chunk in response.stream(CHUNK_BYTES, decode_content=True):
            if watchdog.expired:
                break
            if cancelled is not None and cancelled.is_set():
                raise TransportError(Stage.BODY, "the execution was stopped", status=status)
            size += len(chunk)
            if size > max_bytes:
                raise TransportError(
                    Stage.BODY, f"response body over {max_bytes} bytes", status=status, final=True
                )
            if sink is not None:
                sink(chunk)
            else:
                chunks.append(chunk)
    except TransportError:
        raise
    except (urllib3.exceptions.HTTPError, http.client.HTTPException, OSError, ValueError):
        if watchdog.stopped:
            raise TransportError(Stage.BODY, "the execution was stopped", status=status) from None
        if not watchdog.expired:
            raise TransportError(
                Stage.BODY, "connection lost reading the body", status=status
            ) from None
    # A body delimited by the connection closing just ends early when the watchdog fires.
    if watchdog.expired:
        raise TransportError(Stage.BODY, "the time budget ran out reading the body", status=status)
    return (None if sink is not None else b"".join(chunks)), size


def _certificate_refused(exc: urllib3.exceptions.SSLError) -> bool:
    """Certificate verification happens in the handshake, before any request byte is sent."""
    seen: set[int] = set()
    stack: list[BaseException | None] = [exc]
    while stack:
        current = stack.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, ssl.SSLCertVerificationError | ssl.CertificateError):
            return True
        stack.extend([current.__cause__, current.__context__, getattr(current, "reason", None)])
        stack.extend(arg for arg in current.args if isinstance(arg, BaseException))
    return False


def _media_type(value: str | None) -> str:
    if not value:
        return ""
    media_type = value.split(";", 1)[0].strip().lower()
    return media_type if _MEDIA_TYPE.fullmatch(media_type) else ""


def parse_retry_after(value: str | None, *, now: datetime | None = None) -> float | None:
    """Seconds to wait from a Retry-After header (delay-seconds or HTTP-date), bounded.

    A date in the past means 0; anything unparseable means None (the worker's own backoff).
    """
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        return float(min(int(value), MAX_RETRY_AFTER_SECONDS))
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # "-0000" dates: RFC 9110 dates are always GMT
        when = when.replace(tzinfo=UTC)
    delta = (when - (now or datetime.now(UTC))).total_seconds()
    if math.isnan(delta):
        return None
    return float(min(max(0.0, math.ceil(delta)), MAX_RETRY_AFTER_SECONDS))
