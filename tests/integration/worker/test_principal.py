"""The principal of a dispatch (SPEC §8, issue item 5): adapters see `sub@tenant` of whoever
caused it (`system` without one), on both runtimes; the endpoint refuses a package whose
principal is not of the request's tenant. Both runtimes: test_runtime_conformance.py."""

import dataclasses
import json
import threading

import pytest

from executions.worker.runtime import WorkerRequest, dispatch_once
from executions.worker.wire import package_json
from tests.support.worker import (
    ScriptedAdapter,
    action,
    binding,
    claim,
    enqueue,
    execution_row,
    ok,
    package_of,
    registry,
    runtime_for,
)

from .test_worker_endpoint import post

pytestmark = pytest.mark.django_db(transaction=True)


def recording():
    seen: list[str | None] = []

    def step(ctx):
        seen.append(ctx.principal)
        return ok()

    return ScriptedAdapter(script=[step]), seen


def _dispatch(runtime, found, principal):
    package = dataclasses.replace(package_of(found), principal=principal)
    return dispatch_once(
        runtime, package, WorkerRequest(fence=found.fence, cancelled=threading.Event())
    )


def test_endpoint__refuses_a_principal_of_another_tenant(conn, make_flow, worker_endpoint):
    adapter, seen = recording()
    worker_endpoint.serve(registry(binding("A", adapter)))
    accepted = enqueue(conn, make_flow([action("a", "A")]), scope="acme")
    (found,) = claim(conn, "w", lease_seconds=30)
    package = dataclasses.replace(
        package_of(found), principal={"subject": "mallory", "tenant": "globex"}
    )

    response = post(
        worker_endpoint.url + "execute", package_json(package).encode(), token=worker_endpoint.token
    )

    assert response.status_code == 400
    assert response.json()["code"] == "INVALID_BODY"
    assert "principal.tenant" in response.json()["detail"]
    assert seen == []
    assert execution_row(conn, accepted.execution_id)["status"] == "RUNNING"  # nothing ran
    assert json.loads(package_json(package))["principal"]["tenant"] == "globex"


def test_local_runtime__runs_as_the_package_principal(conn, make_flow, runtime_dsn):
    adapter, seen = recording()
    enqueue(conn, make_flow([action("a", "A")]))
    (found,) = claim(conn, "w")
    with runtime_for(runtime_dsn, registry(binding("A", adapter))) as runtime:
        _dispatch(runtime, found, {"subject": "bob", "scope": "acme"})
    assert seen == ["bob@acme"]
