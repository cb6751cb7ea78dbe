"""The watchdog that holds an HTTP call to its total budget, and the one thread that fires them.

Once a request is written, the call's socket belongs to its `Watchdog`: at the deadline, or as soon
as the execution is told to stop, the watchdog shuts the socket, which wakes a read blocked on it
however slowly the provider drips bytes. A call runs `watching(...)`, which makes its watchdog the
thread's current one; the pooled connections (pools.py) hand it their socket with
`watch_current` when they start reading the response.
"""

import contextlib
import heapq
import os
import socket
import threading
import time
from collections.abc import Iterator

_local = threading.local()


class Watchdog:
    """Shuts the call's socket at the deadline, which wakes a read blocked on it.

    One shared timer thread (`_Timers`) serves every call of the process: a call costs a heap
    entry, not a thread of its own."""

    __slots__ = ("_lock", "_sock", "cancelled", "expired", "stopped")

    def __init__(self, seconds: float) -> None:
        # Flags, set once under the lock and read without it (nobody waits on them).
        self.expired = False  # the deadline passed (`expire`)
        self.stopped = False  # the execution was told to stop (`stop`)
        self.cancelled = False
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        _timers.add(time.monotonic() + max(0.0, seconds), self)

    def watch(self, sock: socket.socket | None) -> None:
        with self._lock:
            self._sock = sock
            if self.expired or self.stopped:
                _shutdown(sock)

    def cancel(self) -> None:
        _timers.cancel(self)

    def expire(self) -> None:
        with self._lock:
            self.expired = True
            _shutdown(self._sock)

    def stop(self) -> None:
        """The execution was told to stop: abandon the wait (whatever the request did stays as
        it is, an outcome the runner settles by the usual rules)."""
        with self._lock:
            self.stopped = True
            _shutdown(self._sock)


class _Timers:
    """The process's one watchdog thread: a heap of deadlines, each expiring its `Watchdog`
    unless cancelled first. Started on first use (and again in a forked child)."""

    def __init__(self) -> None:
        self._due: list[tuple[float, int, Watchdog]] = []
        self._wake = threading.Condition(threading.Lock())
        self._count = 0  # tie-breaker: watchdogs themselves are not ordered
        self._cancelled = 0  # cancelled entries still in the heap
        self._pid: int | None = None

    def add(self, at: float, watchdog: Watchdog) -> None:
        with self._wake:
            if self._pid != os.getpid():
                self._pid = os.getpid()
                threading.Thread(target=self._run, name="http-watchdog", daemon=True).start()
            self._count += 1
            heapq.heappush(self._due, (at, self._count, watchdog))
            if self._due[0][2] is watchdog:  # earlier than what the thread sleeps towards
                self._wake.notify()

    def cancel(self, watchdog: Watchdog) -> None:
        """Forget a finished call's deadline. Entries are dropped lazily, and the heap is rebuilt
        once most of it is cancelled, so long budgets at a high call rate do not pile up."""
        with self._wake:
            if watchdog.cancelled:
                return
            watchdog.cancelled = True
            self._cancelled += 1
            if self._cancelled > 64 and 2 * self._cancelled > len(self._due):
                self._due = [entry for entry in self._due if not entry[2].cancelled]
                heapq.heapify(self._due)
                self._cancelled = 0

    def _run(self) -> None:
        while True:
            with self._wake:
                while not self._due or self._due[0][0] > time.monotonic():
                    self._wake.wait(self._due[0][0] - time.monotonic() if self._due else None)
                _, _, watchdog = heapq.heappop(self._due)
                if watchdog.cancelled:
                    self._cancelled -= 1
                    continue
                watchdog.cancelled = True  # expired: a later cancel has nothing to count
            watchdog.expire()


_timers = _Timers()


def _shutdown(sock: socket.socket | None) -> None:
    if sock is None:
        return
    # shutdown (not close) wakes a recv blocked in another thread; the base-class call avoids
    # SSLSocket.shutdown, which would also drop the TLS state from under that thread.
    with contextlib.suppress(OSError):
        socket.socket.shutdown(sock, socket.SHUT_RDWR)


@contextlib.contextmanager
def watching(seconds: float) -> Iterator[Watchdog]:
    """A watchdog expiring in `seconds`, this thread's current one until the block ends."""
    watchdog = Watchdog(seconds)
    _local.watchdog = watchdog
    try:
        yield watchdog
    finally:
        watchdog.cancel()
        _local.watchdog = None


def watch_current(sock: socket.socket | None) -> None:
    """Hand `sock` to the watchdog of the call this thread is making, if any."""
    watchdog = getattr(_local, "watchdog", None)
    if watchdog is not None:
        watchdog.watch(sock)
