"""Request bodies at the WSGI edge: the one size limit, bodies without a length, bodies cut short.

Django reads a body only as far as its Content-Length: a chunked body (`wsgi.input_terminated`,
as gunicorn decodes it) would read as empty, and one cut short (gunicorn hands on what came before
the client ended its side) as if complete. `ChunkedBodies` reads both here, at most
MAX_BODY_BYTES + 1 bytes, and hands the body on with the length it has; a longer one, a shorter
one than declared, malformed chunks and codings not decoded here are refused. Refusals are JSON
`{"code", "detail"}` under errors.JSON_PREFIXES, plain text elsewhere.
"""

import io
import json
from collections.abc import Callable, Iterable
from typing import Any

from gunicorn.http.errors import NoMoreData, ParseException

from . import errors

MAX_BODY_BYTES = 1024 * 1024  # bytes of any request body; request data alone is 256 KiB, compact

StartResponse = Callable[..., Any]
WSGIApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]


class ChunkedBodies:
    """WSGI middleware: a chunked body read up to the limit, then given a Content-Length."""

    def __init__(self, app: WSGIApp) -> None:
        self.app = app

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        coding = environ.get("HTTP_TRANSFER_ENCODING")
        if environ.get("CONTENT_LENGTH"):
            return self._whole(environ, start_response)
        if coding is None or not environ.get("wsgi.input_terminated"):
            return self.app(environ, start_response)
        # gunicorn passes gzip, deflate and compress codings on still encoded: refused, not
        # handed on as if the encoded bytes were the body.
        if [part.strip().lower() for part in coding.split(",")] != ["chunked"]:
            return _refuse(
                environ,
                start_response,
                "the body is sent with a Transfer-Encoding other than chunked alone; send it "
                "chunked, or with a Content-Length",
            )
        try:
            body = environ["wsgi.input"].read(MAX_BODY_BYTES + 1)
        except ParseException:  # gunicorn's: a chunk size, extension or terminator malformed
            return _refuse(environ, start_response, "the body's chunked encoding is malformed")
        except NoMoreData:  # the client ended its side before the last chunk
            return _refuse(environ, start_response, "the body ended before its last chunk")
        if len(body) > MAX_BODY_BYTES:
            return _refuse(
                environ, start_response, f"the body is larger than {MAX_BODY_BYTES} bytes"
            )
        environ["wsgi.input"] = io.BytesIO(body)
        environ["CONTENT_LENGTH"] = str(len(body))
        return self.app(environ, start_response)

    def _whole(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        """A body with a Content-Length within the limit, read whole or refused as cut short.
        Over the limit (or not a number), it is the application's to refuse, unread."""
        declared = environ["CONTENT_LENGTH"].strip()
        # As executions/api/parsers.check_declared_length reads it: ASCII digits, no longer than
        # the limit's own.
        if not (declared.isascii() and declared.isdigit()) or len(declared) > len(
            str(MAX_BODY_BYTES)
        ):
            return self.app(environ, start_response)
        length = int(declared)
        if not 0 < length <= MAX_BODY_BYTES:
            return self.app(environ, start_response)
        try:
            body = environ["wsgi.input"].read(length)
        except NoMoreData:
            body = b""
        if len(body) < length:
            return _refuse(
                environ,
                start_response,
                f"the body ended after {len(body)} of the {length} bytes its Content-Length "
                "declares",
            )
        environ["wsgi.input"] = io.BytesIO(body)
        return self.app(environ, start_response)


def _refuse(environ: dict[str, Any], start_response: StartResponse, detail: str) -> list[bytes]:
    if environ.get("PATH_INFO", "").startswith(errors.JSON_PREFIXES):
        body = json.dumps({"code": errors.INVALID_BODY, "detail": detail}).encode()
        content_type = "application/json"
    else:
        body = f"Bad Request: {detail}\n".encode()
        content_type = "text/plain; charset=utf-8"
    # The rest of the body stays unread; gunicorn closes the connection after any answer of a
    # sync worker, and after a body that failed to read whatever the worker.
    headers = [("Content-Type", content_type), ("Content-Length", str(len(body)))]
    start_response("400 Bad Request", headers)
    return [body]
