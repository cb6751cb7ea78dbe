"""The watchdog that holds an HTTP call to its time limits and to the execution's stop signal
(a timer on the loop, not a thread: docs/adr/0016-adapters-on-an-asynchronous-client.md).

A call runs inside `async with Watchdog(...)`: held to the connect timeout until the pooled
connector says the connection is had (`connected`), then to the total budget; a `StopSignal` set
from any thread is handed to the loop. Either cancels the calling task wherever it waits, and
the watchdog records why it fired and how far the call had got (`Stage`) for the transport to
classify; a cancellation that is not the watchdog's is never swallowed.
"""

import asyncio
import contextlib
import contextvars
import enum
from collections.abc import Callable

from .base import StopSignal


class Stage(enum.StrEnum):
    NOT_SENT = "NOT_SENT"  # failed before any byte of the request could reach the provider
    SENT = "SENT"  # the request was (or may have been) sent; no status came back
    BODY = "BODY"  # a status came back; its body could not be read in full


class Why(enum.Enum):
    TIMED_OUT = "timed out"  # the connect timeout before the connection, the budget after
    STOPPED = "stopped"  # the execution was told to stop


# The watchdog of the call the current task is making: how the connector finds it.
_current: contextvars.ContextVar["Watchdog | None"] = contextvars.ContextVar(
    "actions_watchdog", default=None
)


class Watchdog:
    """One call's timer and stop signal, as one cancellation of the calling task.

    `async with Watchdog(budget, connect_timeout, cancelled) as watchdog:` the block's
    CancelledError becomes `Interrupted` when it was this watchdog's doing, and so does any
    failure the cancellation caused on its way out; a cancellation from outside goes through."""

    __slots__ = (
        "_cancelling",
        "_deadline_at",
        "_done",
        "_forget",
        "_loop",
        "_task",
        "_timer",
        "_token",
        "stage",
        "status",
        "why",
    )

    def __init__(self, budget: float, connect_timeout: float, cancelled: StopSignal | None) -> None:
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("an HTTP call runs in a task")
        self._task = task
        self._loop = asyncio.get_running_loop()
        self._cancelling = task.cancelling()
        self._done = False
        self.stage = Stage.NOT_SENT
        self.status: int | None = None  # set with stage BODY
        self.why: Why | None = None
        now = self._loop.time()
        self._deadline_at = now + budget
        # First due at the connect timeout; moved on to the budget only if it comes due after
        # the connection was had (most calls end long before, and cost one timer).
        self._timer = self._loop.call_at(min(now + connect_timeout, self._deadline_at), self._due)
        self._forget: Callable[[], None] | None = (
            cancelled.on_set(self._stop_from_any_thread) if cancelled is not None else None
        )

    async def __aenter__(self) -> "Watchdog":
        self._token = _current.set(self)
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        _current.reset(self._token)
        fired = self.why is not None
        alone = self._close()
        if exc_type is not None and fired and alone:
            raise Interrupted(self) from None
        # No failure: the result is complete and stands, even if the watchdog fired as the block
        # ended (whatever it cancelled was swallowed on the way).

    def connected(self) -> None:
        """The connection is had and the request is about to be written: from now on it may
        have been sent, and the total budget is the limit."""
        if self.stage is Stage.NOT_SENT:
            self.stage = Stage.SENT

    def answered(self, status: int) -> None:
        """A status line and headers came back; what fails now fails reading the body."""
        self.stage, self.status = Stage.BODY, status

    def _stop_from_any_thread(self) -> None:
        with contextlib.suppress(RuntimeError):  # the loop is closed: nothing waits any more
            self._loop.call_soon_threadsafe(self._fire, Why.STOPPED)

    def _due(self) -> None:
        if self.stage is not Stage.NOT_SENT and self._loop.time() < self._deadline_at:
            self._timer = self._loop.call_at(self._deadline_at, self._due)  # connected in time
            return
        self._fire(Why.TIMED_OUT)

    def _fire(self, why: Why) -> None:
        if self._done or self.why is not None:
            return
        self.why = why
        self._task.cancel()

    def _close(self) -> bool:
        """Disarm; return whether this watchdog fired and its cancellation was the only one."""
        self._done = True
        self._timer.cancel()
        if self._forget is not None:
            self._forget()
            # What unregisters the stop callback holds that callback, a method of this watchdog,
            # and this watchdog held it: a cycle that kept each call's watchdog, its task and
            # the slot's stop signal alive until the cyclic collector found them (some 15
            # objects per execution on the slow provider, a young collection every few
            # executions at 200 slots).
            self._forget = None
        if self.why is None:
            return False
        return self._task.uncancel() <= self._cancelling


class Interrupted(Exception):
    """The watchdog stopped the call; `watchdog.why` and `watchdog.stage` say why and when."""

    def __init__(self, watchdog: Watchdog) -> None:
        self.watchdog = watchdog
        super().__init__(f"{watchdog.stage}: {watchdog.why}")


def watch_connected() -> None:
    """Tell the current call's watchdog, if any, that its connection is had (pools.py)."""
    watchdog = _current.get()
    if watchdog is not None:
        watchdog.connected()
