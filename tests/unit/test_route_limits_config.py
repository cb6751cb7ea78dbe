"""Route limits in INTEGRATIONS_FILE: `max_in_flight` and `rate_limit` load; a bad value names
the route and the key."""

import pytest

from actions.base import IntegrationConfigError, RouteLimits
from actions.catalog import parse_catalog
from actions.registry import ADAPTERS, SIMULATION_KEYS

LEASE = 60  # seconds


def catalog_of(route_keys: dict):
    document = {
        "contracts": {"p.x@1": {"effect": "READ_ONLY"}},
        "routes": {
            "p.x@1": {"adapter": "http.json", "url": "http://127.0.0.1:9000/x", **route_keys}
        },
    }
    return parse_catalog(
        document, adapters=ADAPTERS, lease_seconds=LEASE, environ={}, reserved=SIMULATION_KEYS
    )


def error_of(route_keys: dict) -> str:
    with pytest.raises(IntegrationConfigError) as caught:
        catalog_of(route_keys)
    return str(caught.value)


def test_limits__none_declared__route_unlimited():
    assert catalog_of({}).routes["p.x@1"].limits is None


@pytest.mark.parametrize(
    ("keys", "expected"),
    [
        ({"max_in_flight": 8}, RouteLimits(max_in_flight=8)),
        ({"rate_limit": "50/s"}, RouteLimits(rate_count=50, rate_window_seconds=1)),
        ({"rate_limit": "600/min"}, RouteLimits(rate_count=600, rate_window_seconds=60)),
        (
            {"max_in_flight": 3, "rate_limit": "1000/h"},
            RouteLimits(max_in_flight=3, rate_count=1000, rate_window_seconds=3600),
        ),
    ],
)
def test_limits__valid__parsed(keys, expected):
    limits = catalog_of(keys).routes["p.x@1"].limits

    assert limits == expected
    if "rate_limit" in keys:
        assert limits.rate_limit == keys["rate_limit"]


@pytest.mark.parametrize(
    ("keys", "key", "why"),
    [
        ({"max_in_flight": 0}, "max_in_flight", "between 1 and"),
        ({"max_in_flight": -3}, "max_in_flight", "between 1 and"),
        ({"max_in_flight": "8"}, "max_in_flight", "must be an integer"),
        ({"max_in_flight": True}, "max_in_flight", "must be an integer"),
        ({"max_in_flight": 1_000_000}, "max_in_flight", "between 1 and"),
        ({"rate_limit": 50}, "rate_limit", '"N/s", "N/min" or "N/h"'),
        ({"rate_limit": "50/sec"}, "rate_limit", '"N/s", "N/min" or "N/h"'),
        ({"rate_limit": "0/s"}, "rate_limit", '"N/s", "N/min" or "N/h"'),
        ({"rate_limit": " 5/s"}, "rate_limit", '"N/s", "N/min" or "N/h"'),
        ({"rate_limit": "5/d"}, "rate_limit", '"N/s", "N/min" or "N/h"'),
        ({"rate_limit": "2000000/h"}, "rate_limit", "at most"),
    ],
)
def test_limits__invalid__names_route_and_key(keys, key, why):
    message = error_of(keys)

    assert message.startswith(f'routes."p.x@1".{key}: ')
    assert why in message
