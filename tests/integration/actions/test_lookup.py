"""Lookup by external key against a real loopback provider
(INTEGRATIONS.md#lookup-by-external-key)."""

import pytest

from actions.lookup import lookup_by_key, supports_lookup
from actions.registry import IntegrationUnavailable
from tests.support.providers import drop, non_json, status

from .conftest import catalog_registry, context, run


def registry_for(provider, *, with_lookup=True, environ=None, headers=None):
    route = {"adapter": "http.json", "url": provider.url("/charges")}
    if with_lookup:
        route["lookup_url"] = provider.url("/charges/by-key/{key}")
    if headers:
        route["headers_from_env"] = headers
    return catalog_registry(
        {
            "contracts": {
                "payments.charge@1": {"effect": "NON_IDEMPOTENT_WRITE", "timeout_seconds": 2}
            },
            "routes": {"payments.charge@1": route},
        },
        environ,
    )


def test_lookup__write_happened__its_output(provider):
    registry = registry_for(provider)
    provider.plan("/charges", drop())  # applied, then the connection dropped
    b = registry.resolve("payments.charge", 1)
    run(b.adapter.call(context(key="e-1:charge"), b))

    result = run(lookup_by_key("payments.charge", 1, "e-1:charge", registry=registry))

    assert result.happened is True
    assert result.output == {"id": "op-1", "status": "done"}
    (asked,) = provider.requests("/charges/by-key/e-1%3Acharge")
    assert asked.method == "GET"


def test_lookup__write_did_not_happen(provider):
    result = run(lookup_by_key("payments.charge", 1, "e-2:charge", registry=registry_for(provider)))

    assert result.happened is False
    assert result.output is None


@pytest.mark.parametrize("reply", [status(500), status(401), non_json(), drop(apply=False)])
def test_lookup__anything_else__settles_nothing(provider, reply):
    provider.plan("/charges/by-key/", reply)

    result = run(lookup_by_key("payments.charge", 1, "e-3:charge", registry=registry_for(provider)))

    assert result.happened is None
    assert "provider-secret-detail" not in result.detail


def test_lookup__sends_the_route_credentials(provider, monkeypatch):
    monkeypatch.setenv("PAYMENTS_AUTH", "Bearer lookup-secret")
    registry = registry_for(
        provider,
        environ={"PAYMENTS_AUTH": "Bearer lookup-secret"},
        headers={"Authorization": "PAYMENTS_AUTH"},
    )

    result = run(lookup_by_key("payments.charge", 1, "e-4:charge", registry=registry))

    assert result.happened is False
    assert provider.requests()[0].headers["authorization"] == "Bearer lookup-secret"
    assert "lookup-secret" not in repr(result)


def test_lookup__no_lookup_url__unavailable(provider):
    registry = registry_for(provider, with_lookup=False)

    with pytest.raises(IntegrationUnavailable):
        run(lookup_by_key("payments.charge", 1, "e-5:charge", registry=registry))
    assert supports_lookup("payments.charge", 1, registry=registry) is False
    assert provider.calls() == 0


def test_lookup__unconfigured_capability__unavailable(provider):
    registry = registry_for(provider)

    with pytest.raises(IntegrationUnavailable):
        run(lookup_by_key("payments.refund", 1, "e-6:refund", registry=registry))
    assert supports_lookup("payments.charge", 1, registry=registry) is True
