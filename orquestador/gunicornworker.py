"""gunicorn's workers (sync, and threaded: gthread), answering what gunicorn refuses itself as
the application would (docs/adr/0013-refusals-before-the-application.md): a request line or
headers over its limits or malformed, framing it cannot trust, a body declared over the limit by
a client waiting for `100 Continue` (which gunicorn would send before the application could
refuse), a fault of ours let through. JSON `{"code", "detail"}` under errors.JSON_PREFIXES, plain
text elsewhere, with the code's status; the path from the parsed request or, when parsing failed
first, the connection's first bytes. Nothing of Django is imported: gunicorn loads this first.
"""

import json
import time
from datetime import timedelta
from ssl import SSLError
from typing import Any, NamedTuple
from urllib.parse import unquote, urlsplit

from gunicorn import util
from gunicorn.http import errors as http
from gunicorn.http.message import (
    DEFAULT_MAX_HEADERFIELD_SIZE,
    MAX_HEADERS,
    MAX_REQUEST_LINE,
    Message,
)
from gunicorn.http.wsgi import Response, default_environ
from gunicorn.workers import gthread, sync

from . import errors
from .bodies import MAX_BODY_BYTES

HEAD_KEPT = 1024  # bytes of a connection's start kept to find the request's path

# Raised by gunicorn for something of ours (the application's response, the configuration).
_FAULTS = (http.InvalidResponseHeader, http.InvalidResponseHeaderName, http.ConfigurationProblem)
_CHUNKS = (http.InvalidChunkSize, http.ChunkMissingTerminator, http.InvalidChunkExtension)
_REQUEST_LINE = (http.InvalidRequestLine, http.InvalidRequestMethod, http.InvalidHTTPVersion)
_FIELDS = (http.InvalidHeader, http.InvalidHeaderName, http.ObsoleteFolding)
_FRAMING = ("CONTENT-LENGTH", "TRANSFER-ENCODING")


class DeclaredTooLarge(http.ParseException):
    """A body declared over MAX_BODY_BYTES, its sender waiting for `100 Continue`."""

    def __str__(self) -> str:
        return f"Content-Length over {MAX_BODY_BYTES} with Expect: 100-continue"


def refuse_before_continue(req: Any) -> None:
    """Raise DeclaredTooLarge for a request that waits for `100 Continue` (gunicorn sends it
    before the application runs) with a Content-Length over the limit: refused unread."""
    if not getattr(req, "_expected_100_continue", False):
        return
    for name, value in req.headers:
        if name == "CONTENT-LENGTH":
            declared = value.strip()
            if not (declared.isascii() and declared.isdigit()):
                return  # gunicorn refuses it itself
            if len(declared) > len(str(MAX_BODY_BYTES)) or int(declared) > MAX_BODY_BYTES:
                raise DeclaredTooLarge()


class Refusal(NamedTuple):
    status: int
    reason: str
    code: str
    detail: str


def refusal_for(exc: BaseException, cfg: Any) -> Refusal:
    """What to answer for an exception gunicorn hands its worker's handle_error."""
    if isinstance(exc, _FAULTS) or not isinstance(exc, http.ParseException | SSLError):
        return Refusal(
            500,
            "Internal Server Error",
            errors.INTERNAL_ERROR,
            "internal error; it has been logged",
        )
    if isinstance(exc, http.LimitRequestLine):
        return _too_large(f"the request line is longer than {_line_limit(cfg)} bytes")
    if isinstance(exc, http.LimitRequestHeaders):
        fields, size = _field_limits(cfg)
        return _too_large(
            f"the header fields are over the limits: at most {fields} fields of at most "
            f"{size} bytes each"
        )
    if isinstance(exc, DeclaredTooLarge):  # as the application answers a body over the limit
        return Refusal(
            400,
            "Bad Request",
            errors.INVALID_BODY,
            f"the body is larger than {MAX_BODY_BYTES} bytes",
        )
    if isinstance(exc, http.ForbiddenProxyRequest):
        return Refusal(403, "Forbidden", errors.FORBIDDEN, "forbidden")
    return Refusal(400, "Bad Request", errors.INVALID_BODY, _malformed(exc))


def _too_large(detail: str) -> Refusal:
    return Refusal(431, "Request Header Fields Too Large", errors.HEADERS_TOO_LARGE, detail)


def _malformed(exc: BaseException) -> str:
    # Fixed sentences: gunicorn's own messages quote what the caller sent.
    if isinstance(exc, _REQUEST_LINE):
        return "the request line is malformed (its method, target or HTTP version)"
    if isinstance(exc, http.InvalidHeader) and getattr(exc, "hdr", None) in _FRAMING:
        return (
            "the Content-Length or Transfer-Encoding header is malformed, repeated, or sent "
            "with the other"
        )
    if isinstance(exc, http.UnsupportedTransferCoding):
        return "the Transfer-Encoding is not supported; send the body chunked, or with a length"
    if isinstance(exc, _FIELDS):
        return "a header field is malformed"
    if isinstance(exc, http.ExpectationFailed):
        return "the Expect header can only ask for 100-continue"
    if isinstance(exc, _CHUNKS):
        return "the body's chunked encoding is malformed"
    return "the request is malformed"


def _line_limit(cfg: Any) -> int:
    # As gunicorn.http.message.Request reads its setting (it never raises with 0, unlimited).
    line = int(cfg.limit_request_line)
    return MAX_REQUEST_LINE if line < 0 or line > MAX_REQUEST_LINE else line


def _field_limits(cfg: Any) -> tuple[int, int]:
    # As gunicorn.http.message.Message reads its settings.
    fields = int(cfg.limit_request_fields)
    size = int(cfg.limit_request_field_size)
    return (
        MAX_HEADERS if fields <= 0 or fields > MAX_HEADERS else fields,
        DEFAULT_MAX_HEADERFIELD_SIZE if size <= 0 else size,
    )


def parsed_request(req: Any, exc: BaseException) -> Message | None:
    """The request gunicorn parsed, if it got that far: handed over, or held by the exception."""
    # InvalidHeader holds the request it was raised for; InvalidRequestLine's `req` is the line.
    found = req if req is not None else getattr(exc, "req", None)
    return found if isinstance(found, Message) else None


def request_path(req: Any, exc: BaseException, head: bytes) -> str | None:
    """The request's path, percent-decoded; None when nothing received names one."""
    raw = getattr(parsed_request(req, exc), "path", None)
    if raw is None:
        raw = _target_path(head)
    return None if raw is None else unquote(raw, encoding="latin-1")


def _target_path(head: bytes) -> str | None:
    """The path of the request line that `head` starts (it may be cut anywhere)."""
    line = head[2:] if head.startswith(b"\r\n") else head  # one empty line may come first
    parts = line.split(b"\r\n", 1)[0].split(b" ", 2)
    if len(parts) < 2:
        return None
    target = parts[1].decode("latin-1")
    if target.startswith("/"):
        return target.split("?", 1)[0].split("#", 1)[0]
    if "://" in target:  # absolute form
        try:
            return urlsplit(target).path
        except ValueError:
            return None
    return None


def answers_json(path: str | None) -> bool:
    """JSON under the API's paths, and when no path could be read (most likely an API client)."""
    return path is None or path.startswith(errors.JSON_PREFIXES)


def response_bytes(refusal: Refusal, *, as_json: bool) -> bytes:
    if as_json:
        body = json.dumps({"code": refusal.code, "detail": refusal.detail}).encode()
        content_type = "application/json"
    else:
        body = f"{refusal.status} {refusal.reason}: {refusal.detail}\n".encode()
        content_type = "text/plain; charset=utf-8"
    head = (
        f"HTTP/1.1 {refusal.status} {refusal.reason}\r\n"
        "Connection: close\r\n"
        f"Content-Type: {content_type}\r\n"
        f"Content-Length: {len(body)}\r\n"
        "X-Content-Type-Options: nosniff\r\n"
        "\r\n"
    )
    return head.encode("ascii") + body


class _HeadRecorder:
    """A client socket keeping the first HEAD_KEPT bytes it receives; all else is the socket's."""

    def __init__(self, sock: Any) -> None:
        self._sock = sock
        self.head = b""

    def recv(self, size: int, *flags: int) -> bytes:
        data: bytes = self._sock.recv(size, *flags)
        if len(self.head) < HEAD_KEPT:
            self.head += data[: HEAD_KEPT - len(self.head)]
        return data

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)


class JsonRefusals:
    """What both workers share: `handle_error` (see the module docstring)."""

    cfg: Any
    log: Any

    def handle_error(self, req: Any, client: Any, addr: Any, exc: BaseException) -> None:
        started = time.monotonic()
        addr = addr or ("", -1)  # a unix socket
        refusal = refusal_for(exc, self.cfg)
        path = request_path(req, exc, getattr(client, "head", b""))
        if refusal.code == errors.INTERNAL_ERROR:
            self.log.exception("Error handling request %s", path or "(no path read)")
        else:
            self.log.warning("Invalid request from ip=%s: %s", addr[0], exc)
        req = parsed_request(req, exc)
        if req is not None:  # the access log, as gunicorn's own handle_error writes it
            environ = default_environ(req, client, self.cfg)
            environ["REMOTE_ADDR"], environ["REMOTE_PORT"] = addr[0], str(addr[1])
            response = Response(req, client, self.cfg)
            response.status = f"{refusal.status} {refusal.reason}"
            self.log.access(response, req, environ, timedelta(seconds=time.monotonic() - started))
        try:
            util.write_nonblock(client, response_bytes(refusal, as_json=answers_json(path)))
        except Exception:  # the client is gone: nothing left to tell it
            self.log.debug("Failed to send error message.")


class SyncWorker(JsonRefusals, sync.SyncWorker):
    """gunicorn's sync worker; only its error answers differ (see the module docstring)."""

    def handle(self, listener: Any, client: Any, addr: Any) -> None:
        if self.cfg.is_ssl:  # the TLS wrap needs the socket itself; no path is read then
            super().handle(listener, client, addr)
            return
        super().handle(listener, _HeadRecorder(client), addr)

    def handle_request(self, listener: Any, req: Any, client: Any, addr: Any) -> Any:
        refuse_before_continue(req)
        return super().handle_request(listener, req, client, addr)


class ThreadWorker(JsonRefusals, gthread.ThreadWorker):
    """gunicorn's threaded worker (keep-alive connections, a pool of threads per process); only
    its error answers differ. A kept-alive connection records each request's head anew."""

    def handle(self, conn: Any) -> Any:
        if not self.cfg.is_ssl:  # as SyncWorker: the TLS wrap needs the socket itself
            if isinstance(conn.sock, _HeadRecorder):
                conn.sock.head = b""
            else:
                conn.sock = _HeadRecorder(conn.sock)
        return super().handle(conn)

    def handle_request(self, req: Any, conn: Any) -> Any:
        refuse_before_continue(req)
        return super().handle_request(req, conn)
