"""The trusted integration catalog: contracts and routes from INTEGRATIONS_FILE (INTEGRATIONS.md).

The file is read and validated once, when a process starts; the first problem stops it with an
`IntegrationConfigError` naming the TOML key (`contracts."payments.charge@1".effect`) and why. No
file means an empty catalog. This module reads the file and its contracts; routes are routes.py's.
Every contract needs a route and every route a contract; schemas an adapter declares in code are
part of every contract it serves (a contract's own are added with allOf).
"""

import dataclasses
import datetime as dt
import math
import os
import re
import tomllib
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orquestador import patterns
from orquestador.schemas import schema_errors

from .base import Contract, IntegrationConfigError, RoutableAdapter, Route
from .options import as_table, integer, one_of, only_keys, show_value
from .routes import route_parse

EFFECTS = ("READ_ONLY", "IDEMPOTENT_WRITE", "NON_IDEMPOTENT_WRITE")
DEFAULT_MAX_ATTEMPTS = 3
MAX_ATTEMPTS_LIMIT = 100
DEFAULT_TIMEOUT_SECONDS = 10.0  # seconds
DEFAULT_SCHEMA: dict[str, Any] = {"type": "object"}

# capability@version; the capability fits ActionExecution.capability (200 characters).
_NAME = re.compile(r"(?P<capability>[A-Za-z][A-Za-z0-9_.-]{0,199})@(?P<version>[1-9][0-9]{0,8})")

DEFAULT_CALLBACK_TIMEOUT_SECONDS = 3600.0  # seconds
MAX_CALLBACK_TIMEOUT_SECONDS = 90 * 24 * 3600  # seconds: 90 days


@dataclass(frozen=True)
class Catalog:
    contracts: dict[str, Contract] = field(default_factory=dict)
    routes: dict[str, Route] = field(default_factory=dict)


def load_catalog(
    path: str | os.PathLike[str] | None,
    *,
    adapters: Mapping[str, RoutableAdapter],
    lease_seconds: float,
    environ: Mapping[str, str] | None = None,
    reserved: Collection[str] = (),
) -> Catalog:
    """Read and validate the catalog file; no path means an empty catalog."""
    if not path:
        return Catalog()
    try:
        text = Path(path).read_bytes().decode("utf-8")
    except OSError as exc:
        raise IntegrationConfigError(
            "INTEGRATIONS_FILE", f"cannot read {os.fspath(path)!r}: {exc.strerror}"
        ) from None
    except UnicodeDecodeError:
        raise IntegrationConfigError("INTEGRATIONS_FILE", "the file is not UTF-8") from None
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise IntegrationConfigError("INTEGRATIONS_FILE", f"not valid TOML: {exc}") from None
    return parse_catalog(
        document,
        adapters=adapters,
        lease_seconds=lease_seconds,
        environ=os.environ if environ is None else environ,
        reserved=reserved,
    )


def parse_catalog(
    document: Mapping[str, Any],
    *,
    adapters: Mapping[str, RoutableAdapter],
    lease_seconds: float,
    environ: Mapping[str, str],
    reserved: Collection[str] = (),
) -> Catalog:
    """Validate a parsed catalog document and build its contracts and routes."""
    only_keys("", document, ("contracts", "routes"))
    contract_tables = as_table("contracts", document.get("contracts", {}))
    route_tables = as_table("routes", document.get("routes", {}))

    contracts: dict[str, Contract] = {}
    for name, table in contract_tables.items():
        key = _key("contracts", name)
        capability, version = _name(key, name, reserved)
        contracts[name] = _contract(key, capability, version, table, lease_seconds)

    routes: dict[str, Route] = {}
    for name, table in route_tables.items():
        key = _key("routes", name)
        capability, version = _name(key, name, reserved)
        routes[name] = route_parse(key, capability, version, table, adapters, environ)

    for name in route_tables:
        if name not in contract_tables:
            raise IntegrationConfigError(
                _key("routes", name), f"has no contract: add [{_key('contracts', name)}]"
            )
    for name in contract_tables:
        if name not in route_tables:
            raise IntegrationConfigError(
                _key("contracts", name), f"has no route: add [{_key('routes', name)}]"
            )

    for name, route in routes.items():
        adapter = adapters[route.adapter]
        contract = contracts[name]
        fixed = adapter.fixed_effect
        if fixed is not None and contract.effect != fixed:
            raise IntegrationConfigError(
                _key("contracts", name, "effect"),
                f"adapter {route.adapter} always has effect {fixed}; "
                f"this contract declares {contract.effect}",
            )
        contracts[name] = _with_adapter_schemas(contract, adapter)
    return Catalog(contracts=contracts, routes=routes)


# ------------------------------------------------------------------------------
# Contracts
# ------------------------------------------------------------------------------
CONTRACT_KEYS = (
    "effect",
    "max_attempts",
    "timeout_seconds",
    "callback_timeout_seconds",
    "input_schema",
    "output_schema",
    "auto_reconcile",
    "lookup_authoritative",
    "probe_window_seconds",
)
AUTO_RECONCILE = ("off", "found", "found-or-absent")
PROBE_WINDOW_LIMITS = (5, 86_400)  # seconds: probe_window_seconds accepts this range
DEFAULT_PROBE_WINDOW = 900  # seconds


def _contract(
    key: str, capability: str, version: int, table: Any, lease_seconds: float
) -> Contract:
    table = as_table(key, table)
    only_keys(key, table, CONTRACT_KEYS)
    if "effect" not in table:
        raise IntegrationConfigError(f"{key}.effect", f"is required ({' | '.join(EFFECTS)})")
    effect = one_of(*EFFECTS)(f"{key}.effect", table["effect"])
    max_attempts = integer(minimum=1, maximum=MAX_ATTEMPTS_LIMIT)(
        f"{key}.max_attempts", table.get("max_attempts", DEFAULT_MAX_ATTEMPTS)
    )
    timeout = _timeout(f"{key}.timeout_seconds", table, lease_seconds)
    callback_timeout = table.get("callback_timeout_seconds", DEFAULT_CALLBACK_TIMEOUT_SECONDS)
    where = f"{key}.callback_timeout_seconds"
    if (
        isinstance(callback_timeout, bool)
        or not isinstance(callback_timeout, int | float)
        or not math.isfinite(callback_timeout)
    ):
        raise IntegrationConfigError(
            where, f"must be a number of seconds, got {show_value(callback_timeout)}"
        )
    if not 1 <= callback_timeout <= MAX_CALLBACK_TIMEOUT_SECONDS:
        raise IntegrationConfigError(
            where, f"must be between 1 and {MAX_CALLBACK_TIMEOUT_SECONDS} seconds (90 days)"
        )
    auto_reconcile = one_of(*AUTO_RECONCILE)(
        f"{key}.auto_reconcile", table.get("auto_reconcile", "found")
    )
    authoritative = table.get("lookup_authoritative", False)
    if not isinstance(authoritative, bool):
        raise IntegrationConfigError(
            f"{key}.lookup_authoritative", f"must be true or false, not {show_value(authoritative)}"
        )
    window = integer(minimum=PROBE_WINDOW_LIMITS[0], maximum=PROBE_WINDOW_LIMITS[1])(
        f"{key}.probe_window_seconds", table.get("probe_window_seconds", DEFAULT_PROBE_WINDOW)
    )
    return Contract(
        capability=capability,
        version=version,
        effect=effect,
        max_attempts=max_attempts,
        timeout_seconds=timeout,
        callback_timeout_seconds=float(callback_timeout),
        input_schema=_schema(f"{key}.input_schema", table.get("input_schema", DEFAULT_SCHEMA)),
        output_schema=_schema(f"{key}.output_schema", table.get("output_schema", DEFAULT_SCHEMA)),
        auto_reconcile=auto_reconcile,
        lookup_authoritative=authoritative,
        probe_window_seconds=window,
    )


def _timeout(key: str, table: Mapping[str, Any], lease_seconds: float) -> float:
    # Renewals run strictly more often than every half lease, so a call that takes at most half
    # the lease ends before the lease it started under can expire, even if renewals stop.
    limit = lease_seconds / 2
    value = table.get("timeout_seconds", min(DEFAULT_TIMEOUT_SECONDS, limit))
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise IntegrationConfigError(key, f"must be a number of seconds, got {show_value(value)}")
    if value <= 0:
        raise IntegrationConfigError(key, "must be more than 0")
    if value > limit:
        raise IntegrationConfigError(
            key,
            f"{value:g} does not leave room under WORKER_LEASE_SECONDS={lease_seconds:g}: "
            f"it must be at most half the lease ({limit:g})",
        )
    return float(value)


def _schema(key: str, value: Any) -> dict[str, Any]:
    schema = as_table(key, value)
    _json_only(key, schema)
    errors = schema_errors(schema)
    if errors:
        error = errors[0]
        where = "/".join(str(p) for p in error.path)
        at = f" at {where}" if where else ""
        raise IntegrationConfigError(key, f"is not a valid JSON Schema{at}: {error.message}")
    problems = patterns.pattern_problems(schema, "$")
    if problems:
        where, message = problems[0]
        raise IntegrationConfigError(key, f"has an unsupported pattern at {where}: {message}")
    return schema


def _json_only(key: str, value: Any) -> None:
    """TOML has dates and times; JSON (and so a schema) does not."""
    if isinstance(value, dt.date | dt.time):
        raise IntegrationConfigError(key, "TOML dates and times are not JSON values")
    if isinstance(value, float) and not math.isfinite(value):
        raise IntegrationConfigError(key, "inf and nan are not JSON values")
    if isinstance(value, dict):
        for item in value.values():
            _json_only(key, item)
    elif isinstance(value, list):
        for item in value:
            _json_only(key, item)


def _with_adapter_schemas(contract: Contract, adapter: RoutableAdapter) -> Contract:
    def combine(own: dict[str, Any], declared: dict[str, Any] | None) -> dict[str, Any]:
        if declared is None:
            return own
        if own == DEFAULT_SCHEMA:
            return declared
        return {"allOf": [declared, own]}

    return dataclasses.replace(
        contract,
        input_schema=combine(contract.input_schema, getattr(adapter, "input_schema", None)),
        output_schema=combine(contract.output_schema, getattr(adapter, "output_schema", None)),
    )


# ------------------------------------------------------------------------------
# Helpers
# ------------------------------------------------------------------------------
def _name(key: str, name: str, reserved: Collection[str]) -> tuple[str, int]:
    match = _NAME.fullmatch(name)
    if not match:
        raise IntegrationConfigError(
            key, "must be written capability@version, e.g. documents.verify@1"
        )
    if name in reserved:
        raise IntegrationConfigError(key, "is reserved for a simulation capability")
    return match["capability"], int(match["version"])


def _key(section: str, name: str, option: str | None = None) -> str:
    # capability@version always needs quotes in TOML ('@' and '.' are not bare-key characters).
    escaped = name.replace("\\", "\\\\").replace('"', '\\"')
    key = f'{section}."{escaped}"'
    return f"{key}.{option}" if option else key
