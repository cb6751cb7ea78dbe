"""Route limits in INTEGRATIONS_FILE: `max_in_flight = N` and `rate_limit = "N/s" | "N/min" |
"N/h"` under `[routes."cap@ver"]` (INTEGRATIONS.md#flow-control).

Validated when the catalog loads, like every key: a bad value is an `IntegrationConfigError`
naming the route and the key. Enforcement is the worker's (executions/queue/limits.py).
"""

import re
from collections.abc import Mapping
from typing import Any

from .base import IntegrationConfigError, RouteLimits
from .options import integer, show_value

LIMIT_KEYS = ("max_in_flight", "rate_limit")
MAX_IN_FLIGHT_LIMIT = 100_000  # calls at once: far beyond any worker fleet
MAX_RATE_COUNT = 1_000_000  # calls per window
RATE_WINDOWS = {"s": 1, "min": 60, "h": 3600}  # seconds per unit
_RATE = re.compile(r"(?P<count>[1-9][0-9]{0,6})/(?P<unit>s|min|h)")


def limits_parse(key: str, table: Mapping[str, Any]) -> RouteLimits | None:
    """The limits of the route at `key`; None when it declares neither."""
    if not any(name in table for name in LIMIT_KEYS):
        return None
    max_in_flight = None
    if "max_in_flight" in table:
        max_in_flight = integer(minimum=1, maximum=MAX_IN_FLIGHT_LIMIT)(
            f"{key}.max_in_flight", table["max_in_flight"]
        )
    count = window = None
    if "rate_limit" in table:
        count, window = _rate(f"{key}.rate_limit", table["rate_limit"])
    return RouteLimits(max_in_flight=max_in_flight, rate_count=count, rate_window_seconds=window)


def _rate(key: str, value: Any) -> tuple[int, int]:
    match = _RATE.fullmatch(value) if isinstance(value, str) else None
    if match is None:
        raise IntegrationConfigError(
            key, f'must be written "N/s", "N/min" or "N/h" (N from 1), got {show_value(value)}'
        )
    count = int(match["count"])
    if count > MAX_RATE_COUNT:
        raise IntegrationConfigError(key, f"must allow at most {MAX_RATE_COUNT} calls per window")
    return count, RATE_WINDOWS[match["unit"]]
