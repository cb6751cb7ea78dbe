"""The contract between the worker and trusted adapters (INTEGRATIONS.md).

An adapter is trusted code registered under a name (`http.json`, `documents.verify`, ...). It is
handed an `ActionContext` and the `Binding` of the contract and route it serves, and returns an
`ActionResult` of one outcome class: SUCCEEDED, TRANSIENT, PERMANENT, UNKNOWN, or ACCEPTED
(asynchronous routes). Invariants: it never touches the ORM, never raises for an expected
failure, and bounds its own time below the lease; the worker persists what it returns. What the
worker does with each class: INTEGRATIONS.md#what-the-worker-does-with-each-class.
"""

import asyncio
import contextlib
import enum
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable


class Outcome(enum.StrEnum):
    SUCCEEDED = "SUCCEEDED"
    TRANSIENT = "TRANSIENT"
    PERMANENT = "PERMANENT"
    UNKNOWN = "UNKNOWN"
    # An asynchronous route's provider took the call (HTTP 202) and will post the output to
    # POST /api/v1/callbacks/{capability}@{version}; the execution waits for it, SUSPENDED.
    ACCEPTED = "ACCEPTED"


@dataclass(frozen=True)
class Contract:
    """What `capability@version` is: its effect, limits and schemas."""

    capability: str
    version: int
    effect: str  # executions.models.Effect value
    max_attempts: int = 3
    timeout_seconds: float = 10.0  # seconds, the adapter's total budget for one call
    input_schema: dict[str, Any] = field(default_factory=lambda: {"type": "object"})
    output_schema: dict[str, Any] = field(default_factory=lambda: {"type": "object"})
    # seconds an asynchronous provider has to call back after accepting a call
    callback_timeout_seconds: float = 3600.0
    # Automatic probes of an uncertain write (reconciliation/probes.py,
    # RECONCILIATION.md#automatic-probes).
    auto_reconcile: str = "found"  # "off" | "found" | "found-or-absent"
    lookup_authoritative: bool = False  # "not found" on every probe means it did not happen
    probe_window_seconds: int = 900  # seconds after the case opens that probes run

    @property
    def key(self) -> str:
        return f"{self.capability}@{self.version}"


@dataclass(frozen=True)
class RouteLimits:
    """A route's flow control (`max_in_flight`, `rate_limit`), enforced across every worker in
    PostgreSQL (executions/queue/limits.py); None in either means that limit is off."""

    max_in_flight: int | None = None  # calls in progress at once
    rate_count: int | None = None  # calls started in any window of rate_window_seconds
    rate_window_seconds: int | None = None  # seconds: 1, 60 or 3600

    @property
    def rate_limit(self) -> str | None:
        """The rate as the file writes it (`50/s`), or None."""
        if self.rate_count is None or self.rate_window_seconds is None:
            return None
        unit = {1: "s", 60: "min", 3600: "h"}[self.rate_window_seconds]
        return f"{self.rate_count}/{unit}"


@dataclass(frozen=True)
class Route:
    """Which trusted adapter serves a capability, and where it sends."""

    capability: str
    version: int
    adapter: str
    options: dict[str, Any] = field(default_factory=dict)  # url, method, lookup_url, ...
    limits: RouteLimits | None = None  # None: an unlimited route (no statement per call)

    @property
    def is_async(self) -> bool:
        return bool(self.options.get("async"))

    @property
    def key(self) -> str:
        return f"{self.capability}@{self.version}"


class StopSignal:
    """An execution's stop signal (cancellation, lost lease, shutdown past the drain, a stuck
    run). `set()` may be called from any thread; it also calls what is registered with
    `on_set`, and wakes every coroutine in `wait()` on whatever event loop it waits, so a call
    waiting on a slow provider is woken at once (actions/watchdog.py cancels it) instead of
    noticing only after the provider answers."""

    __slots__ = ("_callbacks", "_event", "_lock", "_set")

    def __init__(self) -> None:
        # A flag, read without the lock (one attribute read is atomic); the threading.Event a
        # blocking waiter needs is made only for one: each run has a signal, and is asked
        # whether it is set a few times per action.
        self._set = False
        self._event: threading.Event | None = None
        self._callbacks: list[Callable[[], None]] = []
        self._lock = threading.Lock()

    def set(self) -> None:
        with self._lock:
            self._set = True
            event = self._event
            callbacks, self._callbacks = self._callbacks, []
        if event is not None:
            event.set()
        for callback in callbacks:
            callback()

    def is_set(self) -> bool:
        return self._set

    async def wait(self, timeout: float | None = None) -> bool:
        """Wait until this is set or `timeout` seconds pass; return whether it is set."""
        if self.is_set():
            return True
        loop = asyncio.get_running_loop()
        woken = loop.create_future()

        def wake() -> None:  # from the thread that set it: hand over to the waiting loop
            with contextlib.suppress(RuntimeError):  # that loop is already closed
                loop.call_soon_threadsafe(_resolve, woken)

        forget = self.on_set(wake)
        try:
            async with asyncio.timeout(timeout):
                await woken
        except TimeoutError:
            pass
        finally:
            forget()
        return self.is_set()

    def wait_blocking(self, timeout: float | None = None) -> bool:
        """`wait` for a thread that runs no event loop."""
        with self._lock:
            if self._set:
                return True
            if self._event is None:
                self._event = threading.Event()
            event = self._event
        return event.wait(timeout)

    def on_set(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call `callback` once when this is set (at once if it already is), in the thread that
        sets it; return what unregisters it."""
        with self._lock:
            if not self._set:
                self._callbacks.append(callback)
                return lambda: self._forget(callback)
        callback()
        return lambda: None

    def _forget(self, callback: Callable[[], None]) -> None:
        with self._lock, contextlib.suppress(ValueError):
            self._callbacks.remove(callback)


def _resolve(future: "asyncio.Future[None]") -> None:
    if not future.done():
        future.set_result(None)


# What an adapter is told of one attempt: its input and names, never the lease or its token.
@dataclass(frozen=True)
class ActionContext:
    input: dict[str, Any]
    request_id: str
    execution_id: str
    action_id: str
    owner: str
    scope: str
    external_key: str  # "<executionId>:<actionId>", stable across attempts
    attempt: int
    # Set when this execution must stop (cancelled, lease lost, shutdown past the drain). Adapters
    # with long waits check it or await its `wait()`; an interruption never proves an external
    # effect did not happen.
    cancelled: StopSignal = field(default_factory=StopSignal)
    # Who caused this dispatch, as `sub@tenant` (`system` for timeouts and recovery); a route
    # with `principal_header` forwards it to the provider.
    principal: str | None = None


@dataclass(frozen=True)
class ActionResult:
    outcome: Outcome
    output: dict[str, Any] | None = None
    error_code: str | None = None
    error_detail: str | None = None  # safe text: never a raw provider response or a secret
    retry_after: float | None = None  # seconds, as the provider asked (bounded by the worker)
    # The provider said it limits its callers (HTTP 429): with retry_after, the route pauses for
    # every worker (executions/queue/limits.py).
    rate_limited: bool = False


@dataclass(frozen=True)
class LookupResult:
    """What a provider says about a write, asked by its external key
    (INTEGRATIONS.md#lookup-by-external-key)."""

    happened: bool | None  # True: it happened; False: it did not; None: settles nothing
    output: dict[str, Any] | None = None
    detail: str = ""


class Adapter(Protocol):
    # Read-only members, so an adapter class may state them as plain class attributes.
    @property
    def name(self) -> str: ...

    # The effect fixed in code, if any (documents.verify is always READ_ONLY); a contract that
    # declares another effect for this adapter is refused at start.
    @property
    def fixed_effect(self) -> str | None: ...

    # A coroutine: the worker awaits it on its event loop; synchronous code runs it through
    # actions/blocking.py. It must never block the loop (CPU-heavy steps go to a thread).
    async def call(self, ctx: ActionContext, binding: "Binding") -> ActionResult: ...


class RoutableAdapter(Adapter, Protocol):
    """An adapter that the catalog may route to (INTEGRATIONS_FILE), and what it accepts there.

    `route_options` maps each adapter-specific route key to its `actions.options.Option`; the
    catalog refuses any other key. Schemas declared here are part of every contract the adapter
    serves: a contract's own schemas are added to them (allOf), never replace them.
    """

    @property
    def route_options(self) -> "Mapping[str, Any]": ...
    @property
    def input_schema(self) -> dict[str, Any] | None: ...
    @property
    def output_schema(self) -> dict[str, Any] | None: ...


@runtime_checkable
class LookupAdapter(Protocol):
    """An adapter that can ask its provider whether a write happened, by its external key
    (actions/lookup.py asks only adapters that are one, on routes with a `lookup_url`)."""

    async def lookup(self, external_key: str, binding: "Binding") -> LookupResult: ...


class IntegrationConfigError(Exception):
    """INTEGRATIONS_FILE is not acceptable; `key` names the TOML key at fault."""

    def __init__(self, key: str, reason: str) -> None:
        self.key, self.reason = key, reason
        super().__init__(f"{key}: {reason}")


@dataclass(frozen=True)
class Binding:
    """A resolved capability: its contract, its route and the adapter that serves it."""

    contract: Contract
    route: Route
    adapter: Adapter

    @property
    def effect(self) -> str:
        return self.contract.effect
