"""The trusted, version-aware adapter registry (SPEC §5).

`resolve(capability, version)` returns the `Binding` (contract, route, adapter) that serves an
action, or raises `IntegrationUnavailable` before any call is made. Adapters are registered in
code; contracts and routes come from the trusted catalog (INTEGRATIONS_FILE, empty by default).
Simulation capabilities (NO_OP) resolve only when SIMULATION_MODE is true.

Tests that need adapters of their own install a registry with `use_registry`.
"""

import contextlib
import threading
from collections.abc import Iterator

from django.conf import settings

from .base import ActionContext, ActionResult, Adapter, Binding, Contract, Outcome, Route


class IntegrationUnavailable(Exception):
    """No contract or route (or a refused simulation capability) for `capability@version`."""

    def __init__(self, capability: str, version: int, reason: str) -> None:
        self.capability, self.version, self.reason = capability, version, reason
        super().__init__(f"{capability}@{version}: {reason}")


class NoOpAdapter:
    """The simulation capability NO_OP@1: READ_ONLY, output {}."""

    name = "simulation.noop"
    fixed_effect = "READ_ONLY"

    def call(self, ctx: ActionContext, binding: Binding) -> ActionResult:
        return ActionResult(outcome=Outcome.SUCCEEDED, output={})


NO_OP = Binding(
    contract=Contract(capability="NO_OP", version=1, effect="READ_ONLY", max_attempts=1),
    route=Route(capability="NO_OP", version=1, adapter=NoOpAdapter.name),
    adapter=NoOpAdapter(),
)


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


def build_registry() -> Registry:
    """The registry for this process: trusted catalog plus, in simulation mode, NO_OP."""
    return Registry({}, simulation={"NO_OP@1": NO_OP}, simulation_mode=settings.SIMULATION_MODE)


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


__all__ = ["Adapter", "Binding", "IntegrationUnavailable", "Registry", "get_registry", "resolve"]
