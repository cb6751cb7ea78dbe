"""The worker endpoint over real HTTP on 127.0.0.1 (live_server): its token gate, its refusal of
malformed packages, the superseded 409 round trip, and the remote runtime's transport failures."""

import dataclasses
import json
import socket
import threading
import uuid

import pytest
import requests
from django.core.exceptions import ImproperlyConfigured

from actions.base import StopSignal
from executions.queue.leases import ExecutionSuperseded
from executions.worker.endpoint import endpoint_guard, endpoint_runtime_set
from executions.worker.remote import RemoteTarget, RemoteWorkerError, RemoteWorkerRuntime
from executions.worker.runtime import is_superseded_refusal
from executions.worker.wire import package_json
from tests.support.loop import on_loop
from tests.support.providers import JsonProvider, slow, status
from tests.support.worker import (
    DEFAULT_TIMEOUT,
    FAST,
    GateAdapter,
    ScriptedAdapter,
    action,
    binding,
    claim,
    dispatch_once,
    enqueue,
    execution_row,
    holding_of,
    package_of,
    registry,
)

pytestmark = pytest.mark.django_db(transaction=True)

TIMEOUT = 10  # seconds per HTTP call


def post(url, body, token=None, **headers):
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return requests.post(
        url,
        data=data,
        headers={"Content-Type": "application/json", **headers},
        timeout=TIMEOUT,
        allow_redirects=False,
    )


def claimed(conn, make_flow, adapter):
    """One execution claimed by 'w' on a flow whose only action is `adapter`."""
    accepted = enqueue(conn, make_flow([action("a", "A")]))
    (found,) = claim(conn, "w", lease_seconds=10.0)
    return accepted, found


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# ------------------------------------------------------------------------------
# The gate
# ------------------------------------------------------------------------------
def test_endpoint__is_not_mounted_unless_enabled(live_server):
    response = post(f"{live_server.url}/internal/worker/execute", {}, token="w" * 40)
    assert response.status_code == 404


@pytest.mark.parametrize(
    "authorization",
    [
        None,
        "Bearer " + "x" * 40,
        "Bearer " + "w" * 39 + "x",
        "Bearer " + "w" * 39,
        "Basic " + "w" * 40,
        "w" * 40,
    ],
    ids=["missing", "wrong", "one-character-off", "prefix", "other-scheme", "no-scheme"],
)
def test_endpoint__refuses_a_caller_without_the_token(
    conn, make_flow, worker_endpoint, authorization
):
    adapter = ScriptedAdapter()
    worker_endpoint.serve(registry(binding("A", adapter)))
    accepted, found = claimed(conn, make_flow, adapter)
    package = json.loads(package_json(package_of(found)))
    package["principal"] = {"subject": "mallory", "scope": "acme", "roles": []}
    headers = {} if authorization is None else {"Authorization": authorization}
    response = post(worker_endpoint.url + "execute", package, **headers)
    assert response.status_code == 401
    assert response.json()["code"] == "UNAUTHENTICATED"
    assert response.headers["WWW-Authenticate"].startswith("Bearer")
    cancel = post(worker_endpoint.url + "cancel", {"executionId": package["executionId"]})
    assert cancel.status_code == 401
    assert adapter.calls == []  # nothing ran, whatever principal the package named
    assert execution_row(conn, accepted.execution_id)["status"] == "RUNNING"


def test_endpoint__refuses_to_serve_a_system_identity_runtime_without_a_token(settings):
    with pytest.raises(ImproperlyConfigured, match="WORKER_ENDPOINT_TOKEN"):
        endpoint_guard(runs_as_system=True, token="")
    endpoint_guard(runs_as_system=True, token="w" * 40)
    endpoint_guard(runs_as_system=False, token="")
    settings.WORKER_ENDPOINT_TOKEN = ""

    class SystemRuntime:
        runs_as_system = True

    with pytest.raises(ImproperlyConfigured, match="WORKER_ENDPOINT_TOKEN"):
        endpoint_runtime_set(SystemRuntime())


# ------------------------------------------------------------------------------
# Malformed packages
# ------------------------------------------------------------------------------
def _valid():
    return {
        "formatVersion": 1,
        "executionId": "3f1c1f5e-4b4e-4f57-9b0e-0d3c7b1a2c9d",
        "requestId": "9a7d2c44-5c1b-4f7e-8a31-2f5e8d3b6a10",
        "flowId": 4,
        "transitionId": "go",
        "fencingToken": 7,
        "leaseOwner": "host:1:abc",
        "attempts": 1,
        "principal": None,
        "resumeEvent": None,
        "metadata": {},
    }


MALFORMED = {
    "not-json": b"{executionId",
    "not-utf8": b"\xff\xfe",
    "array": [],
    "string": "package",
    "missing-execution-id": {k: v for k, v in _valid().items() if k != "executionId"},
    "execution-id-not-uuid": {**_valid(), "executionId": "1; DROP TABLE execution"},
    "execution-id-number": {**_valid(), "executionId": 12},
    "flow-id-text": {**_valid(), "flowId": "4"},
    "flow-id-bool": {**_valid(), "flowId": True},
    "flow-id-zero": {**_valid(), "flowId": 0},
    "token-negative": {**_valid(), "fencingToken": -1},
    "token-float": {**_valid(), "fencingToken": 7.5},
    "transition-empty": {**_valid(), "transitionId": ""},
    "lease-owner-too-long": {**_valid(), "leaseOwner": "o" * 256},
    "attempts-null": {**_valid(), "attempts": None},
    "principal-not-object": {**_valid(), "principal": "alice"},
    "metadata-list": {**_valid(), "metadata": []},
    "resume-event-without-ids": {**_valid(), "resumeEvent": {"eventType": "approved"}},
    "resume-event-not-object": {**_valid(), "resumeEvent": "approved"},
    "format-version-missing": {k: v for k, v in _valid().items() if k != "formatVersion"},
    "format-version-unknown": {**_valid(), "formatVersion": 2},
    "unknown-field": {**_valid(), "code": "import os"},
    # A 30,000-deep array (60 KB, under the size limit) once raised RecursionError: a 500.
    "deep-array": b"[" * 30_000 + b"]" * 30_000,
    "deep-in-metadata": b'{"metadata": ' + b"[" * 20_000 + b"]" * 20_000 + b"}",
    # Past Python's 4,300-digit int-string limit.
    "huge-integer": json.dumps({**_valid(), "flowId": 0})
    .replace('"flowId": 0', '"flowId": ' + "9" * 5000)
    .encode(),
}


def test_endpoint__an_unknown_format_version_is_refused_naming_it(worker_endpoint):
    worker_endpoint.serve(registry())
    body = {**_valid(), "formatVersion": 2}
    response = post(worker_endpoint.url + "execute", body, token=worker_endpoint.token)
    assert response.status_code == 400
    assert "formatVersion 2" in response.json()["detail"]


@pytest.mark.parametrize("body", MALFORMED.values(), ids=MALFORMED.keys())
def test_endpoint__a_malformed_package_is_400_with_code_and_detail(worker_endpoint, body):
    worker_endpoint.serve(registry())
    response = post(worker_endpoint.url + "execute", body, token=worker_endpoint.token)
    assert response.status_code == 400, response.text
    answer = response.json()
    assert answer["code"] == "INVALID_BODY"
    assert isinstance(answer["detail"], str) and answer["detail"]


def test_endpoint__a_malformed_cancel_is_400_and_only_post_is_served(worker_endpoint):
    worker_endpoint.serve(registry())
    response = post(worker_endpoint.url + "cancel", {"fence": 1}, token=worker_endpoint.token)
    assert (response.status_code, response.json()["code"]) == (400, "INVALID_BODY")
    got = requests.get(
        worker_endpoint.url + "execute",
        headers={"Authorization": f"Bearer {worker_endpoint.token}"},
        timeout=TIMEOUT,
    )
    assert got.status_code == 405


def test_endpoint__an_unknown_execution_is_superseded_not_a_fault(worker_endpoint):
    worker_endpoint.serve(registry())
    response = post(worker_endpoint.url + "execute", _valid(), token=worker_endpoint.token)
    assert response.status_code == 409
    assert response.json() == {"code": "superseded", "executionId": _valid()["executionId"]}


# ------------------------------------------------------------------------------
# Superseded, over the wire and back
# ------------------------------------------------------------------------------
def test_endpoint__a_stale_fence_is_409_superseded_and_the_remote_runtime_settles_it(
    conn, make_flow, worker_endpoint
):
    adapter = ScriptedAdapter()
    worker_endpoint.serve(registry(binding("A", adapter)))
    accepted, found = claimed(conn, make_flow, adapter)
    conn.execute(  # another holder took it over
        "UPDATE execution SET fencing_token = fencing_token + 1 WHERE id = %s",
        [accepted.execution_id],
    )
    package = package_of(found)
    response = post(
        worker_endpoint.url + "execute",
        package_json(package).encode(),
        token=worker_endpoint.token,
    )
    assert response.status_code == 409
    assert response.json() == {"code": "superseded", "executionId": str(accepted.execution_id)}

    target = RemoteTarget(url=worker_endpoint.url, token=worker_endpoint.token)
    with on_loop(RemoteWorkerRuntime(target=target, config=FAST)) as runtime:
        request = holding_of(found)
        reservation = runtime.allocate(request)
        with pytest.raises(ExecutionSuperseded) as refused:
            runtime.execute(reservation, package)
        runtime.release(reservation)
        assert is_superseded_refusal(refused.value, accepted.execution_id)
        assert dispatch_once(runtime, package, request).status == "superseded"
    assert adapter.calls == []
    assert execution_row(conn, accepted.execution_id)["fencing_token"] == found.fence.token + 1


# ------------------------------------------------------------------------------
# Failures of the remote runtime are errors, never superseded
# ------------------------------------------------------------------------------
def _dispatch_fails(runtime, found):
    package = package_of(found)
    request = holding_of(found)
    with pytest.raises(RemoteWorkerError) as failed:
        dispatch_once(runtime, package, request)
    assert not is_superseded_refusal(failed.value, package.execution_id)
    return failed.value


def test_remote_runtime__nothing_listening_is_an_error_not_superseded(conn, make_flow):
    _, found = claimed(conn, make_flow, ScriptedAdapter())
    target = RemoteTarget(url=f"http://127.0.0.1:{free_port()}/internal/worker/", token="w" * 40)
    with on_loop(RemoteWorkerRuntime(target=target, config=FAST)) as runtime:
        error = _dispatch_fails(runtime, found)
    assert "could not be reached" in str(error)


def test_remote_runtime__a_refused_token_is_an_error_not_superseded(
    conn, make_flow, worker_endpoint
):
    adapter = ScriptedAdapter()
    worker_endpoint.serve(registry(binding("A", adapter)))
    _, found = claimed(conn, make_flow, adapter)
    target = RemoteTarget(url=worker_endpoint.url, token="x" * 40)
    with on_loop(RemoteWorkerRuntime(target=target, config=FAST)) as runtime:
        error = _dispatch_fails(runtime, found)
        assert runtime.cancel(str(found.execution_id), "test") is False  # released
    assert "401" in str(error)
    assert adapter.calls == []


# ------------------------------------------------------------------------------
# A misbehaving endpoint: a timeout, a garbled result, a 409 naming another execution
# ------------------------------------------------------------------------------
EXECUTE = "/internal/worker/execute"


@pytest.fixture
def fake_endpoint():
    with JsonProvider() as server:
        yield server


def _against(fake_endpoint):
    target = RemoteTarget(url=fake_endpoint.url("/internal/worker/"), token="w" * 40)
    return on_loop(RemoteWorkerRuntime(target=target, config=FAST))


def test_remote_runtime__an_endpoint_slower_than_its_budget_is_an_error(
    conn, make_flow, fake_endpoint
):
    fake_endpoint.plan(EXECUTE, slow(10))  # FAST: a read budget of lease - renew = 1.5 s
    _, found = claimed(conn, make_flow, ScriptedAdapter())
    with _against(fake_endpoint) as runtime:
        error = _dispatch_fails(runtime, found)
    assert "could not be reached" in str(error) or "timed out" in str(error)


@pytest.mark.parametrize(
    "body",
    [
        b"{not json",
        b"[]",
        json.dumps(
            {
                "formatVersion": 1,
                "executionId": str(uuid.uuid4()),
                "status": "completed",
                "state": {"executionStatus": "SUCCEEDED"},
            }
        ).encode(),
        json.dumps(
            {
                "formatVersion": 2,
                "executionId": "{id}",
                "status": "completed",
                "state": {"executionStatus": "SUCCEEDED"},
            }
        ).encode(),
    ],
    ids=["not-json", "array", "another-execution", "another-format-version"],
)
def test_remote_runtime__a_garbled_result_is_an_error_never_a_result(
    conn, make_flow, fake_endpoint, body
):
    _, found = claimed(conn, make_flow, ScriptedAdapter())
    body = body.replace(b"{id}", str(found.execution_id).encode())
    fake_endpoint.plan(EXECUTE, status(200, body=body))
    with _against(fake_endpoint) as runtime:
        error = _dispatch_fails(runtime, found)
    assert "answer" in str(error)  # the endpoint answered, with something that is no result
    assert execution_row(conn, found.execution_id)["status"] == "RUNNING"  # left for recovery


def test_remote_runtime__a_409_naming_another_execution_is_an_error_not_superseded(
    conn, make_flow, fake_endpoint
):
    _, found = claimed(conn, make_flow, ScriptedAdapter())
    other = json.dumps({"code": "superseded", "executionId": str(uuid.uuid4())}).encode()
    fake_endpoint.plan(EXECUTE, status(409, body=other))
    with _against(fake_endpoint) as runtime:
        error = _dispatch_fails(runtime, found)
    assert "409" in str(error)


# ------------------------------------------------------------------------------
# A run longer than one lease; the web thread's own limit
# ------------------------------------------------------------------------------
def test_endpoint__holds_a_web_thread_no_longer_than_its_limit(conn, make_flow, worker_endpoint):
    """FAST's WORKER_ENDPOINT_RUN_SECONDS is 1.5: the endpoint answers RUN_TIME_LIMIT while the
    first action is still blocked (the gate never opens), tells the run to stop, and the run
    starts nothing more; the execution is left RUNNING for recovery by lease."""
    gate, after = GateAdapter(), ScriptedAdapter()
    worker_endpoint.serve(registry(binding("A", gate), binding("B", after)))
    accepted = enqueue(conn, make_flow([action("a", "A"), action("b", "B")]))
    (found,) = claim(conn, "w", lease_seconds=30.0)

    response = post(
        worker_endpoint.url + "execute",
        package_json(package_of(found)).encode(),
        token=worker_endpoint.token,
    )

    assert response.status_code == 503
    assert response.json()["code"] == "RUN_TIME_LIMIT"
    assert "WORKER_ENDPOINT_RUN_SECONDS (1.5 s)" in response.json()["detail"]
    assert not gate.gate.is_set()  # answered while the action still held the run
    assert gate.cancelled_seen.wait(DEFAULT_TIMEOUT)  # and the run was told to stop
    assert after.calls == []
    execution = execution_row(conn, accepted.execution_id)
    assert (execution["status"], execution["fencing_token"]) == ("RUNNING", found.fence.token)


def test_remote_runtime__a_run_past_the_endpoints_limit_is_a_remote_timeout(
    conn, make_flow, worker_endpoint
):
    gate = GateAdapter()
    worker_endpoint.serve(registry(binding("A", gate)))
    _, found = claimed(conn, make_flow, gate)
    target = RemoteTarget(url=worker_endpoint.url, token=worker_endpoint.token)
    with on_loop(RemoteWorkerRuntime(target=target, config=FAST)) as runtime:
        error = _dispatch_fails(runtime, found)
    assert "503" in str(error) and "RUN_TIME_LIMIT" in str(error)
    assert gate.cancelled_seen.wait(DEFAULT_TIMEOUT)


def test_remote_runtime__waits_past_one_lease_and_abandons_the_answer_once_told_to_stop(
    conn, make_flow, fake_endpoint
):
    """The read budget is the endpoint's limit (here 30 s), not the 2 s lease; a holder told to
    stop (a lost lease, a cancellation) stops waiting at once and the answer is abandoned."""
    fake_endpoint.plan(EXECUTE, slow(20))
    _, found = claimed(conn, make_flow, ScriptedAdapter())
    target = RemoteTarget(url=fake_endpoint.url("/internal/worker/"), token="w" * 40)
    config = dataclasses.replace(FAST, endpoint_run_seconds=30)
    stop = StopSignal()
    ended: list = []
    with on_loop(RemoteWorkerRuntime(target=target, config=config)) as runtime:
        request = holding_of(found, stop)
        thread = threading.Thread(
            target=lambda: ended.append(dispatch_once(runtime, package_of(found), request))
        )
        thread.start()
        fake_endpoint.wait_for_calls(1, EXECUTE)
        assert ended == []  # still waiting: the endpoint is working
        stop.set()
        thread.join(DEFAULT_TIMEOUT)  # long before the endpoint's 20 s answer
        assert not thread.is_alive()
    assert [result.status for result in ended] == ["interrupted"]
