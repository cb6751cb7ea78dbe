"""The trusted, version-aware adapter registry (INTEGRATIONS.md).

`resolve(capability, version)` returns the `Binding` (contract, route, adapter) that serves an
action, or raises `IntegrationUnavailable` before any call. Adapters are registered in code,
contracts and routes come from the catalog (INTEGRATIONS_FILE); NO_OP resolves only when
SIMULATION_MODE is true. The process registry is built once (`load_registry()`, at the worker's
start, so a bad file stops it naming the TOML key); tests install their own with `use_registry`.
"""

import contextlib
import threading
from collections.abc import Iterator

from django.conf import settings

from orquestador.workerconfig import WorkerConfig, worker_tunables

from .base import (
    ActionContext,
    ActionResult,
    Adapter,
    Binding,
    Contract,
    IntegrationConfigError,
    Outcome,
    RoutableAdapter,
    Route,
)
from .catalog import Catalog, load_catalog
from .documents import DocumentsVerifyAdapter
from .http_json import HttpJsonAdapter
from .simulation import SIMULATION_BINDINGS

# The trusted adapters a route in INTEGRATIONS_FILE may name. Simulation adapters are not here:
# they are never routable, and resolve only in simulation mode.
ADAPTERS: dict[str, RoutableAdapter] = {
    adapter.name: adapter for adapter in (HttpJsonAdapter(), DocumentsVerifyAdapter())
}


class IntegrationUnavailable(Exception):
    """No contract or route (or a refused simulation capability) for `capability@version`."""

    def __init__(self, capability: str, version: int, reason: str) -> None:
        self.capability, self.version, self.reason = capability, version, reason
        super().__init__(f"{capability}@{version}: {reason}")


class NoOpAdapter:
    """The simulation capability NO_OP@1: READ_ONLY, output {}."""

    name = "simulation.noop"
    fixed_effect = "READ_ONLY"

    async def call(self, ctx: ActionContext, binding: Binding) -> ActionResult:
        return ActionResult(outcome=Outcome.SUCCEEDED, output={})


NO_OP = Binding(
    contract=Contract(capability="NO_OP", version=1, effect="READ_ONLY", max_attempts=1),
    route=Route(capability="NO_OP", version=1, adapter=NoOpAdapter.name),
    adapter=NoOpAdapter(),
)

# Names of the simulation capabilities: the catalog may not configure them.
SIMULATION_KEYS = frozenset({"NO_OP@1", *SIMULATION_BINDINGS})


class Registry:
    def __init__(
        self,
        bindings: dict[str, Binding] | None = None,
        *,
        simulation: dict[str, Binding] | None = None,
        simulation_mode: bool = False,
    ) -> None:
        self._bindings = dict(bindings or {})
        self._simulation = dict(simulation or {})
        self.simulation_mode = simulation_mode

    def resolve(self, capability: str, version: int) -> Binding:
        key = f"{capability}@{version}"
        if key in self._simulation:
            if not self.simulation_mode:
                raise IntegrationUnavailable(
                    capability, version, "simulation capability refused: SIMULATION_MODE is off"
                )
            return self._simulation[key]
        binding = self._bindings.get(key)
        if binding is None:
            raise IntegrationUnavailable(capability, version, "no contract or route configured")
        return binding

    def keys(self) -> list[str]:
        return sorted(self._bindings)

    def routes(self) -> list[Route]:
        """The configured routes (their limits are declared when a worker starts)."""
        return [self._bindings[key].route for key in sorted(self._bindings)]


def load_configured_catalog(config: WorkerConfig | None = None) -> Catalog:
    """The catalog from INTEGRATIONS_FILE (empty when unset), validated; adapter timeouts are
    bounded by the lease of `config` (the validated WORKER_* settings when None, which raises
    WorkerConfigError naming a bad variable)."""
    config = config or worker_tunables(settings.WORKER_ENV)
    return load_catalog(
        settings.INTEGRATIONS_FILE or None,
        adapters=ADAPTERS,
        lease_seconds=config.lease_seconds,
        reserved=SIMULATION_KEYS,
    )


def build_registry(
    catalog: Catalog | None = None, *, config: WorkerConfig | None = None
) -> Registry:
    """The registry for this process: trusted catalog plus, in simulation mode, NO_OP.

    Raises IntegrationConfigError when INTEGRATIONS_FILE is not acceptable.
    """
    if catalog is None:
        catalog = load_configured_catalog(config)
    bindings = {
        key: Binding(contract=catalog.contracts[key], route=route, adapter=ADAPTERS[route.adapter])
        for key, route in catalog.routes.items()
    }
    return Registry(
        bindings,
        simulation={"NO_OP@1": NO_OP, **SIMULATION_BINDINGS},
        simulation_mode=settings.SIMULATION_MODE,
    )


def load_registry(config: WorkerConfig | None = None) -> Registry:
    """Validate INTEGRATIONS_FILE and install the process registry (the worker calls this at start
    with its validated configuration).

    Raises IntegrationConfigError, whose message names the TOML key at fault.
    """
    global _current
    registry = build_registry(config=config)
    with _lock:
        _current = registry
    return registry


_lock = threading.Lock()
_current: Registry | None = None


def get_registry() -> Registry:
    global _current
    with _lock:
        if _current is None:
            _current = build_registry()
        return _current


def resolve(capability: str, version: int) -> Binding:
    return get_registry().resolve(capability, version)


@contextlib.contextmanager
def use_registry(registry: Registry) -> Iterator[Registry]:
    """Install `registry` for this process for the duration of the block (tests)."""
    global _current
    with _lock:
        previous, _current = _current, registry
    try:
        yield registry
    finally:
        with _lock:
            _current = previous


__all__ = [
    "Adapter",
    "Binding",
    "IntegrationConfigError",
    "IntegrationUnavailable",
    "Registry",
    "build_registry",
    "get_registry",
    "load_registry",
    "resolve",
    "use_registry",
]
