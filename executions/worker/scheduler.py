"""The dispatcher of `runworker`: claim loop, LISTEN/NOTIFY wake-ups, heartbeat and shutdown.

Invariants:
- it claims only free capacity: a claim asks for at most min(WORKER_BATCH, free slots) rows, and
  every claimed execution goes straight to a waiting slot thread, so no claimed work waits in a
  local backlog while its lease ticks away;
- idle, it waits on LISTEN (NOTIFY_WORK wakes it as soon as work commits) and claims anyway every
  WORKER_POLL_MS (due retries, expired leases, lost notifications);
- the heartbeat renews every held lease in one statement every WORKER_RENEW_SECONDS, and
  refreshes this worker's registry row (sql.WORKER_SEEN) in one more. A lease that
  comes back lost cancels exactly that holder (execution id and token): its per-execution
  `threading.Event`, never a thread, so a renewal that returns late cannot disturb a different
  execution now running on the same thread. If renewals cannot reach the database for a whole
  lease, the holders are cancelled too: their leases have expired;
- SIGTERM/SIGINT (`request_stop`): stop claiming at once; keep renewing while running work
  drains for up to WORKER_DRAIN_SECONDS (a second signal ends the drain); then signal the
  remaining work to stop, stop renewing and return. Abandoned work keeps its lease and
  checkpoints; another worker recovers it once the lease expires;
- a superseded refusal is settled (logged, slot released), never retried;
- stuck runs: each run reports its deadline (its remaining actions' timeouts plus a margin,
  runner.deadline_seconds); past it the heartbeat stops renewing that lease, cancels the run
  in-process, counts and logs it, and gives its slot back to a new slot thread. Another worker
  recovers the execution once the lease expires; the stuck thread's late writes are fenced out,
  and when it returns it ends instead of taking more work;
- the poison cap: a claim returned with more consecutive takeovers without progress than
  WORKER_MAX_RECLAIMS is settled on the claim connection (RECLAIMS_EXHAUSTED: FAILED, or
  RECONCILIATION_REQUIRED when a write succeeded or is uncertain) instead of run; takeovers
  within a lease of this process losing the database do not count.

Connections: at most 4 per process whatever WORKER_CONCURRENCY: the runtime's shared ones
(runtime.WRITE_CONNECTIONS, borrowed per statement), one for the heartbeat, and one that LISTENs
and also runs the claim statement (notifications that arrive meanwhile are buffered, not lost);
Django's own is closed after the start-up role check. All autocommit; no transaction spans more
than one short write.
"""

import importlib.metadata
import logging
import os
import queue
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg.conninfo import make_conninfo

from .. import sql
from ..claims import Claim, executions_claim
from ..finalize import execution_exhaust_reclaims
from ..leases import ExecutionSuperseded, Fence, lease_owner_name, leases_renew
from .config import WorkerConfig
from .endings import WORKER_ACTOR
from .metrics import WorkerMetrics
from .pooling import PoolingConfig
from .runtime import WorkerRequest, WorkerRuntime, dispatch_once
from .wire import ExecutionPackage

logger = logging.getLogger("executions.worker")

WAKE_CHECK_SECONDS = 0.25  # seconds: longest an idle wait goes without checking for shutdown
REFILL_WAIT_SECONDS = 0.002  # seconds: with a backlog (the last claim was full), wait this long
#                               for more slots to free up, so one claim fills several; never
#                               when work arrives by notification or poll
STOP_GRACE_SECONDS = 1.0  # seconds after the drain for signalled work to notice and stop
RECONNECT_FIRST_SECONDS = 0.1  # seconds before the first attempt to reach a database that went away
RECONNECT_MAX_SECONDS = 5.0  # seconds between attempts at most (the backoff doubles up to this)
try:  # reported in the worker registry
    VERSION = importlib.metadata.version("orquestador")
except importlib.metadata.PackageNotFoundError:  # running from a checkout that is not installed
    VERSION = "unknown"
LIBPQ_OPTIONS = ("sslmode", "sslrootcert", "sslcert", "sslkey", "connect_timeout", "options")


def database_conninfo(db: dict[str, Any], *, application_name: str = "orquestador-worker") -> str:
    """A libpq connection string for a Django DATABASES entry (the worker's own connections)."""
    options = {k: v for k, v in (db.get("OPTIONS") or {}).items() if k in LIBPQ_OPTIONS}
    params = {
        "dbname": db.get("NAME"),
        "user": db.get("USER"),
        "password": db.get("PASSWORD"),
        "host": db.get("HOST"),
        "port": db.get("PORT"),
        "application_name": application_name,
        **options,
    }
    return make_conninfo(**{k: str(v) for k, v in params.items() if v not in (None, "")})


class DatabaseState:
    """Whether this process can reach PostgreSQL, as its claim loop and heartbeat see it.

    Logs once per change (unreachable, reachable again), not once per failed attempt, and says
    how long an outage has lasted so far."""

    def __init__(self, owner: str, on_return: Callable[[], None] | None = None) -> None:
        self._owner = owner
        self._on_return = on_return  # called once when the database is reachable again
        self._lock = threading.Lock()
        self.down_since: float | None = None
        self.back_since: float | None = None  # when the last outage ended (the poison cap)
        self.outages = 0  # outages seen since start, for tests and logs

    def failed(self, where: str, exc: BaseException) -> None:
        with self._lock:
            if self.down_since is not None:
                return
            self.down_since = time.monotonic()
            self.outages += 1
        logger.warning(
            "database unreachable",
            extra={
                "owner": self._owner,
                "where": where,
                "error": type(exc).__name__,
                "detail": (str(exc).strip().splitlines() or [""])[0][:200],
            },
        )

    def reached(self, where: str) -> None:
        with self._lock:
            if self.down_since is None:
                return
            lasted, self.down_since = time.monotonic() - self.down_since, None
            self.back_since = time.monotonic()
        logger.warning(
            "database reachable again",
            extra={"owner": self._owner, "where": where, "outage_seconds": round(lasted, 3)},
        )
        if self._on_return is not None:
            self._on_return()

    def down_for(self) -> float:
        """Seconds the current outage has lasted (0 when the database is reachable)."""
        with self._lock:
            return 0.0 if self.down_since is None else time.monotonic() - self.down_since


@dataclass
class Holding:
    """One execution this process holds: its claim (and holder) and its stop signal."""

    claim: Claim
    cancelled: threading.Event = field(default_factory=threading.Event)
    renewed_at: float = field(default_factory=time.monotonic)  # last confirmed renewal
    lost: bool = False
    deadline_at: float | None = None  # monotonic; the run reports it (runner.deadline_seconds)
    abandoned: bool = False  # stuck past its deadline: lease left to expire, slot given back

    def set_deadline(self, seconds: float) -> None:
        self.deadline_at = time.monotonic() + seconds

    @property
    def fence(self) -> Fence:
        return self.claim.fence


class Scheduler:
    """Claims executions and runs them through a `WorkerRuntime` until told to stop."""

    def __init__(
        self,
        *,
        config: WorkerConfig,
        conninfo: str,
        runtime: WorkerRuntime,
        owner: str | None = None,
        metrics: WorkerMetrics | None = None,
        pooling: PoolingConfig | None = None,
    ) -> None:
        self.config = config
        self.conninfo = conninfo
        self.pooling = pooling or PoolingConfig()
        # Behind a transaction pooler LISTEN needs a session of its own: a direct connection
        # (WORKER_LISTEN_DATABASE_URL), or none at all, and then the worker polls.
        self.listen_conninfo = (
            make_conninfo(self.pooling.listen_url, application_name="orquestador-worker")
            if self.pooling.transaction_pooled and self.pooling.listen_url
            else None
        )
        self._listener: psycopg.Connection | None = None
        self.runtime = runtime
        self.owner = owner or lease_owner_name()
        # Counters only: recording is one lock and an addition, never I/O (metrics.py).
        self.metrics = metrics or WorkerMetrics()
        self.metrics.track_slots(slots=config.concurrency, busy=lambda: self.busy)
        self._stop_claiming = threading.Event()
        self._end_drain = threading.Event()
        self._stop_heartbeat = threading.Event()
        self._slots = threading.Condition()
        self._busy = 0
        self._held: dict[uuid.UUID, Holding] = {}
        self._work: queue.SimpleQueue[tuple[Claim, Holding] | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self.claimed = 0  # executions claimed by this scheduler, for tests and logs
        # When the database comes back, the runtime replaces the connections the outage broke
        # before any run borrows one.
        self.database = DatabaseState(
            self.owner, on_return=getattr(runtime, "refresh_connections", None)
        )
        self.outage_exit = False  # set when it stopped because of WORKER_DB_OUTAGE_EXIT_SECONDS
        self.running = threading.Event()  # set once it listens and claims
        self.idle = threading.Event()  # set while it waits for a notification or the poll
        self.finished = threading.Event()  # set when run() has returned

    # -- control ---------------------------------------------------------------------------

    def request_stop(self) -> None:
        """Stop claiming now and drain (signal-safe: only sets events). Twice: end the drain."""
        # No locks here: a signal handler may run while this thread holds one. Every wait in
        # this module is bounded by WAKE_CHECK_SECONDS, so the events are seen promptly.
        if self._stop_claiming.is_set():
            self._end_drain.set()
        self._stop_claiming.set()

    @property
    def busy(self) -> int:
        with self._slots:
            return self._busy

    def holdings(self) -> list[Holding]:
        with self._slots:
            return list(self._held.values())

    def run(self) -> None:
        """Claim and run until `request_stop`, then drain and return."""
        for index in range(self.config.concurrency):
            self._start(self._slot, f"worker-slot-{index}")
        self._start(self._heartbeat, "worker-heartbeat")
        logger.info(
            "worker started",
            extra={
                "owner": self.owner,
                "concurrency": self.config.concurrency,
                "batch": self.config.batch,
                "lease_seconds": self.config.lease_seconds,
            },
        )
        try:
            self._claim_loop()
        finally:
            self._shutdown()
            self.finished.set()

    def _start(self, target: Any, name: str) -> None:
        thread = threading.Thread(target=target, name=name, daemon=True)
        thread.start()
        self._threads.append(thread)

    # -- claiming --------------------------------------------------------------------------

    def _listen(self) -> psycopg.Connection:
        """The claiming connection; it also LISTENs, unless behind a transaction pooler."""
        conn = psycopg.connect(
            self.conninfo, autocommit=True, prepare_threshold=self.pooling.prepare_threshold
        )
        for statement in self.pooling.session_statements(claims=True):
            conn.execute(statement)
        if not self.pooling.transaction_pooled:
            conn.execute(sql.LISTEN_WORK)
        elif self.listen_conninfo is not None and self._listener is None:
            self._listener = psycopg.connect(self.listen_conninfo, autocommit=True)
            self._listener.execute(sql.LISTEN_WORK)
        return conn

    def _close_listener(self) -> None:
        if self._listener is not None:
            self._listener.close()
            self._listener = None

    def _claim_loop(self) -> None:
        conn: psycopg.Connection | None = None
        backlog = False  # the last claim took all it asked for: more work is probably due
        reconnect_wait = RECONNECT_FIRST_SECONDS
        try:
            while not self._stop_claiming.is_set():
                try:
                    if conn is None:
                        conn = self._listen()
                        self.running.set()
                    limit = self._free_slots(backlog=backlog)
                    if limit == 0:
                        continue
                    claim_started = time.perf_counter()
                    claims = executions_claim(
                        conn=conn,
                        owner=self.owner,
                        limit=limit,
                        lease_seconds=self.config.lease_seconds,
                        outage=self._outage_within_lease(),
                    )
                    self.metrics.claim_done(
                        claimed=len(claims), seconds=time.perf_counter() - claim_started
                    )
                    if taken := sum(1 for claim in claims if claim.taken_over):
                        self.metrics.taken_over(taken)
                    self.database.reached("claim")
                    reconnect_wait = RECONNECT_FIRST_SECONDS
                    for claim in claims:
                        if claim.poisoned(self.config.max_reclaims):
                            self._settle_poisoned(conn, claim)
                        else:
                            self._dispatch(claim)
                    backlog = len(claims) == limit
                    if not backlog:
                        self._wait_for_work(conn)
                except psycopg.OperationalError as exc:
                    # Unreachable (or restarting): claim nothing, keep what runs, retry with a
                    # capped backoff, and say so once, not at every attempt.
                    self.metrics.claim_failed()
                    self.database.failed("claim", exc)
                    logger.debug("claim retry", extra={"owner": self.owner, "detail": str(exc)})
                    if conn is not None:
                        conn.close()
                    conn = None
                    self._close_listener()
                    backlog = False
                    if self._outage_too_long():
                        break
                    self._stop_claiming.wait(reconnect_wait)
                    reconnect_wait = min(reconnect_wait * 2, RECONNECT_MAX_SECONDS)
        finally:
            if conn is not None:
                conn.close()
            self._close_listener()

    def _outage_too_long(self) -> bool:
        """WORKER_DB_OUTAGE_EXIT_SECONDS has passed in this outage: stop so an orchestrator
        restarts the process (running work drains, then what is left is abandoned as usual)."""
        limit = self.config.db_outage_exit_seconds
        if limit is None or self.database.down_for() < limit:
            return False
        self.outage_exit = True
        logger.error(
            "database unreachable for too long; stopping",
            extra={"owner": self.owner, "outage_seconds": round(self.database.down_for(), 3)},
        )
        self._stop_claiming.set()
        return True

    def _outage_within_lease(self) -> bool:
        """Whether this process lost the database less than a lease ago: leases it takes over
        now may have lapsed for that reason, and do not count toward the poison cap."""
        database = self.database
        return database.down_since is not None or (
            database.back_since is not None
            and time.monotonic() - database.back_since < self.config.lease_seconds
        )

    def _settle_poisoned(self, conn: psycopg.Connection, claim: Claim) -> None:
        """The poison cap: an execution taken over more than WORKER_MAX_RECLAIMS times in a row
        without progress is settled (RECLAIMS_EXHAUSTED) instead of run, on the claim's own
        connection and token; a database error leaves it for the next claim to try again."""
        extra = {**claim.fence.log_extra(attempt=claim.attempts), "reclaims": claim.reclaims}
        try:
            status = execution_exhaust_reclaims(
                conn=conn, fence=claim.fence, reclaims=claim.reclaims, actor=WORKER_ACTOR
            )
        except ExecutionSuperseded:
            logger.info("poison execution taken over before it was settled", extra=extra)
            return
        except psycopg.OperationalError:
            raise
        except psycopg.Error:
            logger.exception(
                "poison execution could not be settled; left for recovery", extra=extra
            )
            return
        self.metrics.reclaims_exhausted()
        logger.warning("poison execution settled", extra={**extra, "status": status})

    def _free_slots(self, *, backlog: bool) -> int:
        """Wait for a free slot; return how many to claim (0 when stopping or still full)."""
        config = self.config
        target = min(config.batch, config.concurrency)
        with self._slots:
            self._slots.wait_for(
                lambda: self._busy < config.concurrency or self._stop_claiming.is_set(),
                timeout=WAKE_CHECK_SECONDS,
            )
            if backlog and self._busy and config.concurrency - self._busy < target:
                self._slots.wait_for(
                    lambda: (
                        config.concurrency - self._busy >= target or self._stop_claiming.is_set()
                    ),
                    timeout=REFILL_WAIT_SECONDS,
                )
            if self._stop_claiming.is_set():
                return 0
            return min(config.batch, config.concurrency - self._busy)

    def _wait_for_work(self, conn: psycopg.Connection) -> None:
        """Idle: return on a notification, after WORKER_POLL_MS, or when told to stop."""
        deadline = time.monotonic() + self.config.poll_seconds
        notifier = conn if not self.pooling.transaction_pooled else self._listener
        self.idle.set()
        try:
            while not self._stop_claiming.is_set():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return
                wait = min(remaining, WAKE_CHECK_SECONDS)
                if notifier is None:  # no session to LISTEN on: poll
                    self._stop_claiming.wait(wait)
                    continue
                for _ in notifier.notifies(timeout=wait, stop_after=1):
                    return
        finally:
            self.idle.clear()

    def _hold(self, claim: Claim) -> Holding:
        """Take a slot for a claimed execution and start renewing its lease."""
        holding = Holding(claim=claim)
        with self._slots:
            self._busy += 1
            self._held[claim.execution_id] = holding
        return holding

    def _unhold(self, holding: Holding) -> None:
        """Free the slot; stop renewing, unless the execution is held again under a new token."""
        with self._slots:
            if holding.abandoned:
                return  # its slot was given back when it passed its deadline
            self._busy -= 1
            if self._held.get(holding.fence.execution_id) is holding:
                del self._held[holding.fence.execution_id]
            self._slots.notify_all()

    def _dispatch(self, claim: Claim) -> None:
        holding = self._hold(claim)
        self.claimed += 1
        logger.info(
            "execution taken over" if claim.taken_over else "execution claimed",
            extra=holding.fence.log_extra(attempt=claim.attempts),
        )
        self._work.put((claim, holding))

    # -- running ---------------------------------------------------------------------------

    def _slot(self) -> None:
        while True:
            item = self._work.get()
            if item is None:
                return
            claim, holding = item
            package = ExecutionPackage(
                fence=claim.fence,
                flow_id=claim.flow_id,
                transition_id=claim.transition_id,
                attempts=claim.attempts,
                principal=claim.principal,
            )
            try:
                result = dispatch_once(
                    self.runtime,
                    package,
                    WorkerRequest(
                        fence=claim.fence,
                        cancelled=holding.cancelled,
                        snapshot=claim.snapshot,
                        report_deadline=holding.set_deadline,
                    ),
                )
                self.metrics.run_ended(result)
            except Exception:
                # Left RUNNING with its checkpoints: another claim recovers it once the lease
                # expires, and the recovery rules decide what may be repeated.
                self.metrics.run_raised()
                logger.exception(
                    "execution run failed; left for recovery by lease",
                    extra=holding.fence.log_extra(attempt=claim.attempts),
                )
            finally:
                self._unhold(holding)
            if holding.abandoned:
                # A stuck run came back late: its writes were fenced out, a replacement thread
                # already took its slot, so this thread ends here.
                logger.warning(
                    "stuck run returned after its slot was given back",
                    extra=holding.fence.log_extra(attempt=claim.attempts),
                )
                return

    # -- heartbeat -------------------------------------------------------------------------

    def _heartbeat(self) -> None:
        conn: psycopg.Connection | None = self._seen(None)
        try:
            while not self._stop_heartbeat.wait(self.config.renew_seconds):
                conn = self._seen(self._renew(conn))
        finally:
            if conn is not None:
                conn.close()

    def _seen(
        self, conn: psycopg.Connection | None, *, retry_stale: bool = True
    ) -> psycopg.Connection | None:
        """Refresh this worker's registry row (one statement); a failure is only logged.

        A connection opened before an outage is broken once the server is back: the first
        statement on it fails although the database is reachable. That is not a new outage, so
        a failure on an already-open connection is retried once on a fresh one before it counts.
        """
        stale = conn is not None
        try:
            conn = conn or self._connect()
            conn.execute(
                sql.WORKER_SEEN,
                {
                    "owner": self.owner,
                    "host": socket.gethostname(),
                    "pid": os.getpid(),
                    "concurrency": self.config.concurrency,
                    "running": self.busy,
                    "renew_seconds": self.config.renew_seconds,
                    "lease_seconds": self.config.lease_seconds,
                    "version": VERSION,
                },
            )
        except psycopg.Error as exc:
            if isinstance(exc, psycopg.OperationalError) and stale and retry_stale:
                conn.close()
                return self._seen(None, retry_stale=False)
            if isinstance(exc, psycopg.OperationalError):
                self.database.failed("registry", exc)  # logged once per outage
            else:
                logger.warning("worker registry not refreshed", extra={"owner": self.owner})
            if conn is not None:
                conn.close()
            return None
        return conn

    def _renew(self, conn: psycopg.Connection | None) -> psycopg.Connection | None:
        now = time.monotonic()
        for holding in self.holdings():
            if holding.deadline_at is not None and now > holding.deadline_at:
                self._stuck(holding)
        holdings = [h for h in self.holdings() if not h.lost]
        if not holdings:
            return conn
        sent_at = time.monotonic()
        try:
            try:
                conn = conn or self._connect()
                renewed = self._renew_on(conn, holdings)
            except psycopg.OperationalError:
                # A connection opened before an outage fails its first statement once the server
                # is back; that is not a new outage: one retry on a fresh connection (as _seen).
                if conn is None or not conn.broken:
                    raise
                conn.close()
                conn = None
                conn = self._connect()
                renewed = self._renew_on(conn, holdings)
        except psycopg.Error as exc:
            if isinstance(exc, psycopg.OperationalError):
                self.database.failed("renewal", exc)  # logged once per outage
            else:
                logger.exception("lease renewal failed", extra={"owner": self.owner})
            if conn is not None:
                conn.close()
            for holding in holdings:
                if sent_at - holding.renewed_at >= self.config.lease_seconds:
                    self._lease_lost(holding, reason="renewals failed for a whole lease")
            return None
        self.database.reached("renewal")
        self._apply_renewal(holdings, renewed, sent_at=sent_at)
        return conn

    def _connect(self) -> psycopg.Connection:
        conn = psycopg.connect(
            self.conninfo, autocommit=True, prepare_threshold=self.pooling.prepare_threshold
        )
        for statement in self.pooling.session_statements():
            conn.execute(statement)
        return conn

    def _renew_on(
        self, conn: psycopg.Connection, holdings: list[Holding]
    ) -> set[tuple[uuid.UUID, int]]:
        return leases_renew(
            conn=conn,
            owner=self.owner,
            held=[h.fence for h in holdings],
            lease_seconds=self.config.lease_seconds,
        )

    def _apply_renewal(
        self, sent: list[Holding], renewed: set[tuple[uuid.UUID, int]], *, sent_at: float
    ) -> None:
        """Act on a renewal's answer, which may come back after the holders it names finished."""
        for holding in sent:
            if (holding.fence.execution_id, holding.fence.token) in renewed:
                holding.renewed_at = sent_at
            else:
                self._lease_lost(holding, reason="lease lost")

    def _lease_lost(self, holding: Holding, *, reason: str) -> None:
        """Cancel exactly this holder: its execution id and token, never a thread."""
        with self._slots:
            still_held = self._held.get(holding.fence.execution_id) is holding
        if not still_held:
            return  # it finished while the renewal was in flight: nothing to stop
        holding.lost = True
        holding.cancelled.set()
        self.metrics.lease_lost()
        self.runtime.cancel(str(holding.fence.execution_id), reason, token=holding.fence.token)
        logger.warning(
            "lease lost",
            extra=holding.fence.log_extra(attempt=holding.claim.attempts, reason=reason),
        )

    def _stuck(self, holding: Holding) -> None:
        """A run past its deadline: stop renewing its lease (another worker recovers it by the
        SPEC §3 rules once it expires), cancel it in-process, count it, and give its slot back
        with a new slot thread, so a thread that never returns does not cost capacity."""
        with self._slots:
            if self._held.get(holding.fence.execution_id) is not holding or holding.abandoned:
                return
            del self._held[holding.fence.execution_id]
            holding.lost = holding.abandoned = True
            self._busy -= 1
            self._slots.notify_all()
        holding.cancelled.set()
        self.metrics.stuck_run()
        execution_id, token = str(holding.fence.execution_id), holding.fence.token
        self.runtime.cancel(execution_id, "past its deadline", token=token)
        logger.warning(
            "run past its deadline; lease no longer renewed, slot given back",
            extra=holding.fence.log_extra(attempt=holding.claim.attempts),
        )
        self._start(self._slot, f"worker-slot-after-{execution_id[:8]}")

    # -- shutdown --------------------------------------------------------------------------

    def _shutdown(self) -> None:
        deadline = time.monotonic() + self.config.drain_seconds
        logger.info("worker draining", extra={"owner": self.owner, "running": self.busy})
        with self._slots:
            while self._busy and not self._end_drain.is_set():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._slots.wait(min(remaining, WAKE_CHECK_SECONDS))
        abandoned = self.holdings()
        for holding in abandoned:
            holding.cancelled.set()
            self.runtime.cancel(
                str(holding.fence.execution_id), "shutdown", token=holding.fence.token
            )
            logger.warning(
                "execution abandoned at shutdown",
                extra=holding.fence.log_extra(attempt=holding.claim.attempts),
            )
        self._stop_heartbeat.set()
        with self._slots:
            self._slots.wait_for(lambda: self._busy == 0, timeout=STOP_GRACE_SECONDS)
        for _ in range(self.config.concurrency):
            self._work.put(None)
        for thread in self._threads:
            thread.join(timeout=0.1 if abandoned else STOP_GRACE_SECONDS)
        logger.info(
            "worker stopped",
            extra={"owner": self.owner, "claimed": self.claimed, "abandoned": len(abandoned)},
        )
