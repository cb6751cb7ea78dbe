"""The principal of a dispatch (docs/worker-protocol.md#runtime-spi): adapters see
`sub@tenant` of whoever caused it (`system` without one), on both runtimes; the endpoint refuses a
package whose principal is not of the request's tenant. Both runtimes: test_runtime_conformance.py.

Who caused it: the accepting caller for the first dispatch, the resuming caller after a resume,
`system` after a timeout or a takeover of an expired lease; a scheduled retry keeps the
principal of the dispatch that scheduled it. The audit rows each dispatch writes name it."""

import dataclasses
import json

import pytest

from executions.api.resumes import execution_resume
from executions.worker.wire import package_json
from orquestador.auth import EXECUTIONS_RESUME, Principal
from tests.integration.actions.conftest import catalog_registry
from tests.support.providers import JsonProvider, status
from tests.support.worker import (
    ScriptedAdapter,
    action,
    audit_events,
    binding,
    claim,
    dispatch_once,
    enqueue,
    execution_row,
    expire_lease,
    holding_of,
    ok,
    package_of,
    registry,
    running_scheduler,
    runtime_for,
    status_of,
    wait_until,
)

from .test_waits import wait as approval
from .test_worker_endpoint import post

pytestmark = pytest.mark.django_db(transaction=True)


def recording():
    seen: list[str | None] = []

    def step(ctx):
        seen.append(ctx.principal)
        return ok()

    return ScriptedAdapter(script=[step]), seen


def _dispatch(runtime, found, principal):
    package = package_of(dataclasses.replace(found, principal=principal))
    return dispatch_once(runtime, package, holding_of(found))


def test_endpoint__refuses_a_principal_of_another_tenant(conn, make_flow, worker_endpoint):
    adapter, seen = recording()
    worker_endpoint.serve(registry(binding("A", adapter)))
    accepted = enqueue(conn, make_flow([action("a", "A")]), scope="acme")
    (found,) = claim(conn, "w", lease_seconds=30)
    package = package_of(
        dataclasses.replace(found, principal={"subject": "mallory", "tenant": "globex"})
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


# -- who caused the dispatch, end to end: scheduler -> package -> adapter -> provider ----------
MARIA = Principal(subject="maria", tenant="acme", permissions=frozenset({EXECUTIONS_RESUME}))
HEADER = "x-on-behalf-of"


def http_registry(provider):
    """quote@1 (READ_ONLY) and charge@1 (IDEMPOTENT_WRITE), both forwarding the principal."""
    contract = {"timeout_seconds": 2, "max_attempts": 3}
    route = {"adapter": "http.json", "principal_header": "X-On-Behalf-Of"}
    return catalog_registry(
        {
            "contracts": {
                "quote@1": {**contract, "effect": "READ_ONLY"},
                "charge@1": {**contract, "effect": "IDEMPOTENT_WRITE"},
            },
            "routes": {
                "quote@1": {**route, "url": provider.url("/quote")},
                "charge@1": {**route, "url": provider.url("/charge")},
            },
        }
    )


def on_behalf(provider, path: str) -> list[str | None]:
    return [r.headers.get(HEADER) for r in provider.requests(path)]


def principals(conn, request_id) -> dict[str, list]:
    found: dict[str, list] = {}
    for kind, payload in audit_events(conn, request_id):
        found.setdefault(kind, []).append(payload.get("principal"))
    return found


@pytest.fixture
def provider():
    with JsonProvider() as server:
        yield server


def test_resume__the_dispatch_after_it_runs_for_the_resumer(conn, make_flow, runtime_dsn, provider):
    flow_id = make_flow([action("quote", "quote"), approval(), action("charge", "charge")])
    with running_scheduler(runtime_dsn, http_registry(provider)):
        accepted = enqueue(conn, flow_id, owner="alice", scope="acme")
        wait_until(lambda: status_of(conn, accepted.execution_id) == "SUSPENDED")
        execution_resume(
            principal=MARIA,
            execution_id=str(accepted.execution_id),
            event_id="e-1",
            event="manager.approval",
            payload={"approved": True},
        )
        wait_until(lambda: status_of(conn, accepted.execution_id) == "SUCCEEDED")

    assert on_behalf(provider, "/quote") == ["alice@acme"]  # the accepting caller's dispatch
    assert on_behalf(provider, "/charge") == ["maria@acme"]  # the resumer's, not the owner's
    audit = principals(conn, accepted.request_id)
    assert audit["EXECUTION_SUSPENDED"] == ["alice@acme"]
    assert audit["EXECUTION_RESUMED"] == ["maria@acme"]
    assert audit["TRANSITION_COMPLETED"] == ["maria@acme"]


def test_timeout__the_dispatch_that_settles_it_runs_as_system(
    conn, make_flow, runtime_dsn, provider
):
    flow_id = make_flow(
        [approval(timeout=1, onTimeout={"payload": {"approved": False}}), action("c", "charge")]
    )
    with running_scheduler(runtime_dsn, http_registry(provider)):
        accepted = enqueue(conn, flow_id, owner="alice", scope="acme")
        wait_until(lambda: status_of(conn, accepted.execution_id) == "SUCCEEDED")

    assert on_behalf(provider, "/charge") == ["system"]
    audit = principals(conn, accepted.request_id)
    assert audit["EXECUTION_SUSPENDED"] == ["alice@acme"]
    assert audit["EXECUTION_RESUMED"] == ["system"]  # timed out: nobody resumed it
    assert audit["TRANSITION_COMPLETED"] == ["system"]


def test_reclaim__recovery_after_an_expired_lease_runs_as_system(
    conn, make_flow, runtime_dsn, provider
):
    accepted = enqueue(conn, make_flow([action("quote", "quote")]), owner="alice", scope="acme")
    (dead,) = claim(conn, "a-worker-that-died", lease_seconds=0.5)
    assert dead.principal == {"subject": "alice", "tenant": "acme"}  # the first dispatch's
    expire_lease(conn, accepted.execution_id)
    with running_scheduler(runtime_dsn, http_registry(provider)):
        wait_until(lambda: status_of(conn, accepted.execution_id) == "SUCCEEDED")

    assert on_behalf(provider, "/quote") == ["system"]
    assert principals(conn, accepted.request_id)["TRANSITION_COMPLETED"] == ["system"]
    assert execution_row(conn, accepted.execution_id)["dispatch_principal"] is None


def test_retry__a_scheduled_retry_runs_for_the_principal_whose_dispatch_scheduled_it(
    conn, make_flow, runtime_dsn, provider
):
    provider.plan("/quote", status(503))
    flow_id = make_flow([action("quote", "quote")])
    with running_scheduler(runtime_dsn, http_registry(provider)):
        accepted = enqueue(conn, flow_id, owner="alice", scope="acme")
        wait_until(lambda: status_of(conn, accepted.execution_id) == "SUCCEEDED")

    assert on_behalf(provider, "/quote") == ["alice@acme", "alice@acme"]
    audit = principals(conn, accepted.request_id)
    assert audit["RETRY_SCHEDULED"] == ["alice@acme"]
    assert audit["TRANSITION_COMPLETED"] == ["alice@acme"]
