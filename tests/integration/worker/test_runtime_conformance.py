"""The WorkerRuntime SPI (docs/worker-protocol.md#runtime-spi): one conformance suite that every
runtime must pass.

Runtimes are listed in RUNTIMES; each factory returns an opened runtime for a registry. The
remote one talks real HTTP to the worker endpoint served by live_server on 127.0.0.1, which runs
packages through a local runtime on the same registry.
"""

import dataclasses
import json
import threading
import uuid

import psycopg
import pytest

from actions.base import ActionResult, Outcome
from executions.api.resumes import execution_resume
from executions.queue.claims import Dispatch
from executions.queue.leases import ExecutionSuperseded, Fence
from executions.worker import runtime as worker_runtime
from executions.worker.remote import RemoteTarget, RemoteWorkerRuntime
from executions.worker.runtime import LocalWorkerRuntime, is_superseded_refusal
from executions.worker.wire import ExecutionPackage, package_json, package_read
from orquestador.auth import EXECUTIONS_RESUME, Principal
from tests.support.loop import on_loop
from tests.support.worker import (
    FAST,
    GateAdapter,
    ScriptedAdapter,
    action,
    binding,
    checkpoint_rows,
    claim,
    dispatch_once,
    enqueue,
    execution_row,
    holding_of,
    package_of,
    permanent,
    registry,
    request_row,
    runtime_for,
    transient,
    unknown,
)

pytestmark = pytest.mark.django_db(transaction=True)


# The dispatcher side of the remote runtime: a lease renewed while it waits (the endpoint's limit,
# FAST's 1.5 s, plus a 5 s renewal period).
REMOTE_CONFIG = dataclasses.replace(FAST, lease_seconds=20.0, renew_seconds=5.0)


def _local(dsn, reg, endpoint):
    return runtime_for(dsn, reg)


def _remote(dsn, reg, endpoint):
    endpoint.serve(reg)
    target = RemoteTarget(url=endpoint.url, token=endpoint.token)
    return on_loop(RemoteWorkerRuntime(target=target, config=REMOTE_CONFIG))


RUNTIMES = {"local": _local, "remote": _remote}


@pytest.fixture(params=sorted(RUNTIMES))
def make_runtime(request, runtime_dsn):
    opened = []
    endpoint = request.getfixturevalue("worker_endpoint") if request.param == "remote" else None

    def make(reg):
        runtime = RUNTIMES[request.param](runtime_dsn, reg, endpoint)
        opened.append(runtime)
        return runtime

    yield make
    for runtime in opened:
        runtime.close()


def _dispatch(runtime, found, cancelled=None, resume_event=None):
    return dispatch_once(
        runtime,
        dataclasses.replace(package_of(found), resume_event=resume_event),
        holding_of(found, cancelled),
    )


def test_runtime__completes_with_the_folded_state(conn, make_flow, make_runtime):
    runtime = make_runtime(registry())
    accepted = enqueue(conn, make_flow([action("a", "NO_OP")]))
    (found,) = claim(conn, "w")
    result = _dispatch(runtime, found)
    assert result.execution_id == accepted.execution_id
    assert result.status == "completed"
    assert result.execution_status == "SUCCEEDED"
    assert result.state["executionStatus"] == "SUCCEEDED"
    assert result.output == {"outcome": "OK", "targetState": "DONE"}


@pytest.mark.parametrize(
    ("step", "status", "execution_status"),
    # A retry is not a wait: `failed`, with the folded state saying RETRY_WAIT.
    [(permanent(), "failed", "FAILED"), (transient(), "failed", "RETRY_WAIT")],
)
def test_runtime__reports_failed_with_the_folded_state(
    conn, make_flow, make_runtime, step, status, execution_status
):
    runtime = make_runtime(registry(binding("A", ScriptedAdapter(script=[step]))))
    enqueue(conn, make_flow([action("a", "A")]))
    (found,) = claim(conn, "w")
    result = _dispatch(runtime, found)
    assert (result.status, result.execution_status) == (status, execution_status)
    assert result.state["executionStatus"] == execution_status


def test_runtime__a_stale_fence_is_a_superseded_refusal_settled_not_retried(
    conn, make_flow, make_runtime
):
    adapter = ScriptedAdapter()
    runtime = make_runtime(registry(binding("A", adapter)))
    accepted = enqueue(conn, make_flow([action("a", "A")]))
    (found,) = claim(conn, "w")
    conn.execute(  # another holder took it over
        "UPDATE execution SET fencing_token = fencing_token + 1 WHERE id = %s",
        [accepted.execution_id],
    )
    assert _dispatch(runtime, found).status == "superseded"
    assert adapter.calls == []
    assert execution_row(conn, accepted.execution_id)["fencing_token"] == found.fence.token + 1


def test_runtime__cancel_reaches_only_the_exact_holder(conn, make_flow, make_runtime):
    gate = GateAdapter()
    runtime = make_runtime(registry(binding("G", gate)))
    enqueue(conn, make_flow([action("a", "G")]))
    (found,) = claim(conn, "w")
    cancelled = threading.Event()
    outcome = {}
    thread = threading.Thread(
        target=lambda: outcome.update(r=_dispatch(runtime, found, cancelled=cancelled))
    )
    thread.start()
    assert gate.entered.wait(10)
    assert runtime.cancel(str(found.execution_id), "test", token=found.fence.token + 1) is False
    assert not cancelled.is_set()
    assert runtime.cancel(str(found.execution_id), "test", token=found.fence.token) is True
    thread.join(10)
    assert cancelled.is_set() and gate.cancelled_seen.is_set()
    assert outcome["r"].status == "interrupted"  # stopped without writing; recovered by lease
    assert runtime.cancel(str(found.execution_id), "after") is False  # released


# The dispatcher's way with a local runtime (runtime.dispatch_held): the slot's holding run as it
# is, no package and no reservation, refused and cancelled by the same rules as a package.
def _held(runtime, holding):
    return runtime.run(worker_runtime.dispatch_held(runtime.target, holding))


def test_dispatch_held__a_local_runtime_runs_the_holding_as_it_is(conn, make_flow, runtime_dsn):
    accepted = enqueue(conn, make_flow([action("a", "NO_OP")]))
    (found,) = claim(conn, "w")
    conn.execute(  # the run goes by the claim's snapshot, which it does not read again
        "UPDATE request SET data = '{\"changed\": true}' WHERE id = %s", [accepted.request_id]
    )
    with runtime_for(runtime_dsn, registry()) as runtime:
        result = _held(runtime, holding_of(found))

    assert result.dispatch is found
    assert (result.status, result.execution_status) == ("completed", "SUCCEEDED")
    assert request_row(conn, accepted.request_id)["data"] == {"done": True}


def test_dispatch_held__a_stale_fence_is_a_superseded_refusal_settled(conn, make_flow, runtime_dsn):
    adapter = ScriptedAdapter()
    accepted = enqueue(conn, make_flow([action("a", "A")]))
    (found,) = claim(conn, "w")
    conn.execute(  # another holder took it over
        "UPDATE execution SET fencing_token = fencing_token + 1 WHERE id = %s",
        [accepted.execution_id],
    )
    with runtime_for(runtime_dsn, registry(binding("A", adapter))) as runtime:
        assert _held(runtime, holding_of(found)).status == "superseded"
    assert adapter.calls == []


def test_dispatch_held__a_cancel_reaches_only_the_exact_holder(conn, make_flow, runtime_dsn):
    gate = GateAdapter()
    enqueue(conn, make_flow([action("a", "G")]))
    (found,) = claim(conn, "w")
    holding = holding_of(found)
    outcome = {}
    with runtime_for(runtime_dsn, registry(binding("G", gate))) as runtime:
        thread = threading.Thread(target=lambda: outcome.update(r=_held(runtime, holding)))
        thread.start()
        assert gate.entered.wait(10)
        execution_id = str(found.execution_id)
        assert runtime.cancel(execution_id, "test", token=found.fence.token + 1) is False
        assert not holding.cancelled.is_set()
        assert runtime.cancel(execution_id, "test", token=found.fence.token) is True
        thread.join(10)
        assert holding.cancelled.is_set() and gate.cancelled_seen.is_set()
        assert outcome["r"].status == "interrupted"
        assert runtime.cancel(execution_id, "after") is False  # no longer held there


def test_package__is_json_with_identity_and_resume_coordinates_only():
    dispatch = Dispatch(
        fence=Fence(
            uuid.UUID("3f1c1f5e-4b4e-4f57-9b0e-0d3c7b1a2c9d"),
            uuid.UUID("9a7d2c44-5c1b-4f7e-8a31-2f5e8d3b6a10"),
            7,
            "host:1:abc",
        ),
        flow_id=4,
        transition_id="go",
        attempts=2,
        principal={"subject": "alice", "tenant": "acme"},
    )
    package = ExecutionPackage(dispatch)
    text = package_json(package)
    # The public field names (docs/worker-protocol.md#runtime-spi), written out rather than taken
    # from wire.py: this pins them.
    assert set(json.loads(text)) == {
        "formatVersion",
        "executionId",
        "requestId",
        "flowId",
        "transitionId",
        "fencingToken",
        "leaseOwner",
        "attempts",
        "principal",
        "resumeEvent",
        "metadata",
    }
    assert json.loads(text)["fencingToken"] == 7
    assert package_read(json.loads(text)) == package


def test_superseded_refusal__names_its_own_execution_only():
    refusal = ExecutionSuperseded("3f1c1f5e-4b4e-4f57-9b0e-0d3c7b1a2c9d", step="save a", token=3)
    assert is_superseded_refusal(refusal, "3f1c1f5e-4b4e-4f57-9b0e-0d3c7b1a2c9d")
    assert not is_superseded_refusal(refusal, "9a7d2c44-5c1b-4f7e-8a31-2f5e8d3b6a10")
    assert not is_superseded_refusal(RuntimeError("x"), "3f1c1f5e-4b4e-4f57-9b0e-0d3c7b1a2c9d")


def test_local_runtime__runs_as_the_system_identity():
    assert LocalWorkerRuntime.runs_as_system is True


WAIT = {
    "id": "approval",
    "wait": {
        "event": "manager.approval",
        "payloadSchema": {"type": "object"},
        "timeoutSeconds": 60,
    },
}


def test_runtime__suspends_on_a_wait_then_resumes_from_its_checkpoints(
    conn, make_flow, make_runtime
):
    adapter = ScriptedAdapter()
    runtime = make_runtime(registry(binding("A", adapter)))
    accepted = enqueue(conn, make_flow([action("a", "A"), WAIT]))
    (found,) = claim(conn, "w")

    suspended = _dispatch(runtime, found)

    assert (suspended.status, suspended.execution_status) == ("suspended", "SUSPENDED")
    assert suspended.suspended_on["actionId"] == "approval"
    assert suspended.suspended_on["event"] == "manager.approval"
    assert suspended.suspended_on["deadline"]
    execution_resume(
        principal=Principal("maria", "acme", frozenset({EXECUTIONS_RESUME})),
        execution_id=str(accepted.execution_id),
        event_id="e",
        event="manager.approval",
        payload={"ok": True},
    )
    (again,) = claim(conn, "w")
    # A resume dispatch says which event it runs for; both runtimes accept it.
    completed = _dispatch(
        runtime, again, resume_event={"eventId": "e", "event": "manager.approval"}
    )
    assert (completed.status, completed.execution_status) == ("completed", "SUCCEEDED")
    assert len(adapter.calls) == 1  # the earlier action was not repeated


def test_runtime__the_dispatch_after_a_resume_runs_for_the_resumer(conn, make_flow, make_runtime):
    """The owner accepted it; another user of the tenant resumed it: the claim after the resume
    carries the resumer, and the adapter (and through a route's principal_header, the provider)
    sees them, on both runtimes (the endpoint accepts a principal of the request's tenant)."""
    adapter, seen = _recording()
    runtime = make_runtime(registry(binding("A", adapter)))
    accepted = enqueue(conn, make_flow([WAIT, action("a", "A")]), owner="alice", scope="acme")
    (found,) = claim(conn, "w")
    assert _dispatch(runtime, found).status == "suspended"
    execution_resume(
        principal=Principal("maria", "acme", frozenset({EXECUTIONS_RESUME})),
        execution_id=str(accepted.execution_id),
        event_id="e",
        event="manager.approval",
        payload={},
    )
    (again,) = claim(conn, "w")
    assert again.principal["subject"] == "maria"
    assert _dispatch(runtime, again).status == "completed"
    assert seen == ["maria@acme"]


def _recording():
    seen: list[str | None] = []

    def step(ctx):
        seen.append(ctx.principal)
        return ActionResult(outcome=Outcome.SUCCEEDED, output={})

    return ScriptedAdapter(script=[step]), seen


def _dispatch_as(runtime, found, principal):
    package = package_of(dataclasses.replace(found, principal=principal))
    return dispatch_once(runtime, package, holding_of(found))


@pytest.mark.parametrize(
    ("principal", "expected"),
    [
        ({"subject": "alice", "scope": "acme", "roles": ["requests:write"]}, "alice@acme"),
        ({"subject": "maria", "tenant": "acme"}, "maria@acme"),
        (None, "system"),
    ],
)
def test_runtime__the_package_principal_reaches_the_adapter(
    conn, make_flow, make_runtime, principal, expected
):
    adapter, seen = _recording()
    runtime = make_runtime(registry(binding("A", adapter)))
    enqueue(conn, make_flow([action("a", "A")]))
    (found,) = claim(conn, "w")

    assert _dispatch_as(runtime, found, principal).status == "completed"

    assert seen == [expected]


def test_runtime__reconciliation_is_a_failed_result_with_its_folded_state(
    conn, make_flow, make_runtime
):
    runtime = make_runtime(
        registry(binding("W", ScriptedAdapter(script=[unknown()]), effect="NON_IDEMPOTENT_WRITE"))
    )
    accepted = enqueue(conn, make_flow([action("w", "W")]))
    (found,) = claim(conn, "w")

    result = _dispatch(runtime, found)

    assert (result.status, result.execution_status) == ("failed", "RECONCILIATION_REQUIRED")
    assert result.state["errorCode"] == "UNCERTAIN_WRITE"
    assert result.error == {"code": "UNCERTAIN_WRITE"}
    assert execution_row(conn, accepted.execution_id)["status"] == "RECONCILIATION_REQUIRED"


def test_runtime__a_lease_lost_mid_run_is_superseded_and_writes_nothing_more(
    conn, make_flow, make_runtime, runtime_dsn
):
    def taken_over(ctx):
        # Another holder takes the execution while the provider is being called.
        with psycopg.connect(runtime_dsn, autocommit=True) as other:
            other.execute(
                "UPDATE execution SET fencing_token = fencing_token + 1 WHERE id = %s",
                [ctx.execution_id],
            )
        return ActionResult(outcome=Outcome.SUCCEEDED, output={"late": True})

    runtime = make_runtime(registry(binding("A", ScriptedAdapter(script=[taken_over]))))
    accepted = enqueue(conn, make_flow([action("a", "A")]))
    (found,) = claim(conn, "w")

    assert _dispatch(runtime, found).status == "superseded"

    # The read's start committed before its call; nothing after the call was written.
    checkpoint = checkpoint_rows(conn, accepted.execution_id)["a"]
    assert (checkpoint["status"], checkpoint["output"]) == ("RUNNING", None)
    assert execution_row(conn, accepted.execution_id)["fencing_token"] == found.fence.token + 1


def test_runtime__a_run_that_raises_releases_its_lease(conn, make_flow, make_runtime):
    def unstorable(ctx):
        # An output that cannot be stored: the run raises while saving it (a fault of ours).
        return ActionResult(outcome=Outcome.SUCCEEDED, output={"x": {1, 2}})

    runtime = make_runtime(registry(binding("A", ScriptedAdapter(script=[unstorable]))))
    enqueue(conn, make_flow([action("a", "A")]))
    (found,) = claim(conn, "w")

    with pytest.raises(Exception):  # noqa: B017 (local: the fault itself; remote: a 500)
        _dispatch(runtime, found)

    # The lease is released even so: a cancel finds no holder left in this runtime.
    assert runtime.cancel(str(found.execution_id), "after", token=found.fence.token) is False
