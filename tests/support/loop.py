"""Driving the worker's asynchronous parts from a synchronous test.

`OnLoop` wraps an asynchronous object (a runtime, a heartbeat) that lives on a `LoopThread`:
each of its coroutine methods, called from the test, runs on that loop and returns its result;
anything else is read as it is. A test keeps calling `runtime.execute(...)`,
`runtime.cancel(...)` as before; the runtime's connections stay on their one loop.
"""

import inspect
from collections.abc import Coroutine
from typing import Any, Generic, TypeVar

from executions.worker.loopthread import LoopThread

Target = TypeVar("Target")
Result = TypeVar("Result")

CALL_TIMEOUT = 60.0  # seconds a call on the loop may take before the test fails


class OnLoop(Generic[Target]):
    """`target`'s coroutine methods as plain calls, run on `loop`."""

    def __init__(self, target: Target, loop: LoopThread) -> None:
        self.target = target
        self.loop = loop

    def run(self, coro: Coroutine[Any, Any, Result], timeout: float = CALL_TIMEOUT) -> Result:
        return self.loop.call(coro, timeout)

    def __getattr__(self, name: str) -> Any:
        value = getattr(self.target, name)
        if inspect.iscoroutinefunction(value):
            return lambda *args, **kwargs: self.run(value(*args, **kwargs))
        return value

    def close(self) -> None:
        """Close the target (when it closes) and stop its loop."""
        close = getattr(self.target, "close", None)
        try:
            if close is not None:
                result = close()
                if inspect.isawaitable(result):
                    self.run(result)  # type: ignore[arg-type]
        finally:
            self.loop.stop()

    def __enter__(self) -> "OnLoop[Target]":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def on_loop(target: Target, *, name: str = "test-loop") -> OnLoop[Target]:
    """`target` on a loop of its own, opened there when it has an `open` coroutine."""
    wrapped = OnLoop(target, LoopThread(name=name))
    opener = getattr(target, "open", None)
    if opener is not None and inspect.iscoroutinefunction(opener):
        wrapped.run(opener())
    return wrapped
