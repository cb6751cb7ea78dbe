"""The adapters' coroutines, run from synchronous code: a thread that runs no event loop (the
automatic prober, the operators' services in a Django view) gives them a loop of its own.

`BlockingRunner` keeps one loop for as long as it is open, so the calls it runs share one HTTP
session and its pooled connections; between calls no loop runs in the thread, so the ORM may
be used there as usual. Closing it closes that session before the loop goes. `run_blocking` is
one call on a loop of its own.
"""

import asyncio
from collections.abc import Coroutine
from types import TracebackType
from typing import Any, TypeVar

from .pools import close_client

T = TypeVar("T")


class BlockingRunner:
    """A loop of its own for one thread, for as long as the block lasts."""

    def __init__(self) -> None:
        self._runner = asyncio.Runner()

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return self._runner.run(coroutine)

    def close(self) -> None:
        try:
            self._runner.run(close_client())
        finally:
            self._runner.close()

    def __enter__(self) -> "BlockingRunner":
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


def run_blocking(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run one coroutine to its end on a loop of its own, in this thread."""
    with BlockingRunner() as runner:
        return runner.run(coroutine)
