"""The worker's answers to what gunicorn refuses: codes, statuses, paths, and a real socket.

The process test (tests/process/test_http_edges.py) sends these refusals to a running gunicorn;
here each piece is held to what the API promises, including the fault of ours no client can
provoke on purpose.
"""

import json
import socket
from typing import Any

import pytest
from gunicorn.config import Config
from gunicorn.glogging import Logger
from gunicorn.http import errors as http
from gunicorn.http.message import Request
from gunicorn.http.unreader import IterUnreader
from gunicorn.workers import gthread

from orquestador import api_errors, errors
from orquestador import gunicorn as gunicorn_settings
from orquestador.gunicornworker import (
    HEAD_KEPT,
    SyncWorker,
    ThreadWorker,
    _HeadRecorder,
    answers_json,
    refusal_for,
    request_path,
    response_bytes,
)


def project_config() -> Config:
    cfg = Config()
    for name in ("limit_request_line", "limit_request_fields", "limit_request_field_size"):
        cfg.set(name, getattr(gunicorn_settings, name))
    return cfg


EXCEPTIONS = [
    http.LimitRequestLine(9000, 8190),
    http.LimitRequestHeaders("limit request headers fields"),
    http.InvalidRequestLine("x"),
    http.InvalidRequestMethod("get"),
    http.InvalidHTTPVersion((9, 9)),
    http.InvalidHeader("X-NUL"),
    http.InvalidHeader("CONTENT-LENGTH"),
    http.InvalidHeaderName("Bad Name"),
    http.ObsoleteFolding("X-A"),
    http.UnsupportedTransferCoding("br"),
    http.ExpectationFailed("coffee"),
    http.InvalidChunkSize(b"zz"),
    http.ChunkMissingTerminator(b"XX"),
    http.InvalidChunkExtension("bad"),
    http.InvalidProxyLine("x"),
    http.ForbiddenProxyRequest("10.0.0.1"),
    http.InvalidSchemeHeaders(),
    http.ConfigurationProblem("x"),
    http.InvalidResponseHeader("X"),
    RuntimeError("a fault of ours"),
    SystemExit(1),  # gunicorn's timeout abort
]


@pytest.mark.parametrize("exc", EXCEPTIONS, ids=lambda exc: type(exc).__name__)
def test_refusal__has_the_status_its_code_stands_for(exc):
    refusal = refusal_for(exc, project_config())
    assert refusal.status == api_errors.STATUS_BY_CODE[refusal.code]
    assert refusal.detail


@pytest.mark.parametrize(
    ("exc", "code", "detail"),
    [
        (http.LimitRequestLine(9000, 8190), errors.HEADERS_TOO_LARGE, "longer than 8190 bytes"),
        (http.LimitRequestHeaders("x"), errors.HEADERS_TOO_LARGE, "at most 100 fields of at most"),
        (http.InvalidResponseHeader("X"), errors.INTERNAL_ERROR, "internal error"),
        (http.ConfigurationProblem("x"), errors.INTERNAL_ERROR, "internal error"),
        (RuntimeError("boom"), errors.INTERNAL_ERROR, "internal error"),
        (http.InvalidRequestLine("GET /<script> HTTP/1.1"), errors.INVALID_BODY, "request line"),
    ],
)
def test_refusal__code_and_detail(exc, code, detail):
    refusal = refusal_for(exc, project_config())
    assert refusal.code == code and detail in refusal.detail
    assert "<script>" not in refusal.detail and "boom" not in refusal.detail


def test_refusal__says_the_limits_configured():
    cfg = Config()
    cfg.set("limit_request_fields", 20)
    cfg.set("limit_request_field_size", 1000)
    assert (
        "at most 20 fields of at most 1000 bytes"
        in refusal_for(http.LimitRequestHeaders("x"), cfg).detail
    )


@pytest.mark.parametrize(
    ("head", "path"),
    [
        (b"GET /api/v1/requests/x?q=1 HTTP/1.1\r\nHost: h\r\n\r\n", "/api/v1/requests/x"),
        (b"\r\nPOST /internal/worker/execute HTTP/1.1\r\n", "/internal/worker/execute"),
        (b"GET /api/v1/requests/" + b"a" * 2000, "/api/v1/requests/" + "a" * 2000),  # cut
        (b"GET http://h:80/api/v1/x#f HTTP/1.1\r\n", "/api/v1/x"),
        (b"GET /%61pi/v1/x HTTP/1.1\r\n", "/api/v1/x"),  # as Django will see it
        (b"GET /admin/ HTTP/1.1\r\n", "/admin/"),
        (b"\x16\x03\x01 hello\r\n", None),
        (b"GET", None),
        (b"", None),
        (b"OPTIONS * HTTP/1.1\r\n", None),
    ],
)
def test_request_path__from_the_first_bytes(head, path):
    assert request_path(None, ValueError(), head) == path


def _parsed(raw: bytes) -> Request:
    return Request(project_config(), IterUnreader([raw]), ("127.0.0.1", 5))


def test_request_path__prefers_the_parsed_request():
    parsed = _parsed(b"GET /api/v1/requests HTTP/1.1\r\nHost: h\r\n\r\n")
    assert request_path(parsed, ValueError(), b"GET /admin/ HTTP/1.1") == "/api/v1/requests"
    exc = http.InvalidHeader("CONTENT-LENGTH", req=parsed)
    assert request_path(None, exc, b"GET /admin/ HTTP/1.1") == "/api/v1/requests"


def test_request_path__never_takes_a_request_line_for_a_request():
    # gunicorn's InvalidRequestLine keeps the line itself as `req`.
    exc = http.InvalidRequestLine("GET /api/v1/\x00 HTTP/1.1")
    assert request_path(None, exc, b"GET /api/v1/\x00 HTTP/1.1\r\n") == "/api/v1/\x00"


@pytest.mark.parametrize(
    ("path", "expected"),
    [("/api/v1/x", True), ("/internal/x", True), (None, True), ("/admin/", False), ("/api", False)],
)
def test_answers_json(path, expected):
    assert answers_json(path) is expected


def test_head_recorder__keeps_only_the_start():
    left, right = socket.socketpair()
    with left, right:
        recorder = _HeadRecorder(left)
        right.sendall(b"x" * (HEAD_KEPT + 100))
        received = b""
        while len(received) < HEAD_KEPT + 100:
            received += recorder.recv(65536)
        assert recorder.head == b"x" * HEAD_KEPT
        assert recorder.fileno() == left.fileno()


def _answer(raw: bytes) -> tuple[str, dict[str, str], bytes]:
    head, _, body = raw.partition(b"\r\n\r\n")
    status, *lines = head.decode("ascii").split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines)
    assert int(headers["Content-Length"]) == len(body)
    return status, headers, body


def test_response_bytes__json_and_plain_text():
    refusal = refusal_for(http.LimitRequestLine(9000, 8190), project_config())
    status, headers, body = _answer(response_bytes(refusal, as_json=True))
    assert status == "HTTP/1.1 431 Request Header Fields Too Large"
    assert headers["Content-Type"] == "application/json" and headers["Connection"] == "close"
    assert json.loads(body) == {"code": "HEADERS_TOO_LARGE", "detail": refusal.detail}
    status, headers, body = _answer(response_bytes(refusal, as_json=False))
    assert headers["Content-Type"] == "text/plain; charset=utf-8"
    assert body.decode() == f"431 Request Header Fields Too Large: {refusal.detail}\n"


def _handled(exc: BaseException, head: bytes) -> bytes:
    """What the worker writes on a real socket for `exc`, after `head` was received."""
    left, right = socket.socketpair()
    with left, right:
        recorder = _HeadRecorder(left)
        right.sendall(head)
        recorder.recv(len(head))
        cfg = project_config()
        worker = SyncWorker(1, 0, [], None, 30, cfg, Logger(cfg))
        try:
            raise exc
        except BaseException as raised:  # as gunicorn's handle() calls it: inside its except
            worker.handle_error(None, recorder, ("127.0.0.1", 5), raised)
        finally:
            worker.tmp.close()  # the heartbeat file every gunicorn worker opens
        left.shutdown(socket.SHUT_WR)
        received = b""
        while piece := right.recv(65536):
            received += piece
        return received


def test_handle_error__a_fault_of_ours_under_api_is_json_500():
    status, _, body = _answer(
        _handled(RuntimeError("boom"), b"GET /api/v1/requests/x HTTP/1.1\r\n")
    )
    assert status == "HTTP/1.1 500 Internal Server Error"
    assert json.loads(body) == {
        "code": "INTERNAL_ERROR",
        "detail": "internal error; it has been logged",
    }


def test_handle_error__a_head_too_large_elsewhere_is_plain_text():
    status, headers, body = _answer(
        _handled(http.LimitRequestHeaders("x"), b"GET /admin/ HTTP/1.1\r\nX-Big: bbbb")
    )
    assert status == "HTTP/1.1 431 Request Header Fields Too Large"
    assert headers["Content-Type"] == "text/plain; charset=utf-8" and b"<" not in body


@pytest.mark.parametrize(
    "exc",
    [
        *EXCEPTIONS,
        http.InvalidHeader("CONTENT-LENGTH", req=_parsed(b"POST /api/v1/x HTTP/1.1\r\n\r\n")),
    ],
    ids=lambda exc: type(exc).__name__,
)
def test_handle_error__answers_every_exception_it_is_handed(exc):
    """A handle_error that raised would end the worker process: every one is answered."""
    status, headers, body = _answer(_handled(exc, b"GET /api/v1/x HTTP/1.1\r\n"))
    refusal = refusal_for(exc, project_config())
    assert status == f"HTTP/1.1 {refusal.status} {refusal.reason}"
    assert headers["Content-Type"] == "application/json"
    assert json.loads(body) == {"code": refusal.code, "detail": refusal.detail}


def _one_answer(sock: socket.socket) -> bytes:
    """One whole answer with a Content-Length, read off `sock` (within its timeout)."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(
        next(h for h in head.split(b"\r\n") if h.lower().startswith(b"content-length")).split(b":")[
            1
        ]
    )
    while len(body) < length:
        body += sock.recv(65536)
    return head + b"\r\n\r\n" + body


def _threaded(*heads: bytes) -> list[bytes]:
    """What the threaded worker answers on one connection to each head in turn, served as it
    serves a kept-alive connection: the same connection object, handled once per request."""
    left, right = socket.socketpair()
    right.settimeout(5)
    with left, right:
        cfg = project_config()
        worker = ThreadWorker(1, 0, [], None, 30, cfg, Logger(cfg))

        def application(environ: dict, start_response: Any) -> list[bytes]:
            start_response("200 OK", [("Content-Length", "2")])
            return [b"ok"]

        worker.wsgi = application
        answers = []
        try:
            conn = gthread.TConn(cfg, left, ("127.0.0.1", 5), ("127.0.0.1", 8000))
            for head in heads:
                right.sendall(head)
                conn.data_ready = True
                worker.handle(conn)
                answers.append(_one_answer(right))
        finally:
            worker.tmp.close()
        return answers


def test_thread_worker__a_head_too_large_under_api_is_json():
    (answer,) = _threaded(b"GET /api/v1/" + b"x" * 9000 + b" HTTP/1.1\r\n\r\n")
    status, headers, body = _answer(answer)
    assert status == "HTTP/1.1 431 Request Header Fields Too Large"
    assert headers["Content-Type"] == "application/json"
    assert json.loads(body)["code"] == "HEADERS_TOO_LARGE"


def test_thread_worker__each_request_of_a_kept_alive_connection_has_its_own_head():
    first, second = _threaded(
        b"GET /api/v1/requests HTTP/1.1\r\nHost: x\r\n\r\n",
        b"GET /admin/" + b"x" * 9000 + b" HTTP/1.1\r\n\r\n",
    )
    assert first.startswith(b"HTTP/1.1 200 OK")
    status, headers, _ = _answer(second)
    assert status == "HTTP/1.1 431 Request Header Fields Too Large"
    assert headers["Content-Type"] == "text/plain; charset=utf-8"  # the second one's path
