"""A loopback OTLP/HTTP receiver: what the processes' exporters send, decoded.

A real HTTP server on 127.0.0.1 (tests/support/providers.py's), answering `POST /v1/traces` as a
collector does (200, an empty ExportTraceServiceResponse) and decoding each protobuf export
request with opentelemetry-proto into `ReceivedSpan`s.
"""

import gzip
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from tests.support.providers import LoopbackServer, Received, Reply

TRACES_PATH = "/v1/traces"
SPAN_KINDS = {1: "INTERNAL", 2: "SERVER", 3: "CLIENT", 4: "PRODUCER", 5: "CONSUMER"}


@dataclass(frozen=True)
class ReceivedSpan:
    service: str
    name: str
    trace_id: str  # 32 hex digits
    span_id: str  # 16 hex digits
    parent_span_id: str  # "" for a root
    kind: str
    attributes: dict[str, Any]
    links: tuple[tuple[str, str], ...]  # (trace id, span id) of each link
    status: int  # 0 unset, 1 ok, 2 error


def _value(value: AnyValue) -> Any:
    field = value.WhichOneof("value")
    return getattr(value, field) if field else None


def decode(body: bytes) -> list[ReceivedSpan]:
    """Every span of one export request."""
    request = ExportTraceServiceRequest()
    request.ParseFromString(body)
    spans = []
    for resource_spans in request.resource_spans:
        resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                spans.append(
                    ReceivedSpan(
                        service=str(resource.get("service.name", "")),
                        name=span.name,
                        trace_id=span.trace_id.hex(),
                        span_id=span.span_id.hex(),
                        parent_span_id=span.parent_span_id.hex(),
                        kind=SPAN_KINDS.get(span.kind, "UNSPECIFIED"),
                        attributes={a.key: _value(a.value) for a in span.attributes},
                        links=tuple(
                            (link.trace_id.hex(), link.span_id.hex()) for link in span.links
                        ),
                        status=span.status.code,
                    )
                )
    return spans


class OtlpReceiver(LoopbackServer):
    """Answers every export with success; `spans()` is everything received so far."""

    @property
    def endpoint(self) -> str:
        """The value of OTEL_EXPORTER_OTLP_ENDPOINT that sends here."""
        return self.url()

    def spans(self) -> list[ReceivedSpan]:
        found: list[ReceivedSpan] = []
        for received in self.requests(TRACES_PATH):
            body = received.body
            if received.headers.get("content-encoding") == "gzip":
                body = gzip.decompress(body)
            found.extend(decode(body))
        return found

    def wait_for_spans(self, predicate: Any, *, timeout: float, what: str) -> list[ReceivedSpan]:
        """Wait until `predicate(spans)` holds (returning them); fail at the deadline."""
        deadline = time.monotonic() + timeout
        while True:
            spans = self.spans()
            if predicate(spans):
                return spans
            if time.monotonic() > deadline:
                names = sorted({(s.service, s.name) for s in spans})
                raise AssertionError(f"timed out waiting for {what}; received {names}")
            with self.state.lock:
                self.state.lock.wait(0.05)

    def _answer(self, handler: BaseHTTPRequestHandler, received: Received, reply: Reply) -> None:
        if received.method != "POST" or received.path != TRACES_PATH:
            self._send(handler, reply, 404, b"", "text/plain")
            return
        body = ExportTraceServiceResponse().SerializeToString()
        self._send(handler, reply, 200, body, "application/x-protobuf")
