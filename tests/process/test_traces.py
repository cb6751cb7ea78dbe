"""One trace from the API call to the provider, across a crash (docs/operations.md#traces).

Real processes only: gunicorn serving the API, two `runworker`s, a loopback provider
(tests/support/providers.py) that records the `traceparent` of every call, and a loopback
OTLP/HTTP receiver (tests/support/otlp.py) that decodes what every process exports. The client
sends a `traceparent`; the first worker runs the first action and dies by SIGKILL right after
committing it (the crash point `checkpoint.succeeded`); the second takes the execution over once
the lease expires and runs the second action. Both calls reach the provider in the client's
trace, and the exported spans join the API's acceptance to the final commit.
"""

import secrets
import signal
import uuid

import pytest
import requests

from executions.queue import faultpoints
from tests.support import tokens
from tests.support.otlp import OtlpReceiver
from tests.support.providers import JsonProvider
from tests.support.web import gunicorn_process
from tests.support.worker import (
    WorkerProcess,
    action,
    create_flow,
    execution_row,
    flow_definition,
    wait_until,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.process]

DEADLINE = 60.0  # seconds for a crash, a takeover or an export to happen
HTTP_TIMEOUT = 10.0
WORKER = {"WORKER_CONCURRENCY": "1", "WORKER_BATCH": "1", "WORKER_LEASE_SECONDS": "2"}


@pytest.fixture
def provider():
    with JsonProvider() as double:
        yield double


@pytest.fixture
def receiver():
    with OtlpReceiver() as otlp:
        yield otlp


@pytest.fixture
def integrations(tmp_path, provider) -> str:
    path = tmp_path / "integrations.toml"
    path.write_text(
        "".join(
            f'[contracts."shop.{name}@1"]\n'
            'effect = "IDEMPOTENT_WRITE"\n'
            "max_attempts = 3\n"
            "timeout_seconds = 1\n"
            f'[routes."shop.{name}@1"]\n'
            'adapter = "http.json"\n'
            f'url = "{provider.url("/" + name)}"\n'
            'method = "POST"\n\n'
            for name in ("reserve", "charge")
        )
    )
    return str(path)


def _flow(conn) -> dict:
    definition = flow_definition(
        [action("reserve", "shop.reserve"), action("charge", "shop.charge")], key="traced"
    )
    create_flow(conn, definition)
    return definition


def _accept(base: str, traceparent: str | None) -> tuple[str, str]:
    """Create a request and accept `go` on it through the API; (request id, execution id)."""
    headers = {"Authorization": f"Bearer {tokens.token(sub='alice', tenant='acme')}"}
    with requests.Session() as http:
        http.headers.update(headers)
        created = http.post(
            f"{base}/api/v1/requests", json={"flowKey": "traced", "data": {}}, timeout=HTTP_TIMEOUT
        )
        assert created.status_code == 201, created.text
        accepted = http.post(
            f"{base}/api/v1/requests/{created.json()['id']}/transitions",
            json={"transitionId": "go", "expectedRevision": 1},
            headers={"traceparent": traceparent} if traceparent else {},
            timeout=HTTP_TIMEOUT,
        )
        assert accepted.status_code == 202, accepted.text
    return created.json()["id"], accepted.json()["id"]


def _traced_env(process_env: dict, receiver: OtlpReceiver, integrations: str) -> dict:
    return {
        **process_env,
        "INTEGRATIONS_FILE": integrations,
        "SIMULATION_MODE": "false",
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
        "OTEL_BSP_SCHEDULE_DELAY": "100",  # milliseconds: export soon, before any kill
    }


def test_traces__one_trace_from_the_api_call_to_the_provider_across_a_sigkill(
    process_env, runtime_conn, provider, receiver, integrations, tmp_path
):
    _flow(runtime_conn)
    env = _traced_env(process_env, receiver, integrations)
    trace_id, client_span = secrets.token_hex(16), secrets.token_hex(8)

    with gunicorn_process(env, tmp_path / "web.log", WEB_WORKERS="1") as base:
        _request_id, execution_id = _accept(base, f"00-{trace_id}-{client_span}-01")
        # The acceptance's server span continues the client's; the execution keeps its context.
        receiver.wait_for_spans(
            lambda spans: any(s.name == "transition accept" for s in spans),
            timeout=DEADLINE,
            what="the acceptance's spans",
        )
    stored = execution_row(runtime_conn, uuid.UUID(execution_id))["trace_context"]
    assert stored["traceparent"].split("-")[1] == trace_id

    doomed_env = {
        **env,
        "DJANGO_SETTINGS_MODULE": "orquestador.settings_test",
        "TEST_SETTINGS_ROLE": "runtime",
        faultpoints.POINT_ENV: faultpoints.CHECKPOINT_SUCCEEDED,
        faultpoints.ACTION_ENV: "reserve",
    }
    with WorkerProcess(doomed_env, tmp_path / "doomed.log", **WORKER) as doomed:
        assert doomed.wait(DEADLINE) == -signal.SIGKILL, doomed.output()
        assert doomed.wait_for_event("fault point reached")["point"] == "checkpoint.succeeded"
    assert provider.calls("/reserve") == 1 and provider.calls("/charge") == 0

    with WorkerProcess(env, tmp_path / "survivor.log", **WORKER) as survivor:
        wait_until(
            lambda: execution_row(runtime_conn, uuid.UUID(execution_id))["status"] == "SUCCEEDED",
            timeout=DEADLINE,
            what="the survivor to finish the execution",
        )
        receiver.wait_for_spans(
            lambda spans: any(
                s.name == "write EXECUTION_FINALIZE" and s.trace_id == trace_id for s in spans
            ),
            timeout=DEADLINE,
            what="the survivor's final commit span",
        )
        survivor.signal(signal.SIGTERM)
        assert survivor.wait(DEADLINE) == 0, survivor.output()

    # Both calls, one from each worker, carried the client's trace to the provider.
    sent = [r.headers.get("traceparent", "") for r in provider.requests()]
    assert len(sent) == 2
    assert [value.split("-")[1] for value in sent] == [trace_id, trace_id]
    assert all(value.split("-")[2] != client_span for value in sent)  # a worker span each

    ours = [s for s in receiver.spans() if s.trace_id == trace_id]
    by_id = {s.span_id: s for s in ours}
    server = next(s for s in ours if s.service == "orquestador-web" and s.kind == "SERVER")
    assert server.parent_span_id == client_span
    accept = next(s for s in ours if s.name == "transition accept")
    assert accept.parent_span_id == server.span_id
    assert stored["traceparent"].split("-")[2] == accept.span_id

    # The survivor's run continues the acceptance, as attempt 2 of the execution, and its call
    # to the provider is the span whose id the provider received.
    worker = [s for s in ours if s.service == "orquestador-worker"]
    run = next(
        s
        for s in worker
        if s.name == "execution run" and s.attributes["orquestador.execution.attempt"] == 2
    )
    assert run.parent_span_id == accept.span_id
    assert run.attributes["orquestador.execution.id"] == execution_id
    assert run.attributes["orquestador.execution.status"] == "SUCCEEDED"
    charge_call = by_id[sent[1].split("-")[2]]
    assert charge_call.kind == "CLIENT"
    attempt = by_id[charge_call.parent_span_id]
    assert attempt.name == "attempt shop.charge@1"
    assert attempt.attributes["orquestador.outcome"] == "SUCCEEDED"
    assert by_id[attempt.parent_span_id].name == "action charge"
    assert by_id[by_id[attempt.parent_span_id].parent_span_id] is run
    final = next(s for s in worker if s.name == "write EXECUTION_FINALIZE")
    assert final.parent_span_id == run.span_id
    assert any(by_id.get(s.parent_span_id) is final and s.kind == "CLIENT" for s in worker)

    # Every line either worker logged about this execution carries its trace id.
    for process in (doomed, survivor):
        lines = [e for e in process.events() if e.get("execution_id") == execution_id]
        assert lines, process.output()
        assert {e.get("trace_id") for e in lines} == {trace_id}, process.output()


def test_traces__off_nothing_is_exported_stored_or_sent(
    process_env, runtime_conn, provider, receiver, integrations, tmp_path
):
    _flow(runtime_conn)
    # An endpoint is set, but the SDK is disabled: the standard switch wins.
    env = {**_traced_env(process_env, receiver, integrations), "OTEL_SDK_DISABLED": "true"}

    with gunicorn_process(env, tmp_path / "web.log", WEB_WORKERS="1") as base:
        _request_id, execution_id = _accept(base, f"00-{secrets.token_hex(16)}-{'1' * 16}-01")
        with WorkerProcess(env, tmp_path / "worker.log", **WORKER) as worker:
            wait_until(
                lambda: (
                    execution_row(runtime_conn, uuid.UUID(execution_id))["status"] == "SUCCEEDED"
                ),
                timeout=DEADLINE,
                what="the execution to succeed",
            )
            worker.signal(signal.SIGTERM)
            assert worker.wait(DEADLINE) == 0, worker.output()
    # Both processes have exited (a tracer provider would have flushed on the way out).
    assert receiver.calls() == 0
    assert execution_row(runtime_conn, uuid.UUID(execution_id))["trace_context"] is None
    assert [r.headers.get("traceparent") for r in provider.requests()] == [None, None]
    assert all("trace_id" not in e for e in worker.events())
