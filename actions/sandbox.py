"""The demo's provider: a small shop backend on loopback that can fail after applying a write
(`manage.py sandboxprovider`; its endpoints are in INTEGRATIONS.md#the-sandbox-provider, why it
fails on purpose in docs/adr/0010-a-sandbox-that-fails-on-purpose.md).

Reservations, releases and refunds deduplicate by `Idempotency-Key`; charges do not. Each write
draws once from a generator seeded with `seed`: applied then dropped unanswered (`after_apply`),
or dropped before anything is applied (`before_apply`); lookups and documents never fail. State
lives in memory; 127.0.0.1 only, bodies at most MAX_BODY_BYTES with a Content-Length, silent
sockets closed after IDLE_SECONDS, at most MAX_CONNECTIONS and MAX_RECORDS (then 429).
"""

import json
import random
import re
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote

from orquestador import strictjson

from .sandboxshop import PAYMENTS, WRITES, Refused, Shop, document_bytes, refuse_declined

HOST = "127.0.0.1"
DEFAULT_PORT = 9000
# Half the writes fail: a charge lost after applying settles itself through the lookup, one lost
# before applying waits for an operator (about one order in three).
DEFAULT_FAIL_AFTER_APPLY = 0.2
DEFAULT_FAIL_BEFORE_APPLY = 0.3
MAX_BODY_BYTES = 16 * 1024  # bytes
MAX_KEY_LENGTH = 300  # characters of an Idempotency-Key
IDLE_SECONDS = 10.0  # seconds a connection may stay silent
MAX_CONNECTIONS = 32  # connections served at once; more are closed at once
_DOCUMENT_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._~:-]{0,199}")


@dataclass(frozen=True)
class Faults:
    after_apply: float = DEFAULT_FAIL_AFTER_APPLY
    before_apply: float = DEFAULT_FAIL_BEFORE_APPLY


def faults_problem(faults: Faults) -> str | None:
    """Why these fractions cannot be used, or None."""
    for name, value in (
        ("--fail-after-apply", faults.after_apply),
        ("--fail-before-apply", faults.before_apply),
    ):
        if not 0 <= value <= 1:
            return f"{name}: must be a fraction between 0 and 1, got {value:g}"
    if faults.after_apply + faults.before_apply > 1:
        return "--fail-after-apply and --fail-before-apply: together at most 1"
    return None


# ------------------------------------------------------------------------------
# The server
# ------------------------------------------------------------------------------
class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, port: int, handler: type[BaseHTTPRequestHandler]) -> None:
        self.slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        super().__init__((HOST, port), handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self.slots.acquire(blocking=False):
            self.shutdown_request(request)  # busy: refuse rather than queue without bound
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that went away, or a socket timeout: nothing to report


def _shown(text: str, limit: int = 120) -> str:
    """A caller's text as one log line shows it: printable ASCII, cut to `limit` characters."""
    printable = "".join(ch if " " <= ch <= "~" else "?" for ch in text)
    return printable if len(printable) <= limit else printable[: limit - 1] + "…"


class SandboxProvider:
    """The sandbox on 127.0.0.1:`port` (0: a free one); `serve_forever()` until `close()`."""

    def __init__(
        self,
        *,
        port: int = DEFAULT_PORT,
        faults: Faults | None = None,
        seed: int | None = None,
        log: Callable[[str], None] | None = None,
    ) -> None:
        self.faults = faults or Faults()
        problem = faults_problem(self.faults)
        if problem:
            raise ValueError(problem)
        self._random = random.Random(seed)  # noqa: S311 (fault injection, not security)
        self._shop = Shop()
        self._log = log or (lambda line: None)
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            timeout = IDLE_SECONDS
            server_version = "orquestador-sandbox"
            sys_version = ""

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def version_string(self) -> str:
                return self.server_version

            def do_GET(self) -> None:
                owner._serve(self, write=False)

            def do_POST(self) -> None:
                owner._serve(self, write=True)

            def do_PUT(self) -> None:
                self.close_connection = True  # its body is not read
                owner._answer(self, 405, {"code": "METHOD_NOT_ALLOWED", "detail": "GET or POST"})

            do_PATCH = do_DELETE = do_PUT

            def send_error(
                self, code: int, message: str | None = None, explain: Any = None
            ) -> None:
                # What http.server refuses itself (a bad request line, too many headers): JSON too.
                self.close_connection = True
                detail = message or HTTPStatus(code).phrase
                owner._answer(self, code, {"code": "BAD_REQUEST", "detail": detail})

        self._server = _Server(port, Handler)
        self.port: int = self._server.server_address[1]

    def url(self, path: str = "") -> str:
        return f"http://{HOST}:{self.port}{path}"

    def serve_forever(self) -> None:
        self._server.serve_forever(poll_interval=0.2)

    def close(self) -> None:
        """Stop serving (from another thread than `serve_forever`'s) and free the port."""
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> "SandboxProvider":
        threading.Thread(target=self.serve_forever, daemon=True, name="sandbox").start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- requests -------------------------------------------------------------------------
    def _serve(self, handler: BaseHTTPRequestHandler, *, write: bool) -> None:
        path = handler.path.split("?", 1)[0]
        try:
            if write:
                self._write(handler, path.strip("/"))
            else:
                self._read(handler, path)
        except Refused as refused:
            if write:
                handler.close_connection = True  # a body left unread must not be read as a request
                key = _shown(handler.headers.get("Idempotency-Key", ""))
                self._log(
                    f"POST {_shown(path)} key={key}: refused {refused.status} {refused.code} "
                    f"({refused.detail})"
                )
            self._answer(handler, refused.status, {"code": refused.code, "detail": refused.detail})

    def _read(self, handler: BaseHTTPRequestHandler, path: str) -> None:
        collection, found, quoted = path.strip("/").partition("/by-key/")
        if found and collection in WRITES and quoted:
            self._authorized(handler, collection)
            self._answer(handler, *self._shop.lookup(collection, unquote(quoted)))
            return
        prefix, _, document_id = path.partition("/documents/")
        if prefix == "" and _DOCUMENT_ID.fullmatch(unquote(document_id)):
            content = document_bytes(unquote(document_id))
            self._send(handler, 200, content, "application/pdf")
            return
        raise Refused(404, "NOT_FOUND", "no such resource")

    def _write(self, handler: BaseHTTPRequestHandler, collection: str) -> None:
        kind = WRITES.get(collection)
        if kind is None:
            raise Refused(404, "NOT_FOUND", "no such resource")
        self._authorized(handler, collection)
        body = self._body(handler)
        key = handler.headers.get("Idempotency-Key", "")
        if not 1 <= len(key) <= MAX_KEY_LENGTH:
            raise Refused(400, "IDEMPOTENCY_KEY_REQUIRED", "Idempotency-Key: 1 to 300 characters")
        shown = _shown(key)
        refuse_declined(collection, body)
        with self._shop.lock:
            fault = self._fault()
            if fault == "before":
                self._log(
                    f"POST /{collection} key={shown}: dropped the connection, applied nothing"
                )
                self._drop(handler)
                return
            status, record = self._shop.apply(collection, key, body)
        made = record[kind.id_field]
        if fault == "after":
            self._log(
                f"POST /{collection} key={shown}: applied {made}, then dropped the connection"
            )
            self._drop(handler)
            return
        self._log(
            f"POST /{collection} key={shown}: {'sent again' if status == 200 else 'applied'} {made}"
        )
        self._answer(handler, status, record)

    def _fault(self) -> str | None:
        """One draw per write (under the state's lock, so a seed gives the same run again)."""
        draw = self._random.random()
        if draw < self.faults.after_apply:
            return "after"
        if draw < self.faults.after_apply + self.faults.before_apply:
            return "before"
        return None

    @staticmethod
    def _authorized(handler: BaseHTTPRequestHandler, collection: str) -> None:
        if collection in PAYMENTS and not handler.headers.get("Authorization"):
            raise Refused(401, "UNAUTHENTICATED", "payments want an Authorization header")

    def _body(self, handler: BaseHTTPRequestHandler) -> dict[str, Any]:
        if handler.headers.get("Transfer-Encoding"):
            raise Refused(411, "LENGTH_REQUIRED", "send the body with a Content-Length")
        try:
            length = int(handler.headers.get("Content-Length", ""))
        except ValueError:
            raise Refused(411, "LENGTH_REQUIRED", "send the body with a Content-Length") from None
        if not 0 <= length <= MAX_BODY_BYTES:
            raise Refused(
                413, "BODY_TOO_LARGE", f"the body may have at most {MAX_BODY_BYTES} bytes"
            )
        try:
            body = strictjson.loads(handler.rfile.read(length), max_bytes=MAX_BODY_BYTES)
        except strictjson.JSONRefused as exc:
            raise Refused(400, "INVALID_JSON", f"the body {exc.reason}") from None
        if not isinstance(body, dict):
            raise Refused(400, "INVALID_JSON", "the body must be a JSON object")
        return body

    # -- answers --------------------------------------------------------------------------
    def _answer(self, handler: BaseHTTPRequestHandler, status: int, body: dict[str, Any]) -> None:
        self._send(handler, status, json.dumps(body).encode(), "application/json")

    @staticmethod
    def _send(handler: BaseHTTPRequestHandler, status: int, body: bytes, media: str) -> None:
        handler.send_response(status)
        handler.send_header("Content-Type", media)
        handler.send_header("Content-Length", str(len(body)))
        if handler.close_connection:
            handler.send_header("Connection", "close")
        handler.end_headers()
        handler.wfile.write(body)

    @staticmethod
    def _drop(handler: BaseHTTPRequestHandler) -> None:
        """Close the connection with nothing answered: the caller cannot tell what happened."""
        handler.close_connection = True
        try:
            handler.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
