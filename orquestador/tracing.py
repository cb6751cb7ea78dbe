"""OpenTelemetry traces, configured only by the standard OTEL_* variables (docs/operations.md).

On when OTEL_EXPORTER_OTLP_ENDPOINT (or _TRACES_ENDPOINT) is set, off otherwise and whenever
OTEL_SDK_DISABLED=true or OTEL_TRACES_EXPORTER=none. Each process that traces calls `setup` once
at start: the SDK's provider, the OTLP/HTTP exporter, the sampler, and the Django, psycopg and
aiohttp client instrumentations. Off, the SDK is never imported and every helper returns at its
first line. Only the W3C trace context of the span that accepted a transition crosses the queue
(`carrier`, `continued`), never baggage. Why: docs/adr/0018-traces-across-the-queue.md.
"""

import contextlib
import functools
import os
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar, cast

if TYPE_CHECKING:  # imported for real only once tracing is on
    from opentelemetry.context import Context
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace import Span, SpanKind, Tracer

ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
PROTOCOL = "http/protobuf"  # the one OTLP transport installed
# W3C Trace Context: vendors must propagate at least this much of tracestate; more is dropped
# rather than stored with every execution.
MAX_TRACESTATE_LENGTH = 512
TRACEPARENT_LENGTH = 55  # "00-<32 hex>-<16 hex>-<2 hex>"
# Server spans nobody wants: probes and scrapes, static files (OTEL_PYTHON_DJANGO_EXCLUDED_URLS
# replaces this list when set).
EXCLUDED_URLS = "healthz,readyz,metrics,static/"
INSTRUMENTATION_NAME = "orquestador"
_HEX_ID = re.compile(r"[0-9a-f]{32}")

Params = ParamSpec("Params")
Result = TypeVar("Result")


class TracingConfigError(Exception):
    """An OTEL_* value this build cannot honour; the message names the variable."""


def tracing_wanted(environ: Mapping[str, str]) -> bool:
    """Whether these variables turn tracing on; TracingConfigError for one that cannot work."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporter = environ.get("OTEL_TRACES_EXPORTER", "").strip().lower() or "otlp"
    if exporter == "none":
        return False
    if not any(environ.get(name, "").strip() for name in ENDPOINT_VARIABLES):
        return False
    if exporter != "otlp":
        raise TracingConfigError(
            f"OTEL_TRACES_EXPORTER={exporter[:20]!r}: only otlp (or none) is supported"
        )
    protocol = (
        environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "").strip()
        or environ.get("OTEL_EXPORTER_OTLP_PROTOCOL", "").strip()
        or PROTOCOL
    )
    if protocol != PROTOCOL:
        raise TracingConfigError(
            f"OTEL_EXPORTER_OTLP_PROTOCOL={protocol[:20]!r}: only {PROTOCOL} is supported"
        )
    return True


@dataclass(frozen=True)
class _On:
    provider: "TracerProvider"
    tracer: "Tracer"


_on: _On | None = None  # None: tracing is off in this process


def active() -> bool:
    """Whether this process traces (`setup` turned it on)."""
    return _on is not None


def setup(*, service: str, environ: Mapping[str, str] = os.environ) -> bool:
    """Turn tracing on for this process if the OTEL_* variables say so; whether it is on.

    `service` names the process (service.name) unless OTEL_SERVICE_NAME or
    OTEL_RESOURCE_ATTRIBUTES does. Call it once, at start, before any connection or HTTP
    session is made and before Django builds its middleware. Raises TracingConfigError."""
    if _on is not None:
        return True
    if not tracing_wanted(environ):
        return False
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    resource = Resource.create()
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: service}))
    provider = TracerProvider(resource=resource, sampler=_sampler())
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    _instrument(provider, environ)
    start(provider)
    return True


def start(provider: "TracerProvider") -> None:
    """Trace this process's own spans with `provider` (setup's, or a test's)."""
    global _on
    _on = _On(provider, provider.get_tracer(INSTRUMENTATION_NAME))


def stop() -> None:
    """Stop tracing this process's own spans (a test's end); the provider is left as it is."""
    global _on
    _on = None


def _instrument(provider: "TracerProvider", environ: Mapping[str, str]) -> None:
    from opentelemetry.instrumentation.aiohttp_client import AioHttpClientInstrumentor
    from opentelemetry.instrumentation.django import DjangoInstrumentor
    from opentelemetry.instrumentation.psycopg import PsycopgInstrumentor

    excluded = environ.get("OTEL_PYTHON_DJANGO_EXCLUDED_URLS") or EXCLUDED_URLS
    DjangoInstrumentor().instrument(tracer_provider=provider, excluded_urls=excluded)
    PsycopgInstrumentor().instrument(tracer_provider=provider)
    AioHttpClientInstrumentor().instrument(tracer_provider=provider)
    _trace_django_cursors(provider)


def _trace_django_cursors(provider: "TracerProvider") -> None:
    """Django sets its own cursor class on each connection it opens, replacing the traced one
    psycopg's instrumentation gave it: trace Django's class instead, as each connection opens
    (the same spans as every other statement's)."""
    import psycopg
    from django.db.backends.signals import connection_created
    from opentelemetry.instrumentation.psycopg import (
        DatabaseApiIntegration,
        PsycopgInstrumentor,
        _new_cursor_factory,
    )
    from opentelemetry.instrumentation.psycopg.version import __version__

    def traced(sender: Any, connection: Any, **kwargs: Any) -> None:
        raw = connection.connection
        if not isinstance(raw, psycopg.Connection):
            return
        db_api = DatabaseApiIntegration(
            __name__,
            PsycopgInstrumentor._DATABASE_SYSTEM,
            connection_attributes=PsycopgInstrumentor._CONNECTION_ATTRIBUTES,
            version=__version__,
            tracer_provider=provider,
            connect_module=cast(Any, psycopg),  # as the instrumentation itself passes it
        )
        db_api.get_connection_attributes(raw)
        raw.cursor_factory = _new_cursor_factory(db_api=db_api, base_factory=raw.cursor_factory)

    connection_created.connect(traced, weak=False, dispatch_uid="orquestador.tracing")


def _sampler() -> Any:
    """OTEL_TRACES_SAMPLER's sampler (parent-based always-on unless set), except that a client
    span with no parent is dropped: the worker's and the web's own housekeeping (claims, lease
    renewals, probes of the queue) would otherwise start a trace of one statement each."""
    from opentelemetry.sdk.trace import sampling
    from opentelemetry.trace import SpanKind, get_current_span

    inner = sampling._get_from_env_or_default()

    class NoOrphanClients(sampling.Sampler):
        def should_sample(
            self,
            parent_context: "Context | None",
            trace_id: int,
            name: str,
            kind: "SpanKind | None" = None,
            attributes: Any = None,
            links: Any = None,
            trace_state: Any = None,
        ) -> sampling.SamplingResult:
            parent = get_current_span(parent_context).get_span_context()
            if kind is SpanKind.CLIENT and not parent.is_valid:
                return sampling.SamplingResult(sampling.Decision.DROP)
            return inner.should_sample(
                parent_context, trace_id, name, kind, attributes, links, trace_state
            )

        def get_description(self) -> str:
            return f"NoOrphanClients{{{inner.get_description()}}}"

    return NoOrphanClients()


# ------------------------------------------------------------------------------
# Spans
# ------------------------------------------------------------------------------
_OFF: contextlib.nullcontext[None] = contextlib.nullcontext()


def span(
    name: str, *, attributes: Mapping[str, Any] | None = None, errors: bool = True
) -> contextlib.AbstractContextManager["Span | None"]:
    """A span, current inside the block, child of the current one; None (nothing) when off.
    With `errors` false, an exception leaving the block is the caller's to record."""
    if _on is None:
        return _OFF
    return _on.tracer.start_as_current_span(
        name, attributes=attributes, record_exception=errors, set_status_on_exception=errors
    )


def traced(name: str) -> Callable[[Callable[Params, Result]], Callable[Params, Result]]:
    """Decorate a function: each call runs in a span named `name` (nothing more when off)."""

    def decorate(function: Callable[Params, Result]) -> Callable[Params, Result]:
        @functools.wraps(function)
        def call(*args: Params.args, **kwargs: Params.kwargs) -> Result:
            if _on is None:
                return function(*args, **kwargs)
            with _on.tracer.start_as_current_span(name):
                return function(*args, **kwargs)

        return call

    return decorate


@contextlib.contextmanager
def continued(
    stored: Mapping[str, Any] | None,
    name: str,
    *,
    attributes: Mapping[str, Any] | None = None,
    links_current: bool = False,
) -> Iterator["Span | None"]:
    """A span continuing the trace context `stored` (a `carrier`; None: a new trace), current
    inside the block. Nothing of the caller's context comes along (no baggage, no span); with
    `links_current`, the span links to the caller's current span (a callback's request)."""
    if _on is None:
        yield None
        return
    from opentelemetry import context as otel_context
    from opentelemetry import trace

    links: Sequence[trace.Link] = ()
    if links_current:
        here = trace.get_current_span().get_span_context()
        links = (trace.Link(here),) if here.is_valid else ()
    token = otel_context.attach(context_of(stored))
    try:
        with _on.tracer.start_as_current_span(name, attributes=attributes, links=links) as made:
            yield made
    finally:
        otel_context.detach(token)


# ------------------------------------------------------------------------------
# The trace context stored with an execution
# ------------------------------------------------------------------------------
def carrier() -> dict[str, str] | None:
    """The current span's W3C trace context, to store with an execution: `traceparent` and,
    when short enough, `tracestate`; None when off or outside any span."""
    if _on is None:
        return None
    stored: dict[str, str] = {}
    _trace_context_propagator().inject(stored)
    if len(stored.get("traceparent", "")) != TRACEPARENT_LENGTH:
        return None
    if len(stored.get("tracestate", "")) > MAX_TRACESTATE_LENGTH:
        del stored["tracestate"]
    return stored


def context_of(stored: Mapping[str, Any] | None) -> "Context":
    """The context a stored carrier describes, from nothing else (an empty one without it)."""
    from opentelemetry.context import Context

    if not stored:
        return Context()
    clean = {k: v for k, v in stored.items() if k in ("traceparent", "tracestate")}
    if not all(isinstance(v, str) for v in clean.values()):
        return Context()
    return _trace_context_propagator().extract(clean, context=Context())


@functools.cache
def _trace_context_propagator() -> Any:
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    return TraceContextTextMapPropagator()


def trace_id_of(stored: Mapping[str, Any] | None) -> str | None:
    """The trace id (32 hex digits) of a stored carrier, read without OpenTelemetry."""
    if not stored:
        return None
    parent = stored.get("traceparent")
    if not isinstance(parent, str) or len(parent) != TRACEPARENT_LENGTH:
        return None
    trace_id = parent[3:35]
    return trace_id if _HEX_ID.fullmatch(trace_id) and trace_id.strip("0") else None


def log_fields() -> dict[str, str]:
    """`trace_id` and `span_id` of the current span, for a log line; empty when off or outside
    any span."""
    if _on is None:
        return {}
    from opentelemetry.trace import get_current_span

    context = get_current_span().get_span_context()
    if not context.is_valid:
        return {}
    return {"trace_id": f"{context.trace_id:032x}", "span_id": f"{context.span_id:016x}"}
