"""The edges of HTTP, against gunicorn as scripts/start runs it (orquestador/gunicorn.py) on
127.0.0.1, spoken to over raw sockets.

Chunked bodies are read like any other, under the same size and depth limits, and one without
end is refused once over the limit, never read to its end. Every refusal under /api/ is JSON
`{"code", "detail"}` with the status its code stands for, whoever makes it: gunicorn (a head over
its limits, malformed request lines, headers and chunks), the body middleware, or Django (404,
405, a foreign or malformed Host, broken percent-encoding, NUL in the path or the query).
Outside the API, gunicorn's refusals are plain text, never HTML either. A body declared over the
limit is refused before any `100 Continue`, and one shorter than its Content-Length is refused,
not parsed. nginx in front (deploy/proxy, as scripts/start runs it) holds the same limits and
answers its own refusals in the same format.
"""

import contextlib
import copy
import http.server
import json
import os
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from django.conf import settings

from executions.flows.publication import flow_publish
from orquestador.bodies import MAX_BODY_BYTES
from tests.conftest import _dsn, runtime_settings
from tests.integration.api.conftest import FLOW
from tests.support import tokens
from tests.support.web import gunicorn_process, proxy_process

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.process]

IO_TIMEOUT = 30.0  # seconds any one socket operation may take
ENDLESS_CAP = 256 * 1024 * 1024  # bytes an endless body's sender gives up at
AUTH = f"Authorization: Bearer {tokens.token(exp_in=3600)}"
JSON_TYPE = "Content-Type: application/json"
CHUNKED = "Transfer-Encoding: chunked"
OVER_HEAD = "the header fields are over the limits: at most 100 fields of at most 8190 bytes each"
OVER_LINE = "the request line is longer than 8190 bytes"


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        assert self.headers.get("content-type") == "application/json", self
        try:
            return json.loads(self.body)
        except ValueError:
            raise AssertionError(f"not JSON: {self}") from None


@pytest.fixture(scope="module")
def server(django_db_setup, tmp_path_factory) -> Iterator[int]:
    """gunicorn for the whole module (the database is emptied after each test, not the server);
    yields its port. Its log must hold no traceback of a fault when it stops."""
    env = {  # as tests/conftest.py's process_env, once for the module
        **os.environ,
        "DATABASE_URL": _dsn(runtime_settings()),
        "MIGRATION_DATABASE_URL": _dsn(settings.DATABASES["default"]),
        "DJANGO_SETTINGS_MODULE": "orquestador.settings",
        "PYTHONUNBUFFERED": "1",
    }
    log_path = tmp_path_factory.mktemp("gunicorn") / "gunicorn.log"
    with gunicorn_process(env, log_path) as base:
        yield int(base.rsplit(":", 1)[1])
    # Django logs each foreign Host with its traceback (django.security, at ERROR): expected.
    faults = [
        line
        for line in log_path.read_text().splitlines()
        if "Traceback" in line and '"logger":"django.security.DisallowedHost"' not in line
    ]
    assert not faults, faults


@pytest.fixture(scope="module")
def proxy(server, tmp_path_factory) -> Iterator[int]:
    """nginx in front of the module's gunicorn, from the one template; yields its port."""
    run_dir = tmp_path_factory.mktemp("proxy")
    with proxy_process(
        f"http://127.0.0.1:{server}", run_dir / "run", run_dir / "proxy.log"
    ) as base:
        yield int(base.rsplit(":", 1)[1])


@pytest.fixture(params=["gunicorn", "nginx"])
def front(request) -> int:
    """The port of gunicorn, or of nginx in front of it: each test run against both."""
    return request.getfixturevalue("server" if request.param == "gunicorn" else "proxy")


@pytest.fixture
def flow() -> None:
    flow_publish(definition=copy.deepcopy(FLOW))


def head(method: str, target: str, *fields: str, version: str = "HTTP/1.1") -> bytes:
    # Connection: close, so an answer ends with the connection (read_answer reads to the end)
    # rather than when a kept-alive connection times out.
    lines = [f"{method} {target} {version}", "Host: 127.0.0.1", "Connection: close", *fields]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def chunked(body: bytes, size: int, *, last: bytes = b"0\r\n\r\n") -> bytes:
    pieces = [body[i : i + size] for i in range(0, len(body), size)]
    return b"".join(b"%x\r\n%s\r\n" % (len(piece), piece) for piece in pieces) + last


def read_answer(sock: socket.socket) -> Answer:
    """Everything the server sends until it closes; its one final answer."""
    data = b""
    with contextlib.suppress(ConnectionResetError):
        while piece := sock.recv(65536):
            data += piece
    return parse_answer(data)


def parse_answer(data: bytes) -> Answer:
    while data.startswith(b"HTTP/1.1 100 "):  # an interim 100 Continue
        data = data.split(b"\r\n\r\n", 1)[1]
    assert data, "the server closed the connection without an answer"
    raw_head, _, body = data.partition(b"\r\n\r\n")
    status_line, *lines = raw_head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines:
        name, value = line.split(":", 1)
        headers[name.strip().lower()] = value.strip()
    if headers.get("transfer-encoding") == "chunked":
        body = dechunked(body)
    elif "content-length" in headers:
        assert len(body) == int(headers["content-length"]), (status_line, headers, body[:200])
    return Answer(int(status_line.split(" ")[1]), headers, body)


def dechunked(body: bytes) -> bytes:
    data = b""
    while True:
        size_line, _, body = body.partition(b"\r\n")
        size = int(size_line.split(b";")[0], 16)
        if size == 0:
            return data
        data, body = data + body[:size], body[size + 2 :]


def exchange(port: int, request: bytes, *, half_close: bool = False) -> Answer:
    return parse_answer(exchange_raw(port, request, half_close=half_close))


def exchange_raw(port: int, request: bytes, *, half_close: bool = False) -> bytes:
    """Every byte the server sends until it closes or its final answer is complete (nginx holds
    a refused connection open a while to read what the client still sends), interim answers
    included."""
    data = b""
    with socket.create_connection(("127.0.0.1", port), timeout=IO_TIMEOUT) as sock:
        # A server that refuses early may close before all is sent; its answer is still read.
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            sock.sendall(request)
            if half_close:
                sock.shutdown(socket.SHUT_WR)
        with contextlib.suppress(ConnectionResetError):
            while not answered(data) and (piece := sock.recv(65536)):
                data += piece
    return data


def answered(data: bytes) -> bool:
    """Whether `data` holds a final answer with all of its Content-Length."""
    while data.startswith(b"HTTP/1.1 100 ") and b"\r\n\r\n" in data:
        data = data.split(b"\r\n\r\n", 1)[1]
    raw_head, found, body = data.partition(b"\r\n\r\n")
    if not found or data.startswith(b"HTTP/1.1 100 "):
        return False
    for line in raw_head.decode("latin-1").split("\r\n")[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length":
            return len(body) >= int(value)
    return False


def assert_refusal(answer: Answer, status: int, code: str, *fragments: str) -> dict:
    assert answer.status == status, answer
    body = answer.json()
    assert set(body) == {"code", "detail"}, body
    assert body["code"] == code, body
    assert isinstance(body["detail"], str) and body["detail"], body
    for fragment in fragments:
        assert fragment in body["detail"], body
    return body


def create(body_bytes: bytes, *fields: str) -> bytes:
    return head("POST", "/api/v1/requests", AUTH, JSON_TYPE, *fields) + body_bytes


def padded(size: int) -> bytes:
    """A valid body of exactly `size` bytes: a request, then spaces."""
    body = json.dumps({"flowKey": "claims", "data": {"applicant": "Ada"}}).encode()
    return body + b" " * (size - len(body))


def framed(body: bytes, framing: str) -> tuple[str, bytes]:
    if framing == "chunked":
        return CHUNKED, chunked(body, 64 * 1024)
    return f"Content-Length: {len(body)}", body


# -- chunked bodies ------------------------------------------------------------------------------


@pytest.mark.parametrize("size", [1, 7, 4096, 1 << 20])
def test_chunked_body__is_read_like_any_other(server, flow, size):
    data = {"applicant": "Ada", "notes": "é" * 1000}
    body = json.dumps({"flowKey": "claims", "data": data}).encode()
    answer = exchange(server, create(chunked(body, size), CHUNKED))
    assert answer.status == 201, answer
    created = answer.json()
    assert created["data"] == data
    again = exchange(server, head("GET", f"/api/v1/requests/{created['id']}", AUTH))
    assert again.status == 200 and again.json()["data"] == data


def test_chunked_body__after_100_continue_with_extensions_and_trailers(server, flow):
    """As curl sends a body of unknown length: Expect first, the chunks once told to go on."""
    body = json.dumps({"flowKey": "claims", "data": {"applicant": "Ada"}}).encode()
    with socket.create_connection(("127.0.0.1", server), timeout=IO_TIMEOUT) as sock:
        sock.sendall(create(b"", CHUNKED, "Expect: 100-continue"))
        interim = b""
        while b"\r\n\r\n" not in interim:
            interim += sock.recv(1)
        assert interim == b"HTTP/1.1 100 Continue\r\n\r\n"
        half = len(body) // 2
        sock.sendall(
            b"%x;part=one\r\n%s\r\n" % (half, body[:half])
            + b'%x ; part="two"\r\n%s\r\n' % (len(body) - half, body[half:])
            + b"0\r\nX-Checksum: none\r\n\r\n"
        )
        answer = read_answer(sock)
    assert answer.status == 201, answer
    assert answer.json()["data"] == {"applicant": "Ada"}


@pytest.mark.parametrize("framing", ["chunked", "length"])
def test_body_of_the_limit__is_taken_chunked_or_not(front, flow, framing):
    field, body = framed(padded(MAX_BODY_BYTES), framing)
    answer = exchange(front, create(body, field))
    assert answer.status == 201, answer


@pytest.mark.parametrize("framing", ["chunked", "length"])
def test_body_over_the_limit__is_refused_alike_chunked_or_not(front, flow, framing):
    field, body = framed(padded(MAX_BODY_BYTES + 1), framing)
    answer = exchange(front, create(body, field))
    assert_refusal(answer, 400, "INVALID_BODY", f"the body is larger than {MAX_BODY_BYTES} bytes")


@pytest.mark.parametrize("path", ["/api/v1/requests", "/internal/worker/execute"])
def test_body_declared_over_the_limit__is_refused_before_100_continue(front, path):
    """A client waiting to be told to go on is refused at once: no `100 Continue` first."""
    request = head("POST", path, AUTH, JSON_TYPE, "Content-Length: 5000000", "Expect: 100-continue")
    data = exchange_raw(front, request)  # the head alone: the client waits
    assert data.startswith(b"HTTP/1.1 400 "), data[:300]
    assert_refusal(
        parse_answer(data), 400, "INVALID_BODY", f"the body is larger than {MAX_BODY_BYTES} bytes"
    )


def test_body_declared_within_the_limit__still_gets_100_continue(front, flow):
    body = json.dumps({"flowKey": "claims", "data": {"applicant": "Ada"}}).encode()
    request = create(b"", f"Content-Length: {len(body)}", "Expect: 100-continue")
    with socket.create_connection(("127.0.0.1", front), timeout=IO_TIMEOUT) as sock:
        sock.sendall(request)
        interim = b""
        while b"\r\n\r\n" not in interim:
            interim += sock.recv(1)
        assert interim == b"HTTP/1.1 100 Continue\r\n\r\n"
        sock.sendall(body)
        answer = read_answer(sock)
    assert answer.status == 201, answer


def test_body_shorter_than_its_length__is_refused_not_parsed(server, flow):
    """gunicorn hands on what came before the client ended its side; the application refuses it
    rather than parse a complete-looking prefix."""
    body = json.dumps({"flowKey": "claims", "data": {"applicant": "Ada"}}).encode()
    declared = len(body) + 10
    answer = exchange(server, create(body, f"Content-Length: {declared}"), half_close=True)
    assert_refusal(
        answer,
        400,
        "INVALID_BODY",
        f"the body ended after {len(body)} of the {declared} bytes its Content-Length declares",
    )
    assert exchange(server, head("GET", "/api/v1/requests", AUTH)).json()["results"] == []


def test_body_shorter_than_its_length__never_reaches_the_application_behind_nginx(proxy, flow):
    """nginx passes on only a whole body: one cut short is closed without an answer (nginx
    answers no client that has ended its side)."""
    body = json.dumps({"flowKey": "claims", "data": {"applicant": "Ada"}}).encode()
    request = create(body, f"Content-Length: {len(body) + 10}")
    assert exchange_raw(proxy, request, half_close=True) == b""
    assert exchange(proxy, head("GET", "/api/v1/requests", AUTH)).json()["results"] == []


@pytest.mark.parametrize("framing", ["chunked", "length"])
def test_body_too_deep__is_refused_alike_chunked_or_not(server, flow, framing):
    deep = b'{"flowKey": "claims", "data": {"applicant": ' + b"[" * 100 + b"]" * 100 + b"}}"
    field, body = framed(deep, framing)
    answer = exchange(server, create(body, field))
    assert_refusal(answer, 400, "INVALID_BODY", "nests more than 100 levels deep")


def test_chunked_body_without_end__is_refused_once_over_the_limit(server, flow):
    """Chunks sent for ever: the answer comes once the limit is passed, and the sender is held
    back by the socket's buffers from then on (nothing reads further)."""
    piece = b"%x\r\n%s\r\n" % (64 * 1024, b" " * 64 * 1024)
    sent = 0
    with socket.create_connection(("127.0.0.1", server), timeout=IO_TIMEOUT) as sock:
        sock.sendall(create(b"", CHUNKED))

        def pump() -> None:
            nonlocal sent
            with contextlib.suppress(OSError):
                while sent < ENDLESS_CAP:
                    sock.sendall(piece)
                    sent += len(piece)

        sender = threading.Thread(target=pump, daemon=True)
        sender.start()
        answer = read_answer(sock)
        sent_by_then = sent
        sender.join(timeout=IO_TIMEOUT)
    assert not sender.is_alive()
    assert_refusal(answer, 400, "INVALID_BODY", f"the body is larger than {MAX_BODY_BYTES} bytes")
    assert sent_by_then < ENDLESS_CAP // 4, sent_by_then


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        (b"zz\r\n{}\r\n0\r\n\r\n", "the body's chunked encoding is malformed"),  # size not hex
        (b"2\r\n{}XX0\r\n\r\n", "the body's chunked encoding is malformed"),  # no CRLF after data
        (b"2;=x\r\n{}\r\n0\r\n\r\n", "the body's chunked encoding is malformed"),  # bad extension
        (b"1" * 9000, "the body's chunked encoding is malformed"),  # a size line without end
        (b"5\r\nab", "the body ended before its last chunk"),  # cut inside a chunk
        (b"2\r\n{}\r\n", "the body ended before its last chunk"),  # no last chunk
        (b"0\r\n", "the body"),  # a last chunk without the empty line after it
    ],
)
def test_malformed_chunks__are_json_400(server, body, fragment):
    answer = exchange(server, create(body, CHUNKED), half_close=True)
    assert_refusal(answer, 400, "INVALID_BODY", fragment)


@pytest.mark.parametrize(
    ("fields", "version", "fragment"),
    [
        (["Transfer-Encoding: gzip, chunked"], "HTTP/1.1", "other than chunked alone"),
        (["Transfer-Encoding: br"], "HTTP/1.1", "the Transfer-Encoding is not supported"),
        (["Transfer-Encoding: chunked, chunked"], "HTTP/1.1", "Transfer-Encoding header"),
        ([CHUNKED, "Content-Length: 2"], "HTTP/1.1", "Transfer-Encoding header"),
        ([CHUNKED], "HTTP/1.0", "Transfer-Encoding header"),
        (["Content-Length: 2x"], "HTTP/1.1", "Content-Length"),
        (["Content-Length: 2", "Content-Length: 2"], "HTTP/1.1", "Content-Length"),
    ],
)
def test_framing_that_cannot_be_trusted__is_json_400(server, fields, version, fragment):
    request = head("POST", "/api/v1/requests", AUTH, JSON_TYPE, *fields, version=version)
    answer = exchange(server, request + chunked(b"{}", 2), half_close=True)
    assert_refusal(answer, 400, "INVALID_BODY", fragment)


# -- heads over gunicorn's limits, and malformed ones ---------------------------------------------


@pytest.mark.parametrize(
    ("request_bytes", "fragment"),
    [
        (head("GET", "/api/v1/requests/" + "a" * 9000, AUTH), OVER_LINE),
        (head("GET", "/api/v1/requests/x?q=" + "a" * 200_000, AUTH), OVER_LINE),
        (head("GET", "http://127.0.0.1/api/v1/requests/" + "a" * 9000), OVER_LINE),
        (head("GET", "/api/v1/requests/x", AUTH, "X-Big: " + "b" * 9000), OVER_HEAD),
        (head("POST", "/api/v1/requests", "Cookie: " + "c" * 8190), OVER_HEAD),
        (head("GET", "/api/v1/requests/x", *[f"X-Field-{i}: v" for i in range(100)]), OVER_HEAD),
        (head("POST", "/internal/worker/execute", "X-Big: " + "b" * 9000), OVER_HEAD),
    ],
)
def test_head_over_the_limits_under_api__is_json_431(server, request_bytes, fragment):
    answer = exchange(server, request_bytes)
    assert_refusal(answer, 431, "HEADERS_TOO_LARGE", fragment)


@pytest.mark.parametrize("path", ["/admin/", "/healthz"])
@pytest.mark.parametrize("too_large", ["line", "field"])
def test_head_over_the_limits_elsewhere__is_plain_text_431(server, path, too_large):
    if too_large == "line":
        request, fragment = head("GET", f"{path}?q=" + "a" * 9000), OVER_LINE
    else:
        request, fragment = head("GET", path, "X-Big: " + "b" * 9000), OVER_HEAD
    answer = exchange(server, request)
    assert answer.status == 431
    assert answer.headers["content-type"] == "text/plain; charset=utf-8"
    assert fragment in answer.body.decode() and b"<" not in answer.body


@pytest.mark.parametrize(
    ("request_bytes", "fragment"),
    [
        (b"GET /api/v1/requests/\x00 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", "request line"),
        (b"GET /api/v1/requests/\xe9 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", "request line"),
        (head("GET", "/api/v1/requests/x", version="HTTP/9.9"), "request line"),
        (head("get", "/api/v1/requests/x"), "request line"),
        (b"GET /api/v1/requests/x HTTP/1.1\nHost: 127.0.0.1\n\n", "request line"),  # bare LF
        (head("GET", "/api/v1/requests/x", "NoColonHere"), "a header field is malformed"),
        (head("GET", "/api/v1/requests/x", "X-Nul: a\x00b"), "a header field is malformed"),
        (head("GET", "/api/v1/requests/x", "Bad Name: v"), "a header field is malformed"),
        (head("GET", "/api/v1/requests/x", "X-Folded: a\r\n b"), "a header field is malformed"),
        (head("GET", "/api/v1/requests/x", "Host: 127.0.0.1"), "a header field is malformed"),
        (head("POST", "/api/v1/requests", "Expect: coffee"), "Expect"),
        (b"\x16\x03\x01 hello\r\n\r\n", "request line"),  # TLS on the plain port: no path at all
    ],
)
def test_malformed_head__is_json_400(server, request_bytes, fragment):
    answer = exchange(server, request_bytes)
    assert_refusal(answer, 400, "INVALID_BODY", fragment)


# -- what Django answers under /api/ -------------------------------------------------------------


@pytest.mark.parametrize(
    ("request_bytes", "status", "code"),
    [
        (head("GET", "/api/nothing/here", AUTH), 404, "NOT_FOUND"),
        (head("GET", "/internal/nothing", AUTH), 404, "NOT_FOUND"),
        (head("DELETE", "/api/v1/requests", AUTH), 405, "METHOD_NOT_ALLOWED"),
        (head("GET", "/api/v1/requests/%ZZ", AUTH), 404, "NOT_FOUND"),
        (head("GET", "/api/v1/requests/%C0%AF", AUTH), 404, "NOT_FOUND"),
        (head("GET", "/api/v1/requests/%FF%FE", AUTH), 404, "NOT_FOUND"),
        (head("GET", "/api/v1/requests/%00", AUTH), 404, "NOT_FOUND"),
        (head("GET", "/api/v1/executions/%00", AUTH), 404, "NOT_FOUND"),
        (head("GET", "/api/v1/requests/x?q=%00", AUTH), 404, "NOT_FOUND"),
        (head("GET", "/api/%00/x", AUTH), 404, "NOT_FOUND"),
        (head("POST", "/api/v1/callbacks/%00", JSON_TYPE, "Content-Length: 2") + b"{}", 404, ""),
        (head("GET", "/api/schema/?format=%00"), 404, "NOT_FOUND"),
        (head("GET", "/api/schema/?format=html"), 404, "NOT_FOUND"),
        (
            head("POST", "/api/v1/requests", AUTH, "Content-Type: text/html", "Content-Length: 2")
            + b"{}",
            400,
            "INVALID_BODY",
        ),
    ],
)
def test_what_django_refuses_under_api__is_json(server, request_bytes, status, code):
    answer = exchange(server, request_bytes)
    assert answer.status == status, answer
    body = answer.json()
    assert set(body) >= {"code", "detail"}, body
    assert code in body["code"], body


@pytest.mark.parametrize(
    "request_bytes",
    [
        head("GET", "/api/schema/?lang=%00"),
        head("GET", "/api/schema/", "Accept: text/html"),  # as a browser asks
        head("GET", "/api/schema/", "Accept: text/html;q=0.9, */*;q=0.8"),
    ],
)
def test_the_schema__is_yaml_whatever_else_is_asked(server, request_bytes):
    answer = exchange(server, request_bytes)
    assert answer.status == 200, answer
    assert answer.headers["content-type"].startswith("application/vnd.oai.openapi"), answer
    assert answer.body.startswith(b"openapi: ")


@pytest.mark.parametrize("host", ["evil.example", "bad host", "[::1", "", "a" * 300, "é.example"])
def test_a_foreign_or_malformed_host_under_api__is_json_400(server, host):
    # Connection: close, as head() says, so the answer ends with the connection.
    request = (
        f"GET /api/v1/requests/x HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n{AUTH}\r\n\r\n"
    )
    answer = exchange(server, request.encode("utf-8"))
    assert_refusal(answer, 400, "INVALID_BODY")


# -- what nginx refuses itself --------------------------------------------------------------------

NGINX_OVER_HEAD = "longer than 16384 bytes"


@pytest.mark.parametrize(
    ("request_bytes", "status", "code", "fragment"),
    [
        (
            head("GET", "/api/v1/requests/" + "a" * 20_000, AUTH),
            431,
            "HEADERS_TOO_LARGE",
            NGINX_OVER_HEAD,
        ),
        (
            head("GET", "/api/v1/requests/x", AUTH, "X-Big: " + "b" * 20_000),
            431,
            "HEADERS_TOO_LARGE",
            NGINX_OVER_HEAD,
        ),
        (
            head("GET", "/api/v1/requests/x", AUTH, "X-Big: " + "b" * 9000),
            431,
            "HEADERS_TOO_LARGE",
            OVER_HEAD,
        ),
        (
            head("POST", "/api/v1/requests", AUTH, JSON_TYPE, "Content-Length: 2000000") + b"{}",
            400,
            "INVALID_BODY",
            "the body is larger than",
        ),
        (b"GARBAGE\r\n\r\n", 400, "INVALID_BODY", "malformed"),
        (
            head("GET", "/api/v1/requests/x", AUTH, "Host: 127.0.0.1"),
            400,
            "INVALID_BODY",
            "malformed",
        ),
    ],
)
def test_nginx_refusals_under_api__are_json(proxy, request_bytes, status, code, fragment):
    # Not half-closed: nginx takes that for a client gone, and answers nothing.
    answer = exchange(proxy, request_bytes)
    assert_refusal(answer, status, code, fragment)


@pytest.mark.parametrize(
    "request_bytes",
    [
        head("GET", "/admin/", "X-Big: " + "b" * 20_000),
        head("POST", "/admin/login/", "Content-Length: 2000000") + b"{}",
    ],
)
def test_nginx_refusals_elsewhere__are_plain_text(proxy, request_bytes):
    answer = exchange(proxy, request_bytes)
    assert answer.status in (400, 431), answer
    assert answer.headers["content-type"] == "text/plain; charset=utf-8"
    assert b"<" not in answer.body


def test_nginx_sets_the_forwarding_headers_itself(tmp_path):
    """gunicorn trusts the scheme headers of a peer on loopback or a unix socket, and every
    client reaches it through nginx: so nginx sets them, whatever the client sent, and drops
    names with '_' (gunicorn would take a SCRIPT_NAME header from a trusted peer)."""
    seen: list[dict[str, str]] = []

    class Recorder(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append({name.lower(): value for name, value in self.headers.items()})
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    upstream = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    threading.Thread(target=upstream.serve_forever, daemon=True).start()
    try:
        target = f"http://127.0.0.1:{upstream.server_address[1]}"
        with proxy_process(target, tmp_path / "run", tmp_path / "proxy.log") as base:
            request = head(
                "GET",
                "/api/v1/requests",
                "X-Forwarded-Proto: https",
                "X-Forwarded-Ssl: on",
                "X-Forwarded-Protocol: ssl",
                "X-Forwarded-For: 203.0.113.9",
                "Forwarded: for=203.0.113.9;proto=https",
                "SCRIPT_NAME: /elsewhere",
            )
            answer = exchange(int(base.rsplit(":", 1)[1]), request)
    finally:
        upstream.shutdown()
        upstream.server_close()
    assert answer.status == 200, answer
    headers = seen[-1]
    assert headers["x-forwarded-proto"] == "http"
    assert headers["x-forwarded-for"] == "127.0.0.1"
    assert headers["host"] == "127.0.0.1"
    for dropped in ("x-forwarded-ssl", "x-forwarded-protocol", "forwarded", "script_name"):
        assert dropped not in headers, headers


def test_files_still_go_out_through_the_worker(server):
    """The worker wraps each client socket; a static file (sent with sendfile) still arrives."""
    answer = exchange(server, head("GET", "/static/admin/css/base.css"))
    assert answer.status == 200, answer
    assert answer.headers["content-type"].startswith("text/css")
    assert b"body" in answer.body and len(answer.body) > 1000
