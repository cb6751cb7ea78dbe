"""The worker's configuration (docs/worker-protocol.md#configuration), validated once, at start,
from the raw WORKER_* strings: `worker_config(settings.WORKER_ENV)` returns a `WorkerConfig` or
raises `WorkerConfigError` naming the variable and the rule it breaks (`WorkerDisabled` when
WORKER_ENABLED is false); nothing is claimed before it has passed. `database_pooler` checks
DATABASE_POOLER, which every process reads (executions/worker/pooling.py follows it).

It imports nothing of the project: settings validates with it, and the adapters' registry bounds
its timeouts by the lease, so it sits below the apps.
"""

from collections.abc import Mapping
from dataclasses import dataclass

# Defaults, as documented in .env.example; the one place they are written.
DEFAULT_CONCURRENCY = 10  # executions run at once by one process
# Slots of one process, at most: each is a task on its event loop (a few kilobytes), and a
# thousand waiting on slow providers still share the process's four database connections.
MAX_CONCURRENCY = 1_000
DEFAULT_BATCH = 10  # executions claimed by one claim statement, at most
DEFAULT_POLL_MS = 500  # milliseconds between fallback polls
DEFAULT_LEASE_SECONDS = 60.0  # seconds
DEFAULT_RENEW_SECONDS = 15.0  # seconds
DEFAULT_DRAIN_SECONDS = 20.0  # seconds
DEFAULT_RETRY_BASE_SECONDS = 1.0  # seconds
DEFAULT_RETRY_MAX_SECONDS = 300.0  # seconds
DEFAULT_RETRY_AFTER_MAX_SECONDS = 600.0  # seconds
DEFAULT_MAX_RECLAIMS = 5  # consecutive takeovers without progress before the poison cap settles
# Seconds a worker endpoint may hold a web thread for one posted package; a remote runtime waits
# that long plus one renewal period for the answer. At most MAX_ENDPOINT_RUN_SECONDS.
DEFAULT_ENDPOINT_RUN_SECONDS = 300.0
MAX_ENDPOINT_RUN_SECONDS = 3600.0
DEFAULT_METRICS_HOST = "127.0.0.1"  # loopback: a scraper on the same host, or a sidecar
FAIRNESS_ORDERS = ("queue", "tenant")  # WORKER_FAIRNESS values: the claim's order
DEFAULT_FAIRNESS = "queue"
RUNTIMES = ("local", "remote")  # WORKER_RUNTIME values
DEFAULT_RUNTIME = "local"

# Every WORKER_* variable with its default, as the environment spells it: settings.WORKER_ENV is
# read with these, and .env.example documents the same values.
ENV_DEFAULTS = {
    "WORKER_ENABLED": "false",
    "WORKER_CONCURRENCY": str(DEFAULT_CONCURRENCY),
    "WORKER_BATCH": str(DEFAULT_BATCH),
    "WORKER_POLL_MS": str(DEFAULT_POLL_MS),
    "WORKER_LEASE_SECONDS": f"{DEFAULT_LEASE_SECONDS:g}",
    "WORKER_RENEW_SECONDS": f"{DEFAULT_RENEW_SECONDS:g}",
    "WORKER_DRAIN_SECONDS": f"{DEFAULT_DRAIN_SECONDS:g}",
    "WORKER_RETRY_BASE_SECONDS": f"{DEFAULT_RETRY_BASE_SECONDS:g}",
    "WORKER_RETRY_MAX_SECONDS": f"{DEFAULT_RETRY_MAX_SECONDS:g}",
    "WORKER_RETRY_AFTER_MAX_SECONDS": f"{DEFAULT_RETRY_AFTER_MAX_SECONDS:g}",
    "WORKER_MAX_RECLAIMS": str(DEFAULT_MAX_RECLAIMS),
    # The worker's metrics endpoint (executions/worker/metrics.py); no port: off.
    "WORKER_METRICS_PORT": "",
    "WORKER_METRICS_HOST": DEFAULT_METRICS_HOST,
    # Where runworker runs what it claims (executions/worker/remote.py): local or remote.
    "WORKER_RUNTIME": DEFAULT_RUNTIME,
    "WORKER_REMOTE_URL": "",
    # The longest a worker endpoint holds a web thread for one package (and a remote runtime
    # waits for it, plus one renewal period).
    "WORKER_ENDPOINT_RUN_SECONDS": f"{DEFAULT_ENDPOINT_RUN_SECONDS:g}",
    # Behind a transaction pooler (DATABASE_POOLER, executions/worker/pooling.py): a direct
    # connection for LISTEN.
    "WORKER_LISTEN_DATABASE_URL": "",
    # Seconds of database outage after which runworker stops (exit status 3); empty: never.
    "WORKER_DB_OUTAGE_EXIT_SECONDS": "",
    # The order due work is claimed in: queue (oldest first) or tenant (by rank within the
    # tenant, then by age).
    "WORKER_FAIRNESS": DEFAULT_FAIRNESS,
}

_TRUE = frozenset({"true", "1", "yes", "on"})
_FALSE = frozenset({"false", "0", "no", "off", ""})


class WorkerConfigError(Exception):
    """A WORKER_* variable is invalid; the message names it and the rule."""


class WorkerDisabled(Exception):
    """WORKER_ENABLED is false: this process must not run the worker."""


@dataclass(frozen=True)
class WorkerConfig:
    concurrency: int = DEFAULT_CONCURRENCY
    batch: int = DEFAULT_BATCH
    poll_ms: int = DEFAULT_POLL_MS
    lease_seconds: float = DEFAULT_LEASE_SECONDS
    renew_seconds: float = DEFAULT_RENEW_SECONDS
    drain_seconds: float = DEFAULT_DRAIN_SECONDS
    retry_base_seconds: float = DEFAULT_RETRY_BASE_SECONDS
    retry_max_seconds: float = DEFAULT_RETRY_MAX_SECONDS
    retry_after_max_seconds: float = DEFAULT_RETRY_AFTER_MAX_SECONDS
    max_reclaims: int = DEFAULT_MAX_RECLAIMS
    # The longest a worker endpoint holds a web thread for one package; a remote runtime waits
    # that long plus renew_seconds for its answer (executions/worker/endpoint.py, remote.py).
    endpoint_run_seconds: float = DEFAULT_ENDPOINT_RUN_SECONDS
    # Seconds the database may stay unreachable before runworker stops (exit status 3) so an
    # orchestrator restarts it; None (the default): it waits for the database however long.
    db_outage_exit_seconds: float | None = None
    # The claim's order (executions/sql/fairness.py): queue, oldest first; tenant, by rank
    # within the tenant, then by age.
    fairness: str = DEFAULT_FAIRNESS

    def __post_init__(self) -> None:
        # The same rules whether built from the environment or in code (tests, benchmarks).
        for name, value in (
            ("WORKER_CONCURRENCY", self.concurrency),
            ("WORKER_BATCH", self.batch),
            ("WORKER_POLL_MS", self.poll_ms),
            ("WORKER_LEASE_SECONDS", self.lease_seconds),
            ("WORKER_RENEW_SECONDS", self.renew_seconds),
            ("WORKER_DRAIN_SECONDS", self.drain_seconds),
            ("WORKER_RETRY_BASE_SECONDS", self.retry_base_seconds),
            ("WORKER_RETRY_MAX_SECONDS", self.retry_max_seconds),
            ("WORKER_RETRY_AFTER_MAX_SECONDS", self.retry_after_max_seconds),
            ("WORKER_MAX_RECLAIMS", self.max_reclaims),
            ("WORKER_ENDPOINT_RUN_SECONDS", self.endpoint_run_seconds),
        ):
            if not value > 0:
                raise WorkerConfigError(f"{name} must be positive, got {value!r}")
        if self.db_outage_exit_seconds is not None and not self.db_outage_exit_seconds > 0:
            raise WorkerConfigError(
                "WORKER_DB_OUTAGE_EXIT_SECONDS must be empty (off) or a positive number of "
                f"seconds, got {self.db_outage_exit_seconds!r}"
            )
        if self.fairness not in FAIRNESS_ORDERS:
            raise WorkerConfigError(
                "WORKER_FAIRNESS must be queue (due work oldest first) or tenant (by rank within "
                f"its tenant, then by age), got {self.fairness!r}"
            )
        if self.concurrency > MAX_CONCURRENCY:
            raise WorkerConfigError(
                f"WORKER_CONCURRENCY must be at most {MAX_CONCURRENCY:,} (slots of one process; "
                f"run more processes for more), got {self.concurrency}"
            )
        if self.endpoint_run_seconds > MAX_ENDPOINT_RUN_SECONDS:
            raise WorkerConfigError(
                f"WORKER_ENDPOINT_RUN_SECONDS must be at most {MAX_ENDPOINT_RUN_SECONDS:g} "
                f"seconds (a web thread held for one package), got {self.endpoint_run_seconds:g}"
            )
        if not self.renew_seconds < self.lease_seconds / 2:
            raise WorkerConfigError(
                f"WORKER_RENEW_SECONDS must be strictly less than half of WORKER_LEASE_SECONDS "
                f"(got renewal {self.renew_seconds:g}s for a {self.lease_seconds:g}s lease), so "
                "a lease survives one missed renewal"
            )
        if self.retry_max_seconds < self.retry_base_seconds:
            raise WorkerConfigError(
                "WORKER_RETRY_MAX_SECONDS must be at least WORKER_RETRY_BASE_SECONDS "
                f"(got {self.retry_max_seconds:g}s < {self.retry_base_seconds:g}s)"
            )

    @property
    def poll_seconds(self) -> float:
        return self.poll_ms / 1000


def _integer(raw: Mapping[str, str], name: str) -> int:
    text = raw[name].strip()
    try:
        return int(text)
    except ValueError:
        raise WorkerConfigError(f"{name} must be a positive integer, got {text!r}") from None


def _seconds(raw: Mapping[str, str], name: str) -> float:
    text = raw[name].strip()
    try:
        value = float(text)
    except ValueError:
        raise WorkerConfigError(
            f"{name} must be a positive number of seconds, got {text!r}"
        ) from None
    if value != value or value in (float("inf"), float("-inf")):  # NaN or infinite
        raise WorkerConfigError(f"{name} must be a finite number of seconds, got {text!r}")
    return value


POOLER_MODES = ("", "transaction")  # DATABASE_POOLER values (executions/worker/pooling.py)


def database_pooler(raw: str) -> str:
    """The DATABASE_POOLER mode, or WorkerConfigError naming it (the web process checks it too)."""
    mode = raw.strip().lower()
    if mode not in POOLER_MODES:
        raise WorkerConfigError(
            f"DATABASE_POOLER must be empty (a direct connection or a session pooler) or "
            f"'transaction' (DATABASE_URL goes through a transaction pooler such as PgBouncer "
            f"with pool_mode=transaction), got {raw!r}"
        )
    return mode


def worker_enabled(raw: Mapping[str, str]) -> bool:
    text = raw.get("WORKER_ENABLED", "false").strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise WorkerConfigError(f"WORKER_ENABLED must be true or false, got {text!r}")


def worker_config(raw: Mapping[str, str]) -> WorkerConfig:
    """Validate the raw WORKER_* strings (settings.WORKER_ENV) of a process that runs the worker
    and return the configuration; WorkerDisabled when WORKER_ENABLED is false."""
    config = worker_tunables(raw)
    if not worker_enabled(raw):
        raise WorkerDisabled(
            "WORKER_ENABLED is false: this process does not run the worker. Set "
            "WORKER_ENABLED=true to claim and run executions."
        )
    return config


def worker_tunables(raw: Mapping[str, str]) -> WorkerConfig:
    """Validate the WORKER_* tunables whether or not this process claims work (the worker
    endpoint runs executions with them; the catalog bounds timeouts by the lease)."""
    return WorkerConfig(
        concurrency=_integer(raw, "WORKER_CONCURRENCY"),
        batch=_integer(raw, "WORKER_BATCH"),
        poll_ms=_integer(raw, "WORKER_POLL_MS"),
        lease_seconds=_seconds(raw, "WORKER_LEASE_SECONDS"),
        renew_seconds=_seconds(raw, "WORKER_RENEW_SECONDS"),
        drain_seconds=_seconds(raw, "WORKER_DRAIN_SECONDS"),
        retry_base_seconds=_seconds(raw, "WORKER_RETRY_BASE_SECONDS"),
        retry_max_seconds=_seconds(raw, "WORKER_RETRY_MAX_SECONDS"),
        retry_after_max_seconds=_seconds(raw, "WORKER_RETRY_AFTER_MAX_SECONDS"),
        max_reclaims=_integer(raw, "WORKER_MAX_RECLAIMS"),
        endpoint_run_seconds=(
            _seconds(raw, "WORKER_ENDPOINT_RUN_SECONDS")
            if "WORKER_ENDPOINT_RUN_SECONDS" in raw
            else DEFAULT_ENDPOINT_RUN_SECONDS
        ),
        db_outage_exit_seconds=(
            _seconds(raw, "WORKER_DB_OUTAGE_EXIT_SECONDS")
            if raw.get("WORKER_DB_OUTAGE_EXIT_SECONDS", "").strip()
            else None
        ),
        fairness=raw.get("WORKER_FAIRNESS", DEFAULT_FAIRNESS).strip().lower() or DEFAULT_FAIRNESS,
    )
