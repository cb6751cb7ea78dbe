"""Running behind a transaction pooler (PgBouncer), validated at start
(docs/operations.md#behind-pgbouncer says what each rule is for).

With `DATABASE_POOLER=transaction` nothing relies on session state: no prepared statements, no
session settings, and LISTEN (with the claims) goes to `WORKER_LISTEN_DATABASE_URL`, a direct
connection to the same database as the same role; without it the worker polls every
WORKER_POLL_MS and says so at start. `pooling_config(raw, database_url=...)` refuses, naming the
variables, every combination that cannot work. Without a pooler nothing changes.
"""

from collections.abc import Mapping
from dataclasses import dataclass

from psycopg.conninfo import conninfo_to_dict

from orquestador.workerconfig import WorkerConfigError, database_pooler

from .. import sql


@dataclass(frozen=True)
class PoolingConfig:
    pooler: str = ""  # "" (direct) or "transaction"
    listen_url: str = ""  # a direct connection for LISTEN; "" when none

    @property
    def transaction_pooled(self) -> bool:
        return self.pooler == "transaction"

    @property
    def listens(self) -> bool:
        """Whether the worker can LISTEN: directly, or on the separate listen connection."""
        return not self.transaction_pooled or bool(self.listen_url)

    @property
    def prepare_threshold(self) -> int | None:
        """psycopg's prepare_threshold for the worker's connections: statements are prepared at
        once on a direct connection (they are few and fixed), never through a transaction pooler."""
        return None if self.transaction_pooled else 0

    def session_statements(self, *, claims: bool = False) -> tuple[str, ...]:
        """Session settings a new worker connection runs first: none through a transaction
        pooler, where a SET would stay on a server session that another client gets next."""
        if self.transaction_pooled:
            return ()
        worker = (sql.WORKER_SESSION, sql.WORKER_SCANS, sql.WORKER_JIT)
        return (*worker, sql.CLAIM_SESSION, sql.CLAIM_SORTS) if claims else worker


def _endpoint(url: str, name: str) -> dict[str, str]:
    try:
        params = conninfo_to_dict(url)
    except Exception as exc:  # psycopg raises ProgrammingError for a malformed string
        raise WorkerConfigError(f"{name} is not a valid PostgreSQL URL: {exc}") from None
    return {k: str(params.get(k) or "") for k in ("host", "port", "dbname", "user")}


def _user(endpoint: dict[str, str]) -> str:
    return repr(endpoint["user"]) if endpoint["user"] else "libpq's default user"


def pooling_config(raw: Mapping[str, str], *, database_url: str) -> PoolingConfig:
    """Validate DATABASE_POOLER and WORKER_LISTEN_DATABASE_URL against DATABASE_URL."""
    pooler = database_pooler(raw.get("DATABASE_POOLER", ""))
    listen_url = raw.get("WORKER_LISTEN_DATABASE_URL", "").strip()
    if not listen_url:
        return PoolingConfig(pooler=pooler)
    if pooler != "transaction":
        raise WorkerConfigError(
            "WORKER_LISTEN_DATABASE_URL is set but DATABASE_POOLER is not 'transaction': without "
            "a transaction pooler the worker LISTENs on DATABASE_URL; unset "
            "WORKER_LISTEN_DATABASE_URL, or set DATABASE_POOLER=transaction if DATABASE_URL "
            "goes through one"
        )
    listen = _endpoint(listen_url, "WORKER_LISTEN_DATABASE_URL")
    pooled = _endpoint(database_url, "DATABASE_URL")
    if listen["dbname"] != pooled["dbname"]:
        raise WorkerConfigError(
            f"WORKER_LISTEN_DATABASE_URL names database {listen['dbname']!r} but DATABASE_URL "
            f"names {pooled['dbname']!r}: notifications are per database, so it must be the "
            "same database as DATABASE_URL, reached directly"
        )
    if (listen["host"], listen["port"] or "5432") == (pooled["host"], pooled["port"] or "5432"):
        raise WorkerConfigError(
            "WORKER_LISTEN_DATABASE_URL has the same host and port as DATABASE_URL, which goes "
            "through the transaction pooler: LISTEN needs a session of its own, so it must be a "
            "direct connection to PostgreSQL (its own host or port)"
        )
    if listen["user"] != pooled["user"]:
        raise WorkerConfigError(
            f"WORKER_LISTEN_DATABASE_URL connects as {_user(listen)} but DATABASE_URL as "
            f"{_user(pooled)}: the worker claims on the listening connection, so it must be the "
            "same restricted runtime role"
        )
    return PoolingConfig(pooler=pooler, listen_url=listen_url)
