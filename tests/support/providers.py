"""Loopback doubles of the providers the trusted adapters talk to.

`JsonProvider` plays a JSON-over-HTTP provider. Writes (POST/PUT/PATCH to any path) are
deduplicated by `Idempotency-Key`, per path, the way a well-behaved provider does: the first
request with a key applies the effect and stores its response; later ones get the stored response
back and apply nothing. It counts every request (`calls`) and every applied effect (`effects`),
and serves the lookup by key: `GET <path>/by-key/<key>` answers 200 with the stored response when
that write was applied, 404 when not.

It can be told to misbehave, one request at a time (`plan(path, *replies)`, or
`plan("<path>/by-key/", ...)` for lookups; requests beyond the plan get `choose(received)`, by
default `ok()`, so a fault test can draw a seeded fault for every request): answer slowly,
drip the headers or the body byte by byte, drop the connection after reading the request body,
answer 429 or 503 with Retry-After (seconds or an HTTP-date), send an oversized, non-JSON or
non-object body, or any status.
A path named in `repeats` plays a provider that does NOT deduplicate: every applied request is a
new effect, even under a key it has seen, so `effects()` shows any write sent twice.
`DocumentStore` serves documents by id at `GET /documents/<id>`, with the same plans.

Both listen on 127.0.0.1 on a free port, serve from daemon threads, and on `close()` release any
response they are holding and stop. Use them as context managers.
"""

import email.utils
import json
import socket
import threading
import time
from collections import Counter, defaultdict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote

WRITE_METHODS = ("POST", "PUT", "PATCH")


# ------------------------------------------------------------------------------
# What to answer
# ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Reply:
    """How the double answers one request."""

    kind: str = "ok"  # ok | status | drop | raw
    status: int = 200
    body: bytes | None = None  # raw body (kind raw / status); None: the stored JSON output
    content_type: str = "application/json"
    headers: tuple[tuple[str, str], ...] = ()
    apply: bool = True  # whether a write takes effect (for ok, drop and status)
    delay: float = 0.0  # seconds held before the status line (released early by close)
    body_delay: float = 0.0  # seconds held after the first half of the body
    drip: float = 0.0  # seconds between single bytes of the body (0: send it at once)
    header_drip: float = 0.0  # seconds between single bytes of the status line and headers
    declare_length: bool = True  # False: no Content-Length, the body ends when the socket closes


def ok() -> Reply:
    return Reply()


def slow(seconds: float, *, apply: bool = True) -> Reply:
    """Answer normally, after holding the request for `seconds`."""
    return Reply(delay=seconds, apply=apply)


def slow_body(seconds: float, *, apply: bool = True) -> Reply:
    """Send the status and half the body at once, the rest after `seconds`."""
    return Reply(body_delay=seconds, apply=apply)


def drip(every: float, *, apply: bool = True) -> Reply:
    """Send the status at once, then the body one byte every `every` seconds."""
    return Reply(drip=every, apply=apply)


def drip_headers(every: float, *, apply: bool = True) -> Reply:
    """Send the status line and headers one byte every `every` seconds."""
    return Reply(header_drip=every, apply=apply)


def drop(*, apply: bool = True) -> Reply:
    """Read the whole request, (optionally) apply it, then close the connection unanswered."""
    return Reply(kind="drop", apply=apply)


def status(
    code: int,
    *,
    retry_after: str | int | None = None,
    apply: bool = False,
    body: bytes = b'{"error": "provider-secret-detail"}',
) -> Reply:
    headers = () if retry_after is None else (("Retry-After", str(retry_after)),)
    return Reply(kind="status", status=code, body=body, headers=headers, apply=apply)


def retry_after_date(seconds: int) -> str:
    """An HTTP-date `seconds` from now, for a Retry-After header."""
    when = datetime.now(UTC) + timedelta(seconds=seconds)
    return email.utils.format_datetime(when, usegmt=True)


def raw(
    body: bytes,
    *,
    code: int = 200,
    content_type: str = "application/json",
    declare_length: bool = True,
    apply: bool = True,
) -> Reply:
    return Reply(
        kind="raw",
        status=code,
        body=body,
        content_type=content_type,
        declare_length=declare_length,
        apply=apply,
    )


def oversized(size: int, *, declare_length: bool = True, apply: bool = True) -> Reply:
    """A 200 with a valid JSON object of at least `size` bytes."""
    pad = max(0, size - 12)
    return raw(b'{"pad": "' + b"x" * pad + b'"}', declare_length=declare_length, apply=apply)


def non_json(*, apply: bool = True) -> Reply:
    return raw(b"<html>provider-secret-detail</html>", content_type="text/html", apply=apply)


def non_object(*, apply: bool = True) -> Reply:
    return raw(b'["provider-secret-detail"]', apply=apply)


# ------------------------------------------------------------------------------
# The server
# ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Received:
    method: str
    path: str
    headers: dict[str, str]  # lower-cased names
    body: bytes
    client: tuple[str, int]  # the caller's address: one per connection
    at: float  # time.monotonic() when the request had been read

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Effect:
    path: str
    key: str | None
    request: Any
    response: dict[str, Any]
    at: datetime = field(default_factory=lambda: datetime.now(UTC))  # when it was applied


@dataclass
class _State:
    lock: threading.Condition = field(default_factory=threading.Condition)
    plans: dict[str, deque[Reply]] = field(default_factory=lambda: defaultdict(deque))
    received: list[Received] = field(default_factory=list)
    effects: list[Effect] = field(default_factory=list)
    by_key: dict[tuple[str, str], Effect] = field(default_factory=dict)
    # Requests in progress by path (read, not yet answered), and the most there ever were.
    current: Counter[str] = field(default_factory=Counter)
    most: Counter[str] = field(default_factory=Counter)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that gave up (timeout, dropped on purpose) is part of the tests, not an error.
        pass


class LoopbackServer:
    """An HTTP server on 127.0.0.1:<free port>, serving from daemon threads until closed."""

    def __init__(self, choose: Callable[["Received"], Reply] | None = None) -> None:
        self.state = _State()
        self._released = threading.Event()
        self._choose = choose or (lambda received: ok())
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                owner._dispatch(self)

            do_POST = do_PUT = do_PATCH = do_DELETE = do_GET

        self._server = _Server(("127.0.0.1", 0), Handler)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()

    # -- lifecycle ------------------------------------------------------------------------
    def __enter__(self) -> "LoopbackServer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._released.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def url(self, path: str = "") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    # -- plans and counters ---------------------------------------------------------------
    def plan(self, path: str, *replies: Reply) -> None:
        """Answer the next requests to `path` with `replies`, in order."""
        with self.state.lock:
            self.state.plans[path].extend(replies)

    def requests(self, path: str | None = None) -> list[Received]:
        with self.state.lock:
            return [r for r in self.state.received if path is None or r.path == path]

    def calls(self, path: str | None = None) -> int:
        return len(self.requests(path))

    def most_at_once(self, path: str) -> int:
        """The most requests to `path` in progress at once: read, their answer not begun."""
        with self.state.lock:
            return self.state.most[path]

    def wait_for_calls(self, count: int, path: str | None = None, timeout: float = 10.0) -> None:
        """Wait until at least `count` requests (to `path`) arrived; fail at the deadline."""
        deadline = time.monotonic() + timeout
        with self.state.lock:
            while len([r for r in self.state.received if path in (None, r.path)]) < count:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"expected {count} calls to {path or 'any path'}")
                self.state.lock.wait(left)

    # -- serving --------------------------------------------------------------------------
    def _dispatch(self, handler: BaseHTTPRequestHandler) -> None:
        length = int(handler.headers.get("Content-Length") or 0)
        body = handler.rfile.read(length) if length else b""
        path = handler.path.split("?", 1)[0]
        received = Received(
            method=handler.command,
            path=path,
            headers={k.lower(): v for k, v in handler.headers.items()},
            body=body,
            client=handler.client_address,
            at=time.monotonic(),
        )
        with self.state.lock:
            self.state.received.append(received)
            self.state.current[path] += 1
            self.state.most[path] = max(self.state.most[path], self.state.current[path])
            plan = self.state.plans.get(self._plan_key(path))
            reply = plan.popleft() if plan else None
            self.state.lock.notify_all()
        handler.in_progress = path  # type: ignore[attr-defined]
        try:
            if reply is None:
                reply = self._choose(received)
            self._answer(handler, received, reply)
        finally:
            self._answered(handler)

    def _answered(self, handler: BaseHTTPRequestHandler) -> None:
        """The request is no longer in progress: its answer begins (once per request; before a
        byte of it, so a caller that reads it cannot start another first)."""
        path = getattr(handler, "in_progress", None)
        if path is not None:
            handler.in_progress = None  # type: ignore[attr-defined]
            with self.state.lock:
                self.state.current[path] -= 1

    def _plan_key(self, path: str) -> str:
        return path

    def _answer(self, handler: BaseHTTPRequestHandler, received: Received, reply: Reply) -> None:
        raise NotImplementedError

    def _wait(self, seconds: float) -> None:
        if seconds > 0:
            self._released.wait(seconds)

    def _send(
        self,
        handler: BaseHTTPRequestHandler,
        reply: Reply,
        code: int,
        body: bytes,
        content_type: str,
    ) -> None:
        self._wait(reply.delay)
        self._answered(handler)
        handler.send_response(code)
        handler.send_header("Content-Type", content_type)
        for name, value in reply.headers:
            handler.send_header(name, value)
        if reply.declare_length:
            handler.send_header("Content-Length", str(len(body)))
        else:
            handler.send_header("Connection", "close")
            handler.close_connection = True
        if reply.header_drip > 0:
            handler.send_header("X-Padding", "p" * 200)
            head = b"".join(handler._headers_buffer) + b"\r\n"
            handler._headers_buffer = []
            for offset in range(len(head)):
                handler.wfile.write(head[offset : offset + 1])
                handler.wfile.flush()
                if self._released.wait(reply.header_drip):
                    return
        else:
            handler.end_headers()
        if reply.drip > 0:
            for offset in range(len(body)):
                handler.wfile.write(body[offset : offset + 1])
                handler.wfile.flush()
                if self._released.wait(reply.drip):
                    return
        elif reply.body_delay > 0:
            half = len(body) // 2
            handler.wfile.write(body[:half])
            handler.wfile.flush()
            self._wait(reply.body_delay)
            handler.wfile.write(body[half:])
        else:
            handler.wfile.write(body)
        handler.wfile.flush()

    def _drop(self, handler: BaseHTTPRequestHandler) -> None:
        self._answered(handler)
        handler.close_connection = True
        try:
            handler.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


class JsonProvider(LoopbackServer):
    """A JSON provider that deduplicates writes by Idempotency-Key and counts what it applies."""

    def __init__(
        self,
        respond: Callable[[str, Any, int], dict[str, Any]] | None = None,
        *,
        choose: Callable[[Received], Reply] | None = None,
        repeats: tuple[str, ...] = (),
    ) -> None:
        # respond(path, request JSON, effect number) -> the output stored for that write.
        self._respond = respond or (lambda path, request, n: {"id": f"op-{n}", "status": "done"})
        self._repeats = repeats
        super().__init__(choose)

    def _plan_key(self, path: str) -> str:
        # Lookups are planned per write path: plan("/charges/by-key/", status(500)).
        prefix, found, _ = path.partition("/by-key/")
        return prefix + "/by-key/" if found else path

    def effects(self, path: str | None = None) -> list[Effect]:
        with self.state.lock:
            return [e for e in self.state.effects if path is None or e.path == path]

    def _answer(self, handler: BaseHTTPRequestHandler, received: Received, reply: Reply) -> None:
        if received.method == "GET" and "/by-key/" in received.path:
            self._lookup(handler, received, reply)
            return
        if received.method not in WRITE_METHODS:
            self._send(handler, reply, 405, b'{"error": "method"}', "application/json")
            return
        effect = self._apply(received) if reply.apply else self._stored(received)
        if reply.kind == "drop":
            self._drop(handler)
        elif reply.kind in ("status", "raw"):
            self._send(handler, reply, reply.status, reply.body or b"", reply.content_type)
        elif effect is None:  # ok without apply: answer as if nothing was stored
            self._send(handler, reply, 200, b"{}", "application/json")
        else:
            body = json.dumps(effect.response).encode()
            self._send(handler, reply, 200, body, "application/json")

    def _stored(self, received: Received) -> Effect | None:
        key = received.headers.get("idempotency-key")
        with self.state.lock:
            return self.state.by_key.get((received.path, key)) if key else None

    def _apply(self, received: Received) -> Effect:
        key = received.headers.get("idempotency-key")
        try:
            request = received.json() if received.body else None
        except ValueError:
            request = None
        with self.state.lock:
            stored = self.state.by_key.get((received.path, key)) if key else None
            if stored is not None and received.path not in self._repeats:
                return stored
            number = len(self.state.effects) + 1
            effect = Effect(
                received.path, key, request, self._respond(received.path, request, number)
            )
            self.state.effects.append(effect)
            if key and stored is None:
                self.state.by_key[(received.path, key)] = effect
            self.state.lock.notify_all()
            return effect

    def _lookup(self, handler: BaseHTTPRequestHandler, received: Received, reply: Reply) -> None:
        if reply.kind != "ok":
            self._send(handler, reply, reply.status, reply.body or b"", reply.content_type)
            return
        path, _, quoted = received.path.partition("/by-key/")
        with self.state.lock:
            effect = self.state.by_key.get((path, unquote(quoted)))
        if effect is None:
            self._send(handler, reply, 404, b'{"error": "not found"}', "application/json")
        else:
            self._send(
                handler, reply, 200, json.dumps(effect.response).encode(), "application/json"
            )


class DocumentStore(LoopbackServer):
    """Serves documents by id at GET /documents/<id>."""

    PREFIX = "/documents/"

    def __init__(self) -> None:
        self._documents: dict[str, tuple[bytes, str]] = {}
        super().__init__()

    def put(self, document_id: str, content: bytes, media_type: str = "application/pdf") -> None:
        with self.state.lock:
            self._documents[document_id] = (content, media_type)

    def _answer(self, handler: BaseHTTPRequestHandler, received: Received, reply: Reply) -> None:
        if received.method != "GET" or not received.path.startswith(self.PREFIX):
            self._send(handler, reply, 404, b"", "text/plain")
            return
        if reply.kind == "drop":
            self._drop(handler)
            return
        if reply.kind in ("status", "raw"):
            self._send(handler, reply, reply.status, reply.body or b"", reply.content_type)
            return
        document_id = unquote(received.path[len(self.PREFIX) :])
        with self.state.lock:
            found = self._documents.get(document_id)
        if found is None:
            self._send(handler, reply, 404, b"", "text/plain")
        else:
            self._send(handler, reply, 200, found[0], found[1])
