"""Lookup by external key: ask the provider whether a write happened
(INTEGRATIONS.md#lookup-by-external-key, RECONCILIATION.md).

Reconciliation calls `lookup_by_key` to gather evidence about an uncertain write. The answer
never settles anything by itself; an operator decides, and the output they record is validated
again. Nothing here touches the database. It is a coroutine, like the adapters' calls: the
operators' services and the prober run it through actions/blocking.py.
"""

from .base import Binding, LookupAdapter, LookupResult
from .registry import IntegrationUnavailable, Registry, get_registry


def _lookup_adapter(binding: Binding) -> LookupAdapter | None:
    """The binding's adapter when it can look a write up on this route (a `lookup_url`)."""
    adapter = binding.adapter
    if isinstance(adapter, LookupAdapter) and binding.route.options.get("lookup_url"):
        return adapter
    return None


def binding_has_lookup(binding: Binding) -> bool:
    """Whether this binding's route can be asked about a write by key (a compensation that is a
    NON_IDEMPOTENT_WRITE needs it: docs/flow-format.md#compensation)."""
    return _lookup_adapter(binding) is not None


async def lookup_by_key(
    capability: str, version: int, external_key: str, *, registry: Registry | None = None
) -> LookupResult:
    """What the provider says about the write with `external_key`.

    Raises IntegrationUnavailable when the capability is not configured, or its adapter or route
    offers no lookup (for http.json: no `lookup_url`). A `happened=True` answer carries the
    provider's record as `output`, not yet validated: the caller checks it against the
    contract's output schema before anyone may record it.
    """
    binding = (registry or get_registry()).resolve(capability, version)
    adapter = _lookup_adapter(binding)
    if adapter is None:
        raise IntegrationUnavailable(capability, version, "no lookup by key is configured")
    return await adapter.lookup(external_key, binding)


def supports_lookup(capability: str, version: int, *, registry: Registry | None = None) -> bool:
    """Whether `lookup_by_key` can ask about this capability (for showing the option at all)."""
    try:
        binding = (registry or get_registry()).resolve(capability, version)
    except IntegrationUnavailable:
        return False
    return _lookup_adapter(binding) is not None
