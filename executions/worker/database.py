"""The worker's view of its database: the connections it opens, and whether it is reachable.

`database_conninfo` turns Django's DATABASES entry into the libpq string the worker's own
connections use; `WorkerConnections` opens the dispatcher's (the runtime's shared ones are
executions/worker/runtime.py's). `DatabaseState` is what the claim loop and the heartbeat share
about outages: it logs once per change (unreachable, reachable again), never once per failed
attempt, and remembers when the last outage ended (the poison cap does not count takeovers
caused by it). An outage ends once the runtime's shared connections serve again, not when the
first loop gets an answer: until then, what any loop meets belongs to the same outage.
"""

import logging
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg
from psycopg.conninfo import make_conninfo

from .. import sql
from .pooling import PoolingConfig

logger = logging.getLogger("executions.worker")

DIRECT = PoolingConfig()  # a session of its own: prepared statements and session settings

# A runworker's own connections. The outbox trigger announces new webhook deliveries on
# WEBHOOK_CHANNEL for every other writer (migration 0019): this process's runs wake its own
# delivery loop (executions/webhooks/running.py), and a NOTIFY per grouped commit would cost
# every commit the notification queue's lock for nothing.
WORKER_APPLICATION_NAME = "orquestador-worker"

LIBPQ_OPTIONS = ("sslmode", "sslrootcert", "sslcert", "sslkey", "connect_timeout", "options")


def database_conninfo(
    db: dict[str, Any], *, application_name: str = WORKER_APPLICATION_NAME
) -> str:
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
    how long an outage has lasted so far. `on_return` says whether the connections the runs and
    renewals share serve again (replacing those the outage broke); the outage ends only then."""

    def __init__(self, owner: str, on_return: Callable[[], Awaitable[bool]] | None = None) -> None:
        self._owner = owner
        self._on_return = on_return
        self._returning = False  # a caller is waiting for on_return: the others go on
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

    async def reached(self, where: str) -> None:
        """`where` got an answer. A loop on a connection of its own (the claims) may get one while
        the shared pool still reconnects on its backoff, and a renewal would then time out on it:
        so the outage ends once `on_return` says the shared connections serve, and not before."""
        with self._lock:
            if self.down_since is None or self._returning:
                return
            self._returning = True
        back, lasted = False, 0.0
        try:
            back = await self._serving()
        finally:
            with self._lock:
                self._returning = False
                if back and self.down_since is not None:
                    lasted, self.down_since = time.monotonic() - self.down_since, None
                    self.back_since = time.monotonic()
        if not back:
            return  # not serving yet: the same outage goes on; the next answer asks again
        logger.warning(
            "database reachable again",
            extra={"owner": self._owner, "where": where, "outage_seconds": round(lasted, 3)},
        )

    async def _serving(self) -> bool:
        if self._on_return is None:
            return True
        try:
            return await self._on_return()
        except psycopg.Error:  # the pool closing, say: it does not serve either
            return False

    def down_for(self) -> float:
        """Seconds the current outage has lasted (0 when the database is reachable)."""
        with self._lock:
            return 0.0 if self.down_since is None else time.monotonic() - self.down_since


class WorkerConnections:
    """The dispatcher's connections (asynchronous): the claiming one, which also LISTENs (behind
    a transaction pooler it is the direct WORKER_LISTEN_DATABASE_URL, or a pooled one that does
    not listen, and then the worker polls), and plain ones (the heartbeat's, with a remote
    runtime). All autocommit, set up with their pooling mode's session statements."""

    def __init__(self, conninfo: str, pooling: PoolingConfig) -> None:
        self.conninfo = conninfo
        self.pooling = pooling
        # Behind a transaction pooler LISTEN needs a session of its own, a direct one. The claims
        # run on it too, as they do on the listening connection without a pooler: a second
        # connection beside it would take the process past its four.
        self._claim_conninfo, self._claim_pooling = (
            (make_conninfo(pooling.listen_url, application_name=WORKER_APPLICATION_NAME), DIRECT)
            if pooling.transaction_pooled and pooling.listen_url
            else (conninfo, pooling)
        )

    async def claiming(self) -> psycopg.AsyncConnection:
        """The claiming connection; it also LISTENs, unless behind a transaction pooler with no
        direct connection to listen on."""
        conn = await self._connect(self._claim_conninfo, self._claim_pooling, claims=True)
        if self.pooling.listens:
            await conn.execute(sql.LISTEN_WORK)
            await conn.execute(sql.LISTEN_CANCELS)
            await conn.execute(sql.LISTEN_WEBHOOKS)
        return conn

    def notifier(self, claiming: psycopg.AsyncConnection) -> psycopg.AsyncConnection | None:
        """Where notifications arrive: the claiming connection, or nowhere (the worker polls)."""
        return claiming if self.pooling.listens else None

    async def plain(self) -> psycopg.AsyncConnection:
        return await self._connect(self.conninfo, self.pooling)

    @staticmethod
    async def _connect(
        conninfo: str, pooling: PoolingConfig, *, claims: bool = False
    ) -> psycopg.AsyncConnection:
        conn = await psycopg.AsyncConnection.connect(
            conninfo, autocommit=True, prepare_threshold=pooling.prepare_threshold
        )
        for statement in pooling.session_statements(claims=claims):
            await conn.execute(statement)
        return conn
