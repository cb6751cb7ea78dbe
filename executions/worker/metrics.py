"""The worker's own metrics: counters and a claim latency histogram kept in the runworker process,
served in the Prometheus text format on an optional port (docs/operations.md#metrics; why by hand:
docs/adr/0005-metrics-without-a-client-library.md).

Invariants: recording is one lock acquisition and an addition (a histogram, a bisect more), so
nothing on the execution path waits for a scrape, which copies under the lock and formats outside
it; label values come from closed sets, never an id, owner, tenant, lease owner or secret; the
endpoint is off unless WORKER_METRICS_PORT is set, listens on WORKER_METRICS_HOST from one stdlib
thread, answers `GET /metrics` only, asks for METRICS_TOKEN when set; both validated at start.
"""

import bisect
import ipaddress
import logging
import re
import socket
import threading
from collections.abc import Callable, Mapping
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from orquestador.bearer import metrics_token_matches
from orquestador.exposition import CONTENT_TYPE, Family, Sample, number, render
from orquestador.workerconfig import DEFAULT_METRICS_HOST, WorkerConfigError

from ..models import ExecutionStatus
from .callmetrics import CALLS
from .wire import Ending, ExecutionResult

logger = logging.getLogger("executions.worker")

REQUEST_TIMEOUT_SECONDS = 5.0  # seconds a scrape connection may stay silent before it is closed
SERVE_POLL_SECONDS = 0.5  # seconds between the server thread's checks for shutdown
# Upper bounds, in seconds, of the claim latency buckets: a claim is one indexed statement, so
# most take a few milliseconds; the tail shows lock waits, bloat or a distant database.
CLAIM_LATENCY_BOUNDS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)

CLAIMS = "orquestador_worker_claims_total"
CLAIM_ERRORS = "orquestador_worker_claim_errors_total"
CLAIMED = "orquestador_worker_claimed_executions_total"
FINISHED = "orquestador_worker_executions_finished_total"
RETRIES = "orquestador_worker_retries_scheduled_total"
RECONCILIATIONS = "orquestador_worker_reconciliations_total"
LEASE_LOSSES = "orquestador_worker_lease_losses_total"
SUPERSEDED = "orquestador_worker_superseded_total"
INTERRUPTED = "orquestador_worker_interrupted_total"
RUN_ERRORS = "orquestador_worker_run_errors_total"
RECLAIMS_EXHAUSTED = "orquestador_worker_reclaims_exhausted_total"
STUCK_RUNS = "orquestador_worker_stuck_runs_total"
TAKEOVERS = "orquestador_worker_takeovers_total"
PROBES = "orquestador_worker_probes_total"
AUTO_RESOLUTIONS = "orquestador_worker_automatic_resolutions_total"
PROBE_OUTCOMES = ("found", "not_found", "error")  # what the provider's lookup answered
AUTO_RESOLUTION_KINDS = ("WRITE_HAPPENED", "WRITE_NOT_HAPPENED")  # what the prober may settle
CLAIM_LATENCY = "orquestador_worker_claim_latency_seconds"
# the final statuses a worker run can end in
FINAL_STATUSES = ("SUCCEEDED", "FAILED", "COMPENSATED")

# Counter families: name, help, and the label's values (None: no label). The label is `status`
# unless _LABELS names another.
_COUNTERS: tuple[tuple[str, str, tuple[str, ...] | None], ...] = (
    (CLAIMS, "Claim statements this worker ran.", None),
    (CLAIM_ERRORS, "Claim statements that failed; the worker reconnects and claims again.", None),
    (CLAIMED, "Executions this worker claimed.", None),
    (FINISHED, "Executions this worker ended in a final status, by status.", FINAL_STATUSES),
    (RETRIES, "Retries this worker scheduled after a transient failure (RETRY_WAIT).", None),
    (
        RECONCILIATIONS,
        "Executions this worker handed to an operator (RECONCILIATION_REQUIRED).",
        None,
    ),
    (LEASE_LOSSES, "Executions this worker stopped because their lease was lost.", None),
    (
        SUPERSEDED,
        "Runs refused because another holder owns the execution (settled, never retried).",
        None,
    ),
    (
        INTERRUPTED,
        "Runs stopped between two steps (lease lost, or shutdown past the drain), left for "
        "recovery.",
        None,
    ),
    (RUN_ERRORS, "Runs that raised unexpectedly, left RUNNING for recovery by lease.", None),
    (
        RECLAIMS_EXHAUSTED,
        "Executions settled instead of run because they were taken over more than "
        "WORKER_MAX_RECLAIMS times in a row without progress (the poison cap).",
        None,
    ),
    (
        STUCK_RUNS,
        "Runs still going past their deadline: lease no longer renewed, slot given back.",
        None,
    ),
    (
        TAKEOVERS,
        "Executions this worker claimed from a holder whose lease had expired (LEASE_TAKEN_OVER).",
        None,
    ),
    (
        PROBES,
        "Provider lookups this worker's prober made about uncertain writes, by outcome.",
        PROBE_OUTCOMES,
    ),
    (
        AUTO_RESOLUTIONS,
        "Cases this worker's prober resolved without a person (system:prober), by resolution.",
        AUTO_RESOLUTION_KINDS,
    ),
)
_LABELS = {PROBES: "outcome", AUTO_RESOLUTIONS: "resolution"}

# Where each resting status of a finished run is counted.
_BY_STATUS = {
    ExecutionStatus.SUCCEEDED: (FINISHED, "SUCCEEDED"),
    ExecutionStatus.FAILED: (FINISHED, "FAILED"),
    ExecutionStatus.COMPENSATED: (FINISHED, "COMPENSATED"),
    ExecutionStatus.RETRY_WAIT: (RETRIES, None),
    ExecutionStatus.RECONCILIATION_REQUIRED: (RECONCILIATIONS, None),
}
# Where each refused dispatch (no run) is counted.
_BY_REFUSAL = {
    Ending.SUPERSEDED: (SUPERSEDED, None),
    Ending.INTERRUPTED: (INTERRUPTED, None),
}


class WorkerMetrics:
    """Counters and the claim latency histogram of one worker process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[tuple[str, str | None], int] = {}
        for name, _, statuses in _COUNTERS:
            for status in statuses or (None,):
                self._counts[(name, status)] = 0
        self._latency_buckets = [0] * (len(CLAIM_LATENCY_BOUNDS) + 1)  # the last one is +Inf
        self._latency_sum = 0.0
        self._slots = 0
        self._busy: Callable[[], int] | None = None

    # -- recording (the worker's threads) ----------------------------------------------------

    def _add(self, key: tuple[str, str | None], amount: int = 1) -> None:
        with self._lock:
            self._counts[key] += amount

    def claim_done(self, *, claimed: int, seconds: float) -> None:
        """One claim statement took `seconds` and claimed `claimed` executions."""
        bucket = bisect.bisect_left(CLAIM_LATENCY_BOUNDS, seconds)
        with self._lock:
            self._counts[(CLAIMS, None)] += 1
            self._counts[(CLAIMED, None)] += claimed
            self._latency_buckets[bucket] += 1
            self._latency_sum += seconds

    def taken_over(self, count: int) -> None:
        """A claim took over `count` executions whose lease had expired."""
        self._add((TAKEOVERS, None), count)

    def probed(self, outcome: str) -> None:
        """The prober asked the provider: `outcome` is one of PROBE_OUTCOMES."""
        self._add((PROBES, outcome))

    def resolved_automatically(self, resolution: str) -> None:
        """The prober resolved a case: `resolution` is one of AUTO_RESOLUTION_KINDS."""
        self._add((AUTO_RESOLUTIONS, resolution))

    def claim_failed(self) -> None:
        self._add((CLAIM_ERRORS, None))

    def run_ended(self, result: ExecutionResult) -> None:
        """Count what `dispatch_once` returned: where the run left the execution, or a refusal."""
        if result.run is not None:
            key = _BY_STATUS.get(result.run.status)
        else:
            key = _BY_REFUSAL.get(result.status)
        if key is not None:
            self._add(key)

    def run_raised(self) -> None:
        self._add((RUN_ERRORS, None))

    def reclaims_exhausted(self) -> None:
        self._add((RECLAIMS_EXHAUSTED, None))

    def stuck_run(self) -> None:
        self._add((STUCK_RUNS, None))

    def lease_lost(self) -> None:
        self._add((LEASE_LOSSES, None))

    def track_slots(self, *, slots: int, busy: Callable[[], int]) -> None:
        """Report `slots` and, at each scrape, `busy()` executions running now."""
        self._slots, self._busy = slots, busy

    # -- reading (a scrape) ------------------------------------------------------------------

    def value(self, name: str, status: str | None = None) -> int:
        with self._lock:
            return self._counts[(name, status)]

    def families(self) -> list[Family]:
        with self._lock:
            counts = dict(self._counts)
            buckets = list(self._latency_buckets)
            latency_sum = self._latency_sum
        families = []
        for name, help_text, statuses in _COUNTERS:
            label = _LABELS.get(name, "status")
            samples = [
                Sample(counts[(name, s)], ((label, s),) if s else ()) for s in statuses or (None,)
            ]
            families.append(Family(name, "counter", help_text, samples))
        cumulative, latency = 0, []
        for bound, count in zip((*CLAIM_LATENCY_BOUNDS, float("inf")), buckets, strict=True):
            cumulative += count
            latency.append(Sample(cumulative, (("le", number(bound)),), "_bucket"))
        latency += [Sample(latency_sum, (), "_sum"), Sample(cumulative, (), "_count")]
        families.append(
            Family(
                CLAIM_LATENCY,
                "histogram",
                "Time one claim statement took, a round trip to PostgreSQL, in seconds.",
                latency,
            )
        )
        families += CALLS.families()  # per-route calls, counted where the adapter is called
        if self._busy is not None:
            families += [
                Family(
                    "orquestador_worker_slots",
                    "gauge",
                    "Executions this worker can run at once (WORKER_CONCURRENCY).",
                    [Sample(self._slots)],
                ),
                Family(
                    "orquestador_worker_slots_busy",
                    "gauge",
                    "Executions this worker is running now.",
                    [Sample(self._busy())],
                ),
            ]
        return families

    def text(self) -> str:
        return render(self.families())


# ------------------------------------------------------------------------------
# Configuration: WORKER_METRICS_PORT and WORKER_METRICS_HOST
# ------------------------------------------------------------------------------
_PORT = re.compile(r"[0-9]{1,5}")


def metrics_address(raw: Mapping[str, str]) -> tuple[str, int] | None:
    """Validate WORKER_METRICS_PORT and WORKER_METRICS_HOST; None when no port is set (off)."""
    port_text = raw.get("WORKER_METRICS_PORT", "").strip()
    if not port_text:
        return None
    port = int(port_text) if _PORT.fullmatch(port_text) else 0
    if not 1 <= port <= 65535:
        raise WorkerConfigError(
            "WORKER_METRICS_PORT must be a TCP port from 1 to 65535, or empty to serve no worker "
            f"metrics; got {port_text!r}"
        )
    host = raw.get("WORKER_METRICS_HOST", DEFAULT_METRICS_HOST).strip() or DEFAULT_METRICS_HOST
    try:
        ipaddress.ip_address(host)
    except ValueError:
        raise WorkerConfigError(
            f"WORKER_METRICS_HOST must be an IP address to listen on ({DEFAULT_METRICS_HOST} by "
            f"default); got {host!r}"
        ) from None
    return host, port


# ------------------------------------------------------------------------------
# The endpoint
# ------------------------------------------------------------------------------
class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], *, metrics: WorkerMetrics, token: str) -> None:
        if ipaddress.ip_address(address[0]).version == 6:
            self.address_family = socket.AF_INET6
        self.metrics = metrics
        self.token = token
        super().__init__(address, _Handler)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    timeout = REQUEST_TIMEOUT_SECONDS
    server_version = "orquestador-worker"
    sys_version = ""

    def do_GET(self) -> None:
        if self.path.partition("?")[0] != "/metrics":
            self._answer(HTTPStatus.NOT_FOUND, b"not found: try /metrics\n")
        elif not metrics_token_matches(self.headers.get("Authorization"), self.server.token):
            self._answer(
                HTTPStatus.UNAUTHORIZED,
                b"this endpoint needs the metrics bearer token\n",
                headers={"WWW-Authenticate": 'Bearer realm="metrics"'},
            )
        else:
            body = self.server.metrics.text().encode()
            self._answer(HTTPStatus.OK, body, content_type=CONTENT_TYPE)

    def _answer(
        self,
        status: HTTPStatus,
        body: bytes,
        *,
        content_type: str = "text/plain; charset=utf-8",
        headers: Mapping[str, str] | None = None,
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        """Scrapes are not events: no log line per request."""


class MetricsEndpoint:
    """The running endpoint (or none, when off); closing it stops its thread."""

    def __init__(self, server: _Server | None = None) -> None:
        self._server = server
        self._thread: threading.Thread | None = None
        if server is not None:
            self._thread = threading.Thread(
                target=server.serve_forever,
                kwargs={"poll_interval": SERVE_POLL_SECONDS},
                name="worker-metrics",
                daemon=True,
            )
            self._thread.start()

    @property
    def address(self) -> tuple[str, int] | None:
        if self._server is None:
            return None
        host, port = self._server.server_address[:2]
        return str(host), int(port)

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> "MetricsEndpoint":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def metrics_listen(
    *, metrics: WorkerMetrics, address: tuple[str, int] | None, token: str
) -> MetricsEndpoint:
    """Serve `metrics` at http://host:port/metrics from a daemon thread; nothing when `address`
    is None. A port that cannot be bound is a configuration error naming WORKER_METRICS_PORT."""
    if address is None:
        return MetricsEndpoint()
    host, port = address
    try:
        server = _Server((host, port), metrics=metrics, token=token)
    except OSError as exc:
        raise WorkerConfigError(
            f"WORKER_METRICS_PORT: cannot listen on {host} port {port}: {exc.strerror or exc}"
        ) from None
    endpoint = MetricsEndpoint(server)
    bound_host, bound_port = endpoint.address or address
    logger.info(
        "worker metrics listening",
        extra={"host": bound_host, "port": bound_port, "path": "/metrics"},
    )
    return endpoint
