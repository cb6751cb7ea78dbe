"""Routes of the integration catalog: `[routes."cap@ver"]`, how a capability reaches its provider.

A route names its adapter and the options that adapter declares (options.py), the headers it
sends from environment variables (`headers_from_env`: names only; each variable must be set when
the catalog loads, and its value is read again at each call, so it never reaches the catalog, the
database or the logs), the header that carries the dispatch's principal, and, for an adapter that
can work asynchronously, `async` with the secret that signs the provider's callbacks. Every
problem is an `IntegrationConfigError` naming the TOML key and why.
"""

import re
from collections.abc import Mapping
from typing import Any

from .base import IntegrationConfigError, RoutableAdapter, Route
from .limits import LIMIT_KEYS, limits_parse
from .options import Option, as_table, one_of, only_keys, show_value, toml_key

_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]{1,100}")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
# Headers the adapters set themselves, and hop-by-hop headers: never from the file.
RESERVED_HEADERS = frozenset(
    {
        "accept",
        "accept-encoding",
        "connection",
        "content-length",
        "content-type",
        "host",
        "idempotency-key",
        "keep-alive",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "user-agent",
    }
)
COMMON_ROUTE_KEYS = ("adapter", "headers_from_env", "principal_header")
# Route keys of adapters that can work asynchronously (`supports_async = True`).
ASYNC_ROUTE_KEYS = ("async", "callback_secret_from_env")
MIN_CALLBACK_SECRET_CHARS = 32  # characters of a callback secret (HMAC-SHA256 key)
DEFAULT_CALLBACK_TIMEOUT_SECONDS = 3600.0  # seconds
MAX_CALLBACK_TIMEOUT_SECONDS = 90 * 24 * 3600  # seconds: 90 days


def route_parse(
    key: str,
    capability: str,
    version: int,
    table: Any,
    adapters: Mapping[str, RoutableAdapter],
    environ: Mapping[str, str],
) -> Route:
    table = as_table(key, table)
    if "adapter" not in table:
        raise IntegrationConfigError(f"{key}.adapter", "is required")
    adapter_name = one_of(*sorted(adapters))(f"{key}.adapter", table["adapter"])
    adapter = adapters[adapter_name]
    specs: Mapping[str, Option] = adapter.route_options
    supports_async = getattr(adapter, "supports_async", False)
    only_keys(
        key,
        table,
        (
            *COMMON_ROUTE_KEYS,
            *LIMIT_KEYS,
            *(ASYNC_ROUTE_KEYS if supports_async else ()),
            *specs,
        ),
    )
    options: dict[str, Any] = {}
    for option, spec in specs.items():
        if option in table:
            options[option] = spec.validate(f"{key}.{option}", table[option])
        elif spec.required:
            raise IntegrationConfigError(f"{key}.{option}", f"is required by {adapter_name}")
        elif spec.default is not None:
            options[option] = spec.default
    options["headers_from_env"] = _headers_from_env(
        f"{key}.headers_from_env", table.get("headers_from_env", {}), environ
    )
    if "principal_header" in table:
        options["principal_header"] = _principal_header(
            f"{key}.principal_header", table["principal_header"], options["headers_from_env"]
        )
    if supports_async:
        options.update(_async_options(key, table, environ))
    return Route(
        capability=capability,
        version=version,
        adapter=adapter_name,
        options=options,
        limits=limits_parse(key, table),
    )


def _headers_from_env(key: str, value: Any, environ: Mapping[str, str]) -> dict[str, str]:
    """Header name -> environment variable name; every variable must be set, now."""
    table = as_table(key, value)
    seen: set[str] = set()
    headers: dict[str, str] = {}
    for header, variable in table.items():
        where = f"{key}.{toml_key(header)}"
        if not _HEADER_NAME.fullmatch(header):
            raise IntegrationConfigError(where, "is not a valid HTTP header name")
        if header.lower() in RESERVED_HEADERS:
            raise IntegrationConfigError(where, "is set by the adapter and cannot be configured")
        if header.lower() in seen:
            raise IntegrationConfigError(where, "is configured twice (header names ignore case)")
        seen.add(header.lower())
        if not isinstance(variable, str) or not _ENV_NAME.fullmatch(variable):
            raise IntegrationConfigError(
                where,
                "must be the name of an environment variable (the value is never written here)",
            )
        secret = environ.get(variable, "")
        if not secret:
            raise IntegrationConfigError(where, f"environment variable {variable} is not set")
        # The value is never shown; only whether it can be sent as a header at all.
        if not header_value_ok(secret):
            raise IntegrationConfigError(
                where, f"environment variable {variable} holds characters a header cannot carry"
            )
        headers[header] = variable
    return headers


def _principal_header(key: str, value: Any, configured: Mapping[str, str]) -> str:
    """The header that carries `sub@tenant` of whoever caused the dispatch to the provider."""
    if not isinstance(value, str) or not _HEADER_NAME.fullmatch(value):
        raise IntegrationConfigError(key, "must be a valid HTTP header name")
    if value.lower() in RESERVED_HEADERS or value.lower() == "authorization":
        raise IntegrationConfigError(key, "is a header the adapter or a credential sets")
    if value.lower() in {name.lower() for name in configured}:
        raise IntegrationConfigError(key, "is already set from headers_from_env")
    return value


def _async_options(key: str, table: Mapping[str, Any], environ: Mapping[str, str]) -> dict:
    """`async` and `callback_secret_from_env`: both or neither; the secret set now, 32+ chars."""
    is_async = table.get("async", False)
    if not isinstance(is_async, bool):
        raise IntegrationConfigError(
            f"{key}.async", f"must be true or false, got {show_value(is_async)}"
        )
    variable = table.get("callback_secret_from_env")
    where = f"{key}.callback_secret_from_env"
    if not is_async:
        if variable is not None:
            raise IntegrationConfigError(where, "applies only to a route with async = true")
        return {"async": False}
    if variable is None:
        raise IntegrationConfigError(
            where, "is required with async = true (callbacks are authenticated with it)"
        )
    if not isinstance(variable, str) or not _ENV_NAME.fullmatch(variable):
        raise IntegrationConfigError(
            where, "must be the name of an environment variable (the value is never written here)"
        )
    secret = environ.get(variable, "")
    if not secret:
        raise IntegrationConfigError(where, f"environment variable {variable} is not set")
    if len(secret) < MIN_CALLBACK_SECRET_CHARS:
        raise IntegrationConfigError(
            where,
            f"environment variable {variable} must hold at least {MIN_CALLBACK_SECRET_CHARS} "
            "characters",
        )
    return {"async": True, "callback_secret_from_env": variable}


def header_value_ok(value: str) -> bool:
    """Whether `value` can travel as an HTTP header value (no line breaks, latin-1)."""
    if any(ch in value for ch in "\r\n\0"):
        return False
    try:
        value.encode("latin-1")
    except UnicodeEncodeError:
        return False
    return value == value.strip()
