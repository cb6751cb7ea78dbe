"""`http.json`: a generic JSON-over-HTTP call to the route's URL (INTEGRATIONS.md#httpjson).

It sends the resolved input as the JSON body and the external key as `Idempotency-Key`, and
takes the JSON object it gets back as the output; `actions.outcomes` classifies the rest for the
contract's effect. A 2xx whose body is not a JSON object (or is over `max_response_bytes`) is
OUTPUT_INVALID: PERMANENT for a read, UNKNOWN for a write (the provider acted). Credentials come
only from the variables named in `headers_from_env`, read at each call; they are never logged,
stored or put in a result.
"""

import asyncio
import json
import logging
import time
from typing import Any
from urllib.parse import quote

from orquestador import errors, strictjson

from . import outcomes
from .base import ActionContext, ActionResult, Binding, LookupResult, Outcome
from .credentials import MissingCredential, credential_headers
from .options import Option, http_url, integer, one_of, seconds
from .routes import header_value_ok
from .transport import (
    DEFAULT_CONNECT_TIMEOUT,
    USER_AGENT,
    Deadline,
    Reply,
    TransportError,
    exchange,
    fetch,
)

DEFAULT_MAX_RESPONSE_BYTES = 1024 * 1024  # bytes
MAX_RESPONSE_BYTES_LIMIT = 16 * 1024 * 1024  # bytes
METHODS = ("POST", "PUT", "PATCH")
OFF_LOOP_JSON_BYTES = 16 * 1024  # bytes of an answer from which it is parsed in a thread (ADR 16)

logger = logging.getLogger(__name__)
# Built once: json.dumps with a non-default option builds an encoder per call.
_encode_body = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


def parse_json_object(body: bytes) -> dict[str, Any] | None:
    """The body as a strict JSON object (orquestador.strictjson), or None when it is not one."""
    try:
        value = strictjson.loads(body)
    except strictjson.JSONRefused:
        return None
    return value if isinstance(value, dict) else None


async def parsed(body: bytes) -> dict[str, Any] | None:
    """`parse_json_object`, in a thread for a body past OFF_LOOP_JSON_BYTES: strict parsing runs
    Python for every object, and a large answer would hold the event loop (docs/adr/0016)."""
    if len(body) < OFF_LOOP_JSON_BYTES:
        return parse_json_object(body)
    return await asyncio.to_thread(parse_json_object, body)


class HttpJsonAdapter:
    name = "http.json"
    fixed_effect = None  # the contract declares the effect of the endpoint
    supports_async = True  # a route may set async = true: a 202 means "will call back"
    input_schema = None
    output_schema = None
    route_options = {
        "url": Option(http_url(), required=True),
        "method": Option(one_of(*METHODS), default="POST"),
        "lookup_url": Option(http_url(placeholders=("key",), required=("key",))),
        "max_response_bytes": Option(
            integer(minimum=1, maximum=MAX_RESPONSE_BYTES_LIMIT), default=DEFAULT_MAX_RESPONSE_BYTES
        ),
        "connect_timeout_seconds": Option(seconds(maximum=60), default=DEFAULT_CONNECT_TIMEOUT),
    }

    async def call(self, ctx: ActionContext, binding: Binding) -> ActionResult:
        options = binding.route.options
        effect = binding.effect
        started = time.monotonic()
        try:
            headers = self._headers(options, ctx.external_key)
            principal = ctx.principal
            if options.get("principal_header") and principal and header_value_ok(principal):
                headers[options["principal_header"]] = principal
        except MissingCredential as exc:
            return outcomes.permanent(
                f"{exc}; nothing was sent", code=errors.INTEGRATION_UNAVAILABLE
            )
        body = _encode_body(ctx.input).encode("utf-8")
        try:
            reply = await exchange(
                method=options["method"],
                url=options["url"],
                headers=headers,
                body=body,
                deadline=Deadline.after(binding.contract.timeout_seconds),
                connect_timeout=options["connect_timeout_seconds"],
                max_bytes=options["max_response_bytes"],
                want_body=lambda status: 200 <= status < 300,
                cancelled=ctx.cancelled,
            )
        except TransportError as exc:
            result = outcomes.from_transport_error(exc, effect)
        else:
            if binding.route.is_async and reply.status == 202:
                result = ActionResult(outcome=Outcome.ACCEPTED)
            else:
                result = await self._classify(reply, effect)
        if logger.isEnabledFor(logging.DEBUG):  # the runner's lines say what a person needs
            self._log_call(ctx, binding, result, started)
        return result

    def _log_call(
        self, ctx: ActionContext, binding: Binding, result: ActionResult, started: float
    ) -> None:
        logger.debug(
            "integration call",
            extra={
                "capability": binding.contract.key,
                "adapter": self.name,
                "execution_id": ctx.execution_id,
                "action_id": ctx.action_id,
                "attempt": ctx.attempt,
                "outcome": str(result.outcome),
                "error_code": result.error_code,
                "elapsed_ms": round((time.monotonic() - started) * 1000),
            },
        )

    async def lookup(self, external_key: str, binding: Binding) -> LookupResult:
        """Ask the provider whether the write with this key happened (INTEGRATIONS.md).

        200 with a JSON object: it happened, and that object is its output (offered only when it
        passes the contract's output schema); 404: it did not; anything else settles nothing.
        """
        template = binding.route.options.get("lookup_url")
        if not template:
            return LookupResult(happened=None, detail="the route has no lookup_url")
        options = binding.route.options
        try:
            headers = self._headers(options, external_key, body=False)
        except MissingCredential as exc:
            return LookupResult(happened=None, detail=str(exc))
        try:
            reply = await fetch(
                binding,
                template.replace("{key}", quote(external_key, safe="")),
                headers,
                max_bytes=options["max_response_bytes"],
            )
        except TransportError as exc:
            return LookupResult(happened=None, detail=f"lookup failed: {exc.reason}")
        if reply.status == 404:
            return LookupResult(happened=False, detail="provider has no write with this key")
        if reply.status != 200:
            return LookupResult(happened=None, detail=f"lookup answered HTTP {reply.status}")
        output = await parsed(reply.body or b"")
        if output is None:
            return LookupResult(happened=None, detail="lookup answered 200 without a JSON object")
        return LookupResult(
            happened=True, output=output, detail="provider has a write with this key"
        )

    def _headers(self, options: dict[str, Any], key: str, *, body: bool = True) -> dict[str, str]:
        headers = {
            "Accept": "application/json",
            # Ask for an uncompressed body: the size limit then bounds what crosses the wire too.
            "Accept-Encoding": "identity",
            "User-Agent": USER_AGENT,
        }
        if body:
            headers["Content-Type"] = "application/json"
            headers["Idempotency-Key"] = key
        return {**credential_headers(options.get("headers_from_env", {})), **headers}

    async def _classify(self, reply: Reply, effect: str) -> ActionResult:
        failed = outcomes.from_status(reply.status, effect, reply.retry_after)
        if failed is not None:
            return failed
        if reply.status == 204:
            return ActionResult(outcome=Outcome.SUCCEEDED, output={})
        output = await parsed(reply.body or b"")
        if output is not None:
            return ActionResult(outcome=Outcome.SUCCEEDED, output=output)
        detail = f"provider answered HTTP {reply.status} without a JSON object"
        if effect == outcomes.READ_ONLY:
            return outcomes.permanent(detail, errors.OUTPUT_INVALID)
        return outcomes.unknown(
            f"{detail}; the write was applied and its output is unknown", errors.OUTPUT_INVALID
        )
