"""Traces in one process (docs/operations.md#traces): the context stored at the acceptance, the
run that continues it down to the provider's `traceparent`, and the log fields.

The spans are the OpenTelemetry SDK's own, exported to memory by a real tracer provider that the
test starts for this process's spans (`tracing.start`) and for the aiohttp client's; the
provider is the loopback JSON double. tests/process/test_traces.py does the same across real
processes, a crash and the OTLP exporter.
"""

import dataclasses
import hashlib
import hmac
import json
import logging
import uuid

import psycopg
import pytest
from opentelemetry.instrumentation.aiohttp_client import AioHttpClientInstrumentor
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from psycopg.types.json import Jsonb

from actions.base import Binding
from actions.catalog import parse_catalog
from actions.registry import ADAPTERS, Registry, use_registry
from executions.api.callbacks import callback_receive
from executions.api.resumes import execution_resume
from executions.api.services import request_create, transition_accept
from executions.flows.publication import flow_publish
from executions.models import Execution
from executions.queue.claims import Dispatch
from executions.queue.leases import Fence
from executions.queue.steps import run_sync
from executions.queue.waits import wait_reach
from executions.worker.remote import RemoteTarget, RemoteWorkerRuntime
from executions.worker.wire import ExecutionPackage, PackageInvalid, package_json, package_read
from orquestador import tracing
from orquestador.auth import Principal
from orquestador.jsonlog import JsonFormatter
from tests.support.loop import on_loop
from tests.support.providers import JsonProvider
from tests.support.worker import (
    FAST,
    action,
    claim,
    create_flow,
    dispatch_once,
    enqueue,
    flow_definition,
    holding_of,
    package_of,
    registry,
    run_next,
    runtime_for,
)

pytestmark = pytest.mark.django_db(transaction=True)

PRINCIPAL = Principal(subject="alice", tenant="acme", permissions=frozenset({"requests:write"}))
TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_SPAN = "00f067aa0ba902b7"


def _flow() -> dict:
    return {
        "key": "traced",
        "version": 1,
        "initialState": "DRAFT",
        "states": ["DRAFT", "DONE"],
        "dataSchema": {"type": "object"},
        "transitions": [
            {
                "id": "go",
                "from": ["DRAFT"],
                "actions": [
                    {"id": "reserve", "capability": "shop.reserve", "version": 1, "input": {}},
                    {"id": "pause", "capability": "NO_OP", "version": 1, "input": {}},
                ],
                "decision": {
                    "hitPolicy": "FIRST",
                    "rules": [{"id": "done", "when": True, "target": "DONE", "outcome": "OK"}],
                },
                "updates": [{"path": "/done", "value": True}],
            }
        ],
    }


@pytest.fixture
def spans():
    """This process's spans and the aiohttp client's, exported to memory while the test runs."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.start(provider)
    AioHttpClientInstrumentor().instrument(tracer_provider=provider)
    try:
        yield exporter
    finally:
        AioHttpClientInstrumentor().uninstrument()
        tracing.stop()
        provider.shutdown()


@pytest.fixture
def provider():
    with JsonProvider() as double:
        yield double


def _registry(provider: JsonProvider) -> Registry:
    document = {
        "contracts": {"shop.reserve@1": {"effect": "IDEMPOTENT_WRITE", "timeout_seconds": 5}},
        "routes": {"shop.reserve@1": {"adapter": "http.json", "url": provider.url("/reserve")}},
    }
    catalog = parse_catalog(document, adapters=ADAPTERS, lease_seconds=60, environ={})
    (http,) = (
        Binding(catalog.contracts[key], route, ADAPTERS[route.adapter])
        for key, route in catalog.routes.items()
    )
    return registry(http)


def _accepted_in_client_trace() -> Execution:
    flow_publish(definition=_flow())
    request = request_create(principal=PRINCIPAL, flow_key="traced", flow_version=None, data={})
    with tracing.continued({"traceparent": f"00-{TRACE}-{CLIENT_SPAN}-01"}, "client call"):
        execution, created = transition_accept(
            principal=PRINCIPAL, request_id=request.id, transition_id="go", expected_revision=1
        )
    assert created
    return Execution.objects.get(id=execution.id)


def _named(exporter: InMemorySpanExporter, name: str) -> ReadableSpan:
    found = [s for s in exporter.get_finished_spans() if s.name == name]
    assert len(found) == 1, [s.name for s in exporter.get_finished_spans()]
    return found[0]


def _span_id(span: ReadableSpan) -> str:
    return f"{span.context.span_id:016x}"


def test_acceptance__stores_its_span_in_the_callers_trace_with_the_execution(spans):
    execution = _accepted_in_client_trace()

    accept, caller = _named(spans, "transition accept"), _named(spans, "client call")
    assert f"{accept.context.trace_id:032x}" == TRACE
    assert accept.parent.span_id == caller.context.span_id
    assert f"{caller.parent.span_id:016x}" == CLIENT_SPAN
    assert execution.trace_context == {"traceparent": f"00-{TRACE}-{_span_id(accept)}-01"}


def test_acceptance__tracing_off_stores_nothing():
    flow_publish(definition=_flow())
    request = request_create(principal=PRINCIPAL, flow_key="traced", flow_version=None, data={})
    with tracing.continued({"traceparent": f"00-{TRACE}-{CLIENT_SPAN}-01"}, "client") as span:
        execution, _ = transition_accept(
            principal=PRINCIPAL, request_id=request.id, transition_id="go", expected_revision=1
        )
    assert span is None
    assert Execution.objects.get(id=execution.id).trace_context is None


def test_run__continues_the_stored_trace_down_to_the_providers_traceparent(
    spans, provider, runtime_dsn
):
    execution = _accepted_in_client_trace()
    with (
        runtime_for(runtime_dsn, _registry(provider)) as runtime,
        psycopg.connect(runtime_dsn, autocommit=True) as conn,
    ):
        result = run_next(conn, runtime)
    assert result.execution_status == "SUCCEEDED"

    accept = _named(spans, "transition accept")
    run = _named(spans, "execution run")
    assert run.context.trace_id == accept.context.trace_id
    assert run.parent.span_id == accept.context.span_id
    assert run.attributes["orquestador.execution.id"] == str(execution.id)
    assert run.attributes["orquestador.execution.status"] == "SUCCEEDED"
    reserve, pause = _named(spans, "action reserve"), _named(spans, "action pause")
    assert reserve.parent.span_id == pause.parent.span_id == run.context.span_id
    attempt = _named(spans, "attempt shop.reserve@1")
    assert attempt.parent.span_id == reserve.context.span_id
    assert (
        attempt.attributes["orquestador.outcome"],
        attempt.attributes["orquestador.action.attempt"],
    ) == ("SUCCEEDED", 1)
    (client,) = [s for s in spans.get_finished_spans() if s.kind is SpanKind.CLIENT]
    assert client.parent.span_id == attempt.context.span_id
    (sent,) = provider.requests("/reserve")
    assert sent.headers["traceparent"] == f"00-{TRACE}-{_span_id(client)}-01"
    final = _named(spans, "write EXECUTION_FINALIZE")
    assert final.parent.span_id == run.context.span_id
    assert final.end_time <= run.end_time


def test_log_lines__carry_the_current_spans_trace_and_span_ids(spans):
    formatter = JsonFormatter()
    record = logging.makeLogRecord({"msg": "in a span", "levelname": "INFO", "name": "t"})
    with tracing.span("work") as span:
        inside = json.loads(formatter.format(record))
    outside = json.loads(formatter.format(record))

    context = span.get_span_context()
    assert (inside["trace_id"], inside["span_id"]) == (
        f"{context.trace_id:032x}",
        f"{context.span_id:016x}",
    )
    assert "trace_id" not in outside and "span_id" not in outside


def test_log_lines__of_a_traced_execution_carry_its_trace_id_even_off():
    fence = Fence(uuid.uuid4(), uuid.uuid4(), 3, "host:1:x")
    traced = Dispatch(
        fence, 1, "go", 1, None, trace_context={"traceparent": f"00-{TRACE}-{CLIENT_SPAN}-01"}
    )
    untraced = Dispatch(fence, 1, "go", 1, None)
    formatter = JsonFormatter()
    record = logging.makeLogRecord({"msg": "claimed", **traced.log_extra})

    assert json.loads(formatter.format(record))["trace_id"] == TRACE
    assert "trace_id" not in untraced.log_extra
    assert "trace_id" not in json.loads(formatter.format(logging.makeLogRecord({"msg": "x"})))


def test_package__carries_the_stored_trace_context_to_a_remote_runtime():
    fence = Fence(uuid.uuid4(), uuid.uuid4(), 3, "host:1:x")
    stored = {"traceparent": f"00-{TRACE}-{CLIENT_SPAN}-01", "tracestate": "vendor=1"}
    package = ExecutionPackage(Dispatch(fence, 1, "go", 2, None, trace_context=stored))

    sent = json.loads(package_json(package))
    assert sent["metadata"] == {"traceContext": stored}
    assert package_read(sent) == package
    assert package_read({**sent, "metadata": {}}).dispatch.trace_context is None
    for bad in ("00-x", {"tracestate": "a=1"}, {"traceparent": "t" * 600}):
        with pytest.raises(PackageInvalid, match="traceContext"):
            package_read({**sent, "metadata": {"traceContext": bad}})


def test_event__is_a_span_of_the_executions_trace_linked_to_the_call_that_sent_it(
    spans, runtime_conn
):
    approval = {
        "id": "approval",
        "wait": {
            "event": "manager.approval",
            "payloadSchema": {"type": "object"},
            "timeoutSeconds": 60,
        },
    }
    flow_id = create_flow(runtime_conn, flow_definition([approval], key="approvals"))
    accepted = enqueue(runtime_conn, flow_id)
    stored = {"traceparent": f"00-{TRACE}-{CLIENT_SPAN}-01"}
    runtime_conn.execute(
        "UPDATE execution SET trace_context = %s WHERE id = %s",
        [Jsonb(stored), accepted.execution_id],
    )
    (found,) = claim(runtime_conn, "worker-a", lease_seconds=30)
    run_sync(
        runtime_conn,
        wait_reach(fence=found.fence, action=approval, sequence=0, payload={}, tenant="acme"),
    )
    sender = Principal(subject="maria", tenant="acme", permissions=frozenset({"executions:resume"}))

    with tracing.span("the sender's call") as call:
        _, taken = execution_resume(
            principal=sender,
            execution_id=str(accepted.execution_id),
            event_id="ev-1",
            event="manager.approval",
            payload={},
        )
    assert taken

    event = _named(spans, "execution event")
    assert f"{event.context.trace_id:032x}" == TRACE
    assert f"{event.parent.span_id:016x}" == CLIENT_SPAN
    assert [link.context.span_id for link in event.links] == [call.get_span_context().span_id]
    assert event.attributes["orquestador.event"] == "manager.approval"


def test_callback__is_a_span_of_the_executions_trace_linked_to_the_providers_call(
    spans, runtime_conn, monkeypatch
):
    secret, capability = "callback-secret-0123456789-abcdefghij", "docs.check"
    monkeypatch.setenv("DOCS_CALLBACK_SECRET", secret)
    document = {
        "contracts": {f"{capability}@1": {"effect": "READ_ONLY"}},
        "routes": {
            f"{capability}@1": {
                "adapter": "http.json",
                "url": "http://127.0.0.1:9/check",
                "async": True,
                "callback_secret_from_env": "DOCS_CALLBACK_SECRET",
            }
        },
    }
    catalog = parse_catalog(
        document, adapters=ADAPTERS, lease_seconds=60, environ={"DOCS_CALLBACK_SECRET": secret}
    )
    (route,) = catalog.routes.values()
    check = Binding(catalog.contracts[f"{capability}@1"], route, ADAPTERS["http.json"])
    flow_id = create_flow(runtime_conn, flow_definition([action("check", capability)]))
    accepted = enqueue(runtime_conn, flow_id)
    (found,) = claim(runtime_conn, "worker-a", lease_seconds=30)
    runtime_conn.execute(
        "INSERT INTO action_execution (execution_id, action_id, sequence, capability, "
        "capability_version, effect, status, input_hash, external_key, fencing_token) "
        "VALUES (%s, 'check', 0, %s, 1, 'READ_ONLY', 'ACCEPTED', 'h', %s, %s)",
        [accepted.execution_id, capability, f"{accepted.execution_id}:check", found.fence.token],
    )
    runtime_conn.execute(
        "UPDATE execution SET status = 'SUSPENDED', lease_owner = NULL, lease_expires_at = NULL,"
        " next_attempt_at = now() + interval '1 hour', trace_context = %s WHERE id = %s",
        [Jsonb({"traceparent": f"00-{TRACE}-{CLIENT_SPAN}-01"}), accepted.execution_id],
    )
    body = json.dumps({"externalKey": f"{accepted.execution_id}:check", "output": {}}).encode()
    signature = "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()

    with use_registry(registry(check)), tracing.span("the provider's call") as call:
        received = callback_receive(
            capability=capability, version=1, body=body, signature=signature
        )
    assert not received.replay

    resumed = _named(spans, "execution callback")
    assert f"{resumed.context.trace_id:032x}" == TRACE
    assert f"{resumed.parent.span_id:016x}" == CLIENT_SPAN
    assert [link.context.span_id for link in resumed.links] == [call.get_span_context().span_id]
    assert resumed.attributes["orquestador.action.id"] == "check"


def test_remote_run__continues_the_stored_trace_at_the_worker_endpoint(
    spans, runtime_conn, worker_endpoint
):
    flow_id = create_flow(runtime_conn, flow_definition([action("a", "NO_OP")], key="remote"))
    accepted = enqueue(runtime_conn, flow_id)
    runtime_conn.execute(
        "UPDATE execution SET trace_context = %s WHERE id = %s",
        [Jsonb({"traceparent": f"00-{TRACE}-{CLIENT_SPAN}-01"}), accepted.execution_id],
    )
    worker_endpoint.serve(registry())
    target = RemoteTarget(url=worker_endpoint.url, token=worker_endpoint.token)
    config = dataclasses.replace(FAST, lease_seconds=20.0, renew_seconds=5.0)
    (found,) = claim(runtime_conn, "w")
    with on_loop(RemoteWorkerRuntime(target=target, config=config)) as remote:
        result = dispatch_once(remote, package_of(found), holding_of(found))
    assert result.execution_status == "SUCCEEDED"

    run = _named(spans, "execution run")  # at the endpoint, on its runtime's loop
    assert f"{run.context.trace_id:032x}" == TRACE
    assert f"{run.parent.span_id:016x}" == CLIENT_SPAN
    assert run.attributes["orquestador.execution.id"] == str(accepted.execution_id)
