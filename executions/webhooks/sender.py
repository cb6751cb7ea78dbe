"""One webhook attempt over HTTP/1.1: a POST on a kept-alive connection of the delivery loop's
own, guarded as executions/webhooks/targets.py says, answered within WEBHOOK_TIMEOUT_SECONDS.

The request path is this module's, on asyncio streams, not an HTTP client library's: an attempt
is one fixed request and one answer read up to a bound, and a general client's request machinery
cost the worker's event loop about 0.2 ms of CPU per attempt, more than the rest of a delivery.
What it keeps of a careful client: each new connection resolves the name again (no DNS cache)
and connects only to an address the rules allow (`guarded_socket`, on the resolved address, so a
name rebound to loopback is refused); TLS verified against certifi's authorities, for the URL's
host; no redirect followed (a 3xx is a failed attempt), no cookie, no proxy, nothing from the
environment; one deadline for the whole attempt, connection included; the answer read up to
READ_LIMIT bytes and kept up to MAX_BODY_KEPT characters. An idle connection is kept
KEEPALIVE_SECONDS and reused only when the previous answer was read whole; a reused one that
turns out closed before any answer is replaced once by a new one (at least once allows it).
Whatever goes wrong becomes an `Attempt` with a short, safe error.
"""

import asyncio
import ipaddress
import socket
import ssl
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlsplit

import aiohttp
import certifi

from .models import MAX_BODY_KEPT
from .targets import AddressRefused, guarded_socket

USER_AGENT = "orquestador-webhooks"
KEEPALIVE_SECONDS = 15.0  # seconds an idle connection to a receiver is kept
READ_LIMIT = MAX_BODY_KEPT * 4  # bytes of an answer's body read at most
HEAD_LIMIT = 64 * 1024  # bytes of an answer's status line and headers read at most
PATH_SAFE = "/%:@!$&'()*+,;=-._~?"  # kept as they are in the request target


@dataclass(frozen=True)
class Attempt:
    delivered: bool
    code: int | None = None  # the receiver's status, when it answered
    error: str | None = None
    body: str | None = None  # the start of its answer


class _Closed(Exception):
    """The connection ended before an answer's status line."""


class _BadAnswer(Exception):
    """An answer that is not HTTP/1.x as this sender reads it."""


@dataclass
class _Connection:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    idle_since: float = 0.0

    def usable(self, now: float) -> bool:
        return (
            now - self.idle_since < KEEPALIVE_SECONDS
            and not self.writer.is_closing()
            and not self.reader.at_eof()
        )

    def close(self) -> None:
        self.writer.close()


@dataclass(frozen=True)
class _Target:
    tls: bool
    host: str  # the URL's host, as connected to and verified against
    port: int
    head: bytes  # request line and the headers every attempt to this URL shares


def _target(url: str) -> _Target:
    parts = urlsplit(url)
    host = parts.hostname
    if not host:
        raise ValueError("no host")
    tls = parts.scheme == "https"
    port = parts.port or (443 if tls else 80)
    path = quote(parts.path or "/", safe=PATH_SAFE)
    if parts.query:
        path += "?" + quote(parts.query, safe=PATH_SAFE)
    if not host.isascii():
        host = host.encode("idna").decode("ascii")
    authority = f"[{host}]" if ":" in host else host
    if parts.port is not None and port != (443 if tls else 80):
        authority += f":{port}"
    head = (
        f"POST {path} HTTP/1.1\r\nHost: {authority}\r\nUser-Agent: {USER_AGENT}\r\n"
        "Content-Type: application/json\r\n"
    )
    return _Target(tls, host, port, head.encode("ascii"))


class WebhookSender:
    """Sends attempts, keeping connections per receiver; `close` closes them."""

    def __init__(
        self,
        *,
        timeout_seconds: float,
        allow_http: bool,
        allow_private_networks: bool,
        resolver: aiohttp.abc.AbstractResolver | None = None,
    ) -> None:
        self.timeout_seconds = timeout_seconds
        self.allow_http = allow_http
        self.allow_private_networks = allow_private_networks
        self._resolver = resolver
        self._guard = guarded_socket(allow_private_networks)
        self._tls: ssl.SSLContext | None = None
        self._idle: dict[tuple[bool, str, int], list[_Connection]] = {}
        self._targets: dict[str, _Target] = {}  # per URL: parsed once

    async def send(self, *, url: str, body: bytes, headers: dict[str, str]) -> Attempt:
        """POST `body` to `url`; any 2xx is delivered."""
        if not url.startswith("https://") and not (self.allow_http and url.startswith("http://")):
            return Attempt(False, error="refused by the https rule")
        try:
            target = self._targets.get(url) or self._parsed(url)
        except (ValueError, UnicodeError):
            return Attempt(False, error="invalid URL")
        extra = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
        request = b"".join(
            (target.head, extra.encode(), b"Content-Length: %d\r\n\r\n" % len(body), body)
        )
        try:
            async with asyncio.timeout(self.timeout_seconds):
                status, answer = await self._exchange(target, request)
        except TimeoutError:
            return Attempt(False, error=f"no answer within {self.timeout_seconds:g} s")
        except AddressRefused as refused:
            return Attempt(False, error=f"refused by the {refused.rule} rule")
        except ssl.SSLCertVerificationError:
            return Attempt(False, error="TLS certificate refused")
        except ssl.SSLError:
            return Attempt(False, error="TLS handshake failed")
        except (_Closed, asyncio.IncompleteReadError, ConnectionResetError, BrokenPipeError):
            return Attempt(False, error="connection closed before an answer")
        except _CouldNotConnect:
            return Attempt(False, error="could not connect")
        except (_BadAnswer, asyncio.LimitOverrunError, ValueError, OSError):
            return Attempt(False, error="the request failed")
        text = answer.decode("utf-8", "replace")[:MAX_BODY_KEPT]
        if 200 <= status < 300:
            return Attempt(True, code=status, body=text)
        error = "redirect not followed" if 300 <= status < 400 else f"answered {status}"
        return Attempt(False, code=status, error=error, body=text)

    def _parsed(self, url: str) -> _Target:
        target = _target(url)
        if len(self._targets) >= 1000:  # subscriptions come and go: a bounded memo
            self._targets.clear()
        self._targets[url] = target
        return target

    async def _exchange(self, target: _Target, request: bytes) -> tuple[int, bytes]:
        key = (target.tls, target.host, target.port)
        idle = self._idle.get(key)
        now = time.monotonic()
        while idle:
            conn = idle.pop()
            if conn.usable(now):
                try:
                    return await self._over(key, conn, request)
                except (_Closed, ConnectionResetError, BrokenPipeError):
                    break  # closed by the receiver while idle: once more on a new one
            conn.close()
        return await self._over(key, await self._connect(target), request)

    async def _over(
        self, key: tuple[bool, str, int], conn: _Connection, request: bytes
    ) -> tuple[int, bytes]:
        try:
            conn.writer.write(request)
            status, answer, keep = await _answer(conn.reader)
        except BaseException:
            conn.close()
            raise
        if keep:
            conn.idle_since = time.monotonic()
            self._idle.setdefault(key, []).append(conn)
        else:
            conn.close()
        return status, answer

    async def _connect(self, target: _Target) -> _Connection:
        """A new connection: the name resolved now, the first allowed address that answers."""
        loop = asyncio.get_running_loop()
        refused: AddressRefused | None = None
        for family, type_, proto, sockaddr in await self._addresses(target):
            try:
                sock = self._guard((family, type_, proto, "", sockaddr))
            except AddressRefused as exc:
                refused = exc
                continue
            try:
                sock.setblocking(False)
                await loop.sock_connect(sock, sockaddr)
            except OSError:
                sock.close()
                continue
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            reader, writer = await asyncio.open_connection(
                sock=sock,
                ssl=self._tls_context() if target.tls else None,
                server_hostname=target.host if target.tls else None,
                limit=HEAD_LIMIT,
            )
            return _Connection(reader, writer)
        if refused is not None:
            raise refused
        raise _CouldNotConnect

    async def _addresses(self, target: _Target) -> list[tuple[int, int, int, Any]]:
        if self._resolver is not None and not _literal(target.host):
            answers = await self._resolver.resolve(target.host, target.port, socket.AF_UNSPEC)
            return [
                (a["family"], socket.SOCK_STREAM, a.get("proto", 0), _sockaddr(a)) for a in answers
            ]
        loop = asyncio.get_running_loop()
        try:
            infos = await loop.getaddrinfo(target.host, target.port, type=socket.SOCK_STREAM)
        except (OSError, UnicodeError):
            raise _CouldNotConnect from None
        return [(family, type_, proto, sockaddr) for family, type_, proto, _, sockaddr in infos]

    def _tls_context(self) -> ssl.SSLContext:
        if self._tls is None:
            self._tls = ssl.create_default_context(cafile=certifi.where())
        return self._tls

    async def close(self) -> None:
        idle, self._idle = self._idle, {}
        for conns in idle.values():
            for conn in conns:
                conn.close()


class _CouldNotConnect(Exception):
    """No address of the receiver accepted a connection."""


def _literal(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _sockaddr(answer: dict[str, Any]) -> Any:
    if answer["family"] == socket.AF_INET6:
        return (answer["host"], answer["port"], 0, 0)
    return (answer["host"], answer["port"])


async def _answer(reader: asyncio.StreamReader) -> tuple[int, bytes, bool]:
    """(status, the body's first READ_LIMIT bytes, whether the connection can be reused)."""
    while True:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError as exc:
            if not exc.partial:
                raise _Closed from None
            raise
        lines = head[:-4].split(b"\r\n")
        version, _, rest = lines[0].partition(b" ")
        if not version.startswith(b"HTTP/1."):
            raise _BadAnswer
        status = int(rest[:3])
        if 100 <= status < 200 and status != 101:
            continue  # an interim answer: the final one follows
        break
    fields: dict[bytes, bytes] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(b":")
        if not sep:
            raise _BadAnswer
        fields[name.strip().lower()] = value.strip().lower()
    keep = version == b"HTTP/1.1" and b"close" not in fields.get(b"connection", b"")
    if status in (204, 304) or 100 <= status < 200:
        return status, b"", keep and status != 101
    if b"chunked" in fields.get(b"transfer-encoding", b""):
        body, whole = await _chunked(reader)
        return status, body, keep and whole
    length = fields.get(b"content-length")
    if length is None:  # delimited by the end of the connection
        return status, await reader.read(READ_LIMIT), False
    size = int(length)
    if size < 0:
        raise _BadAnswer
    body = await reader.readexactly(min(size, READ_LIMIT))
    return status, body, keep and size <= READ_LIMIT


async def _chunked(reader: asyncio.StreamReader) -> tuple[bytes, bool]:
    """A chunked body's first READ_LIMIT bytes, and whether it was read to its end."""
    parts: list[bytes] = []
    kept = 0
    while True:
        line = await reader.readuntil(b"\r\n")
        size = int(line.split(b";", 1)[0].strip(), 16)
        if size == 0:
            while (await reader.readuntil(b"\r\n")) != b"\r\n":  # trailers
                pass
            return b"".join(parts), True
        if kept + size > READ_LIMIT:
            parts.append(await reader.readexactly(READ_LIMIT - kept))
            return b"".join(parts), False
        parts.append(await reader.readexactly(size))
        kept += size
        await reader.readexactly(2)
