"""Fixtures for the adapter tests: loopback providers, bindings built through the real catalog,
and the event loop the adapters' coroutines run on."""

from collections.abc import Coroutine, Iterator
from typing import Any, TypeVar

import pytest

from actions.base import ActionContext, Binding
from actions.blocking import BlockingRunner
from actions.catalog import parse_catalog
from actions.registry import ADAPTERS, Registry
from tests.support.providers import DocumentStore, JsonProvider

LEASE_SECONDS = 60  # seconds
T = TypeVar("T")

_runner: BlockingRunner | None = None


@pytest.fixture(autouse=True)
def event_loop_runner() -> Iterator[BlockingRunner]:
    """One event loop for the whole test, as a worker process has one: its calls share the HTTP
    session. Closing it closes the session, so pooled connections to servers that are about to
    stop do not leak sockets."""
    global _runner
    with BlockingRunner() as runner:
        _runner = runner
        try:
            yield runner
        finally:
            _runner = None


def run(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run an adapter's coroutine to its end on the test's event loop."""
    assert _runner is not None, "the event_loop_runner fixture is not active"
    return _runner.run(coroutine)


@pytest.fixture
def provider() -> Iterator[JsonProvider]:
    with JsonProvider() as server:
        yield server


@pytest.fixture
def store() -> Iterator[DocumentStore]:
    with DocumentStore() as server:
        yield server


def catalog_registry(document: dict[str, Any], environ: dict[str, str] | None = None) -> Registry:
    catalog = parse_catalog(
        document, adapters=ADAPTERS, lease_seconds=LEASE_SECONDS, environ=environ or {}
    )
    return Registry(
        {
            key: Binding(catalog.contracts[key], route, ADAPTERS[route.adapter])
            for key, route in catalog.routes.items()
        }
    )


def binding(
    capability: str = "provider.write",
    *,
    effect: str = "NON_IDEMPOTENT_WRITE",
    timeout: float = 2.0,
    environ: dict[str, str] | None = None,
    output_schema: dict[str, Any] | None = None,
    **route: Any,
) -> Binding:
    """One capability@1 configured through the catalog, as INTEGRATIONS_FILE would."""
    contract: dict[str, Any] = {"effect": effect, "timeout_seconds": timeout}
    if output_schema is not None:
        contract["output_schema"] = output_schema
    route.setdefault("adapter", "http.json")
    document = {"contracts": {f"{capability}@1": contract}, "routes": {f"{capability}@1": route}}
    return catalog_registry(document, environ).resolve(capability, 1)


def context(
    data: dict[str, Any] | None = None, *, key: str = "exec-1:charge", attempt: int = 1
) -> ActionContext:
    execution_id, _, action_id = key.partition(":")
    return ActionContext(
        input={"amount": 10} if data is None else data,
        request_id="req-1",
        execution_id=execution_id,
        action_id=action_id,
        owner="alice",
        scope="acme",
        external_key=key,
        attempt=attempt,
    )
