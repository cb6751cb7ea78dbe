"""HTTP transport shared by the trusted adapters, on one asynchronous client (aiohttp), answering
the question every classification hangs on: could the request have reached the provider (`Stage`)?

Invariants: one session per event loop (pools.py), with no retries, redirects, cookies or
environment (certificates checked against certifi's bundle); every call has a connect timeout
and a total budget held by its watchdog (watchdog.py), which also stops it when the execution's
`StopSignal` is set; a body is read only up to a byte limit; headers and the URL are checked
before sending; failures are `TransportError` values with a fixed, safe reason, never network
text, a header or a byte of the body. Why: docs/adr/0016-adapters-on-an-asynchronous-client.md.
"""

import email.utils
import functools
import math
import re
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from urllib.parse import quote, urlsplit

import aiohttp
import yarl

from .base import Binding, StopSignal
from .pools import client
from .watchdog import Interrupted, Stage, Watchdog, Why

DEFAULT_CONNECT_TIMEOUT = 3.0  # seconds, capped by the contract's timeout_seconds
MAX_RETRY_AFTER_SECONDS = 86_400  # seconds; the worker applies its own, smaller cap
USER_AGENT = "orquestador"

Sink = Callable[[bytes], Awaitable[None]]  # takes a streamed body, chunk by chunk

_MEDIA_TYPE = re.compile(r"[a-z0-9!#$&^_.+-]{1,64}/[a-z0-9!#$&^_.+-]{1,64}")
# What requests accepted as a header (requests/_internal_utils.py: a name without colon or line
# break, a value without line break or leading whitespace), narrowed to what HTTP/1.1 can carry
# (names ASCII, values latin-1), so a bad header is refused before anything is sent.
_HEADER_NAME = re.compile(r"[^:\s\x80-\U0010ffff][^:\r\n\x80-\U0010ffff]*")
_HEADER_VALUE = re.compile(r"(?:[^\s\u0100-\U0010ffff][^\r\n\0\u0100-\U0010ffff]*)?")
# What stays as it is in a path or a query; anything else is percent-encoded (escapes are kept).
_PATH_SAFE = "!$%&'()*+,/:;=@~"
_QUERY_SAFE = _PATH_SAFE + "?"
_STOPPED = {
    Stage.NOT_SENT: "the execution was stopped before the call",
    Stage.SENT: "the execution was stopped while waiting for the response",
    Stage.BODY: "the execution was stopped",
}
_TIMED_OUT = {
    Stage.NOT_SENT: "timed out connecting",
    Stage.SENT: "the time budget ran out waiting for the response",
    Stage.BODY: "the time budget ran out reading the body",
}


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
async def exchange(
    *,
    method: str,
    url: str,
    headers: Mapping[str, str],
    body: bytes | None,
    deadline: Deadline,
    connect_timeout: float,
    max_bytes: int,
    want_body: Callable[[int], bool],
    sink: Sink | None = None,
    cancelled: StopSignal | None = None,
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
    target = _checked(url, headers)
    session = client()
    response: aiohttp.ClientResponse | None = None
    consumed = False  # the body was read to its end: the connection can serve another call
    try:
        async with Watchdog(remaining, min(connect_timeout, remaining), cancelled) as watchdog:
            response = await _send(session, method, target, headers, body, watchdog)
            status = response.status
            watchdog.answered(status)
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
                    Stage.BODY, f"response body over {max_bytes} bytes", status=status, final=True
                )
            content, size = await _read_body(response, max_bytes, sink)
            consumed = True
            return Reply(reply.status, reply.media_type, reply.retry_after, content, size)
    except Interrupted as exc:
        stopped = exc.watchdog.why is Why.STOPPED
        stage = exc.watchdog.stage
        reason = (_STOPPED if stopped else _TIMED_OUT)[stage]
        raise TransportError(stage, reason, status=exc.watchdog.status) from None
    finally:
        if response is not None:
            if consumed:
                response.release()
            else:  # an unread or half-read body: the connection cannot serve another call
                response.close()


async def fetch(
    binding: Binding,
    url: str,
    headers: Mapping[str, str],
    *,
    max_bytes: int,
    sink: Sink | None = None,
    cancelled: StopSignal | None = None,
) -> Reply:
    """GET `url` within the binding's budget (the contract's timeout_seconds in all, the route's
    connect_timeout_seconds to connect), reading the body only of a 200."""
    return await exchange(
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


def _checked(url: str, headers: Mapping[str, str]) -> yarl.URL:
    """The URL to send to, once the request is known to be one that can be sent."""
    for name, value in headers.items():
        if not (_HEADER_NAME.fullmatch(name) and _HEADER_VALUE.fullmatch(value)):
            raise TransportError(Stage.NOT_SENT, "the request could not be built", final=True)
    try:
        return _target(url)
    except ValueError:
        raise TransportError(Stage.NOT_SENT, "the request could not be built", final=True) from None


@functools.lru_cache(maxsize=1024)
def _target(url: str) -> yarl.URL:
    """`url` as it goes on the wire: its path and query as given, percent-escapes kept (a parser
    that decodes `%3A` would send another path: not every server reads them alike), characters
    that cannot travel in a URL percent-encoded, the host IDNA-encoded. ValueError when it has
    no scheme and host to send to."""
    parts = urlsplit(url)
    origin = yarl.URL(url).origin()  # scheme, host and port; ValueError without them
    path = quote(parts.path or "/", safe=_PATH_SAFE)
    query = f"?{quote(parts.query, safe=_QUERY_SAFE)}" if parts.query else ""
    return yarl.URL(f"{origin}{path}{query}", encoded=True)


async def _send(
    session: aiohttp.ClientSession,
    method: str,
    target: yarl.URL,
    headers: Mapping[str, str],
    body: bytes | None,
    watchdog: Watchdog,
) -> aiohttp.ClientResponse:
    """Send the request and read the status line and headers; failures become TransportError."""
    try:
        return await session.request(
            method, target, data=body, headers=headers, allow_redirects=False
        )
    # The order below matters: a certificate error is a connector SSL error is a connector
    # error; an invalid URL is a ValueError.
    except aiohttp.ClientConnectorCertificateError:
        raise TransportError(Stage.NOT_SENT, "TLS certificate refused") from None
    except aiohttp.ClientConnectorSSLError:  # the handshake failed: no request byte was sent
        raise TransportError(Stage.NOT_SENT, "TLS handshake failed") from None
    except aiohttp.ClientConnectorError:  # refused, unreachable, no such host
        raise TransportError(Stage.NOT_SENT, "could not connect") from None
    except aiohttp.InvalidURL:
        raise TransportError(Stage.NOT_SENT, "the request could not be built", final=True) from None
    except (aiohttp.ClientError, OSError, ValueError) as exc:
        if watchdog.stage is Stage.NOT_SENT:  # the connection was never had
            if isinstance(exc, ValueError):
                raise TransportError(
                    Stage.NOT_SENT, "the request could not be built", final=True
                ) from None
            raise TransportError(Stage.NOT_SENT, "could not connect") from None
        if isinstance(exc, aiohttp.ServerDisconnectedError | aiohttp.ClientOSError | OSError):
            raise TransportError(Stage.SENT, "connection lost after sending") from None
        raise TransportError(Stage.SENT, "the call failed after sending") from None


async def _read_body(
    response: aiohttp.ClientResponse, max_bytes: int, sink: Sink | None
) -> tuple[bytes | None, int]:
    status = response.status
    chunks: list[bytes] = []
    size = 0
    content = response.content
    try:
        while chunk := await content.readany():
            size += len(chunk)
            if size > max_bytes:
                raise TransportError(
                    Stage.BODY, f"response body over {max_bytes} bytes", status=status, final=True
                )
            if sink is not None:
                await sink(chunk)
            else:
                chunks.append(chunk)
    except (aiohttp.ClientError, OSError, ValueError):
        reason = "connection lost reading the body"
        raise TransportError(Stage.BODY, reason, status=status) from None
    return (None if sink is not None else b"".join(chunks)), size


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
