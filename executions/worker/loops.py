"""Background loops a runworker process runs beside its scheduler, registered by the app that
owns each one (reconciliation's automatic prober registers from its AppConfig.ready, so runworker
starts it without importing reconciliation, which sits above executions).

A loop is a thread built with what the worker shares with it: its lease owner name, whether a
slot is free, its metrics and its prober connection. runworker starts each loop before the
scheduler runs, sets its `stop` when the scheduler returns, closes the prober connection's pool
(a loop waiting for it fails at once; a step in flight keeps it to its end), and waits for all
of them at most LOOP_JOIN_SECONDS together.
"""

import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Protocol

import psycopg

from .metrics import WorkerMetrics

LOOP_JOIN_SECONDS = 10  # seconds a stopping worker waits for its loops' steps in flight

# Lends the worker's prober connection for one step (LocalWorkerRuntime.connection): a loop is a
# thread, so a synchronous connection, counted in the process's budget of four.
ConnectionSource = Callable[[], AbstractContextManager[psycopg.Connection]]


class WorkerLoop(Protocol):
    stop: threading.Event

    def start(self) -> None: ...

    def join(self, timeout: float | None = None) -> None: ...


class WorkerLoopFactory(Protocol):
    def __call__(
        self,
        *,
        owner: str,
        may_probe: Callable[[], bool],
        metrics: WorkerMetrics | None,
        source: ConnectionSource | None,
    ) -> WorkerLoop: ...


_registered: list[WorkerLoopFactory] = []


def worker_loop_register(factory: WorkerLoopFactory) -> None:
    """Have every runworker of this process start a loop built by `factory` (once per factory)."""
    if factory not in _registered:
        _registered.append(factory)


def worker_loops() -> tuple[WorkerLoopFactory, ...]:
    """The registered loop factories, in the order the apps registered them."""
    return tuple(_registered)
