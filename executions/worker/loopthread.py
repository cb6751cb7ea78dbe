"""An event loop of its own in a thread, for synchronous code that drives the worker's
asynchronous parts: the worker endpoint (a Django view under a synchronous web server) and
tests.

A thread, not `asyncio.run` per call: the local runtime's connection pool lives on one loop for
its whole life, and every call into it must run there (`call`, `submit`).
"""

import asyncio
import concurrent.futures
import functools
import queue
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

Result = TypeVar("Result")

STOP_TIMEOUT_SECONDS = 5.0  # seconds to wait for the loop's thread when stopping


class DaemonThreads(concurrent.futures.ThreadPoolExecutor):
    """An executor of daemon threads, one more whenever none is idle: a loop's default executor
    for what must run off it (`asyncio.to_thread`). As many at once as there are calls (a slot
    each, at most), threads kept for the next calls, and none of them keeps the process from
    exiting: a call still stuck at shutdown is abandoned, as the process abandons its lease.
    Needed by the BRIDGE for synchronous adapters (removed at merge with them); the large-document
    steps (executions/worker/offload.py) use it too.
    """

    # A ThreadPoolExecutor by type only (asyncio accepts nothing else as a default executor);
    # none of its own threads is ever started.

    def __init__(self) -> None:
        super().__init__(max_workers=1, thread_name_prefix="unused")
        self._work: queue.SimpleQueue[tuple[concurrent.futures.Future[Any], Callable[[], Any]]]
        self._work = queue.SimpleQueue()
        self._idle = 0  # threads waiting for work, each counted once
        self._lock = threading.Lock()

    def submit(
        self, fn: Callable[..., Result], /, *args: Any, **kwargs: Any
    ) -> concurrent.futures.Future[Result]:
        future: concurrent.futures.Future[Result] = concurrent.futures.Future()
        self._work.put((future, functools.partial(fn, *args, **kwargs)))
        with self._lock:
            spawn = self._idle == 0
            if not spawn:
                self._idle -= 1  # that idle thread takes this call
        if spawn:
            threading.Thread(target=self._serve, name="worker-call", daemon=True).start()
        return future

    def _serve(self) -> None:
        while True:
            future, call = self._work.get()
            if future.set_running_or_notify_cancel():
                try:
                    result = call()
                except BaseException as exc:  # handed to whoever awaits it
                    future.set_exception(exc)
                else:
                    future.set_result(result)
                del future, call  # hold nothing while idle
            with self._lock:
                self._idle += 1

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Nothing to wait for: the threads are daemons."""


class LoopThread:
    """A running event loop in a daemon thread."""

    def __init__(self, name: str = "worker-loop") -> None:
        self.loop = asyncio.new_event_loop()
        self.loop.set_default_executor(DaemonThreads())
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def submit(self, coro: Coroutine[Any, Any, Result]) -> concurrent.futures.Future[Result]:
        """Run `coro` on the loop; its future, to wait on from this thread."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def call(self, coro: Coroutine[Any, Any, Result], timeout: float | None = None) -> Result:
        """Run `coro` on the loop and wait for its result (at most `timeout` seconds)."""
        return self.submit(coro).result(timeout)

    def stop(self) -> None:
        """Stop the loop (what still runs on it is dropped) and wait for its thread."""
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(STOP_TIMEOUT_SECONDS)
        if not self._thread.is_alive():
            self.loop.close()
