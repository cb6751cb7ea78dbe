"""The probe loop of a runworker process: a thread that runs a pass of automatic probes
(probes.py) whenever the worker has a free slot, and waits when nothing was due."""

import logging
import threading
from collections.abc import Callable

import psycopg
from django.db import InterfaceError, OperationalError, connection
from psycopg_pool import PoolTimeout

from executions.worker.metrics import WorkerMetrics

from .probedb import ConnectionSource
from .probes import probes_run_once

logger = logging.getLogger("reconciliation.probes")

PROBE_POLL_SECONDS = 1.0  # seconds between probe passes when nothing was due


# What a pass meets when the database goes away under it: the runtime's pool (psycopg) or
# Django's own connection.
_UNREACHABLE = (psycopg.OperationalError, PoolTimeout, OperationalError, InterfaceError)


class Prober(threading.Thread):
    """The probe loop of a runworker process, until `stop` is set.

    Probes are background work: a pass runs only while `may_probe()` (the worker has a free
    slot). Its database steps borrow the connection the worker's runtime keeps for it from
    `source` one step at a time (probedb.py), so the prober opens none of its own; without a
    source (a remote runtime) it uses Django's connection and closes it after every pass.
    """

    def __init__(
        self,
        *,
        owner: str,
        may_probe: Callable[[], bool] = lambda: True,
        metrics: WorkerMetrics | None = None,
        source: ConnectionSource | None = None,
    ) -> None:
        super().__init__(name="worker-prober", daemon=True)
        self.owner = owner
        self.metrics = metrics
        self.source = source
        self.may_probe = may_probe
        self.stop = threading.Event()
        self._away = False  # the last pass found the database unreachable

    def run(self) -> None:
        while not self.stop.is_set():
            ran = 0
            if self.may_probe():
                try:
                    ran = probes_run_once(
                        owner=self.owner, metrics=self.metrics, source=self.source
                    )
                except _UNREACHABLE as exc:
                    # An outage, which the scheduler reports once; the next pass retries. When
                    # stopping, the worker closed the connection this pass waited for: no outage.
                    if not self._away and not self.stop.is_set():
                        logger.warning(
                            "probe pass skipped: database unreachable",
                            extra={"owner": self.owner, "error": str(exc)},
                        )
                    self._away = True
                except Exception:
                    logger.exception("probe pass failed", extra={"owner": self.owner})
                else:
                    self._away = False
                finally:
                    connection.close()
            if not ran:
                self.stop.wait(PROBE_POLL_SECONDS)
