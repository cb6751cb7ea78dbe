"""Django's PostgreSQL backend (ENGINE "orquestador.postgresql"), with two changes for the API's
hot path (docs/adr/0021-an-entrance-as-fast-as-the-engine.md):

- **The health check asks the socket first.** CONN_HEALTH_CHECKS sends `SELECT 1` before a
  request's first statement: a round trip per request, as long as a read's own statement. A
  connection that is idle, with nothing to read on its socket, is taken as it is: a server that
  shut down, crashed, restarted or terminated the backend closed the socket (and said why on it
  first), which makes it readable. Any other connection gets Django's `SELECT 1`, which reads
  whatever arrived and closes a connection that fails it. A peer gone without a word (no FIN) is
  not caught, but a `SELECT 1` would only have waited on it as the request's statement does.
- **`fixed_cursor()`** is a cursor for the fixed statements whose plan does not depend on their
  values (an acceptance's two, a read by id): its parameters are bound by the server instead of
  quoted into the text in Python, and its statement is prepared on its connection the first time
  it runs, so PostgreSQL parses and plans it once. Django turns psycopg's preparing off
  (`prepare_threshold` None, for poolers); here it is on but only for these cursors, unless
  OPTIONS sets `prepare_threshold` itself, as the settings do behind a transaction pooler
  (DATABASE_POOLER=transaction), where the next transaction may run on another server session:
  then the statement is bound by the server and nothing is prepared. The ORM and the pages keep
  Django's client-side binding, which never prepares (a page's plan is made with its values: a
  generic plan would know neither its LIMIT nor its ranges; bound by the server without being
  prepared, a page measured no cheaper).
"""

import select
import sys
from typing import Any, Self

import psycopg
from django.db.backends.postgresql import base, operations
from django.db.backends.postgresql.psycopg_any import register_tzloader
from psycopg import pq
from psycopg.abc import Params, QueryNoTemplate
from psycopg.pq import Format

# psycopg prepares a statement at its Nth run, or at once when asked: never unasked.
ONLY_WHEN_ASKED = sys.maxsize
_IDLE = pq.TransactionStatus.IDLE
_OK = pq.ConnStatus.OK


class BoundCursor(psycopg.Cursor[Any]):
    """Parameters bound by the server: psycopg's own cursor, as Django's ServerBindingCursor."""


class PreparingCursor(BoundCursor):
    """Bound by the server, and each statement prepared on its connection at its first run
    (unless the connection's prepare_threshold is None)."""

    # One signature for the overloads it narrows (the fixed statements are never templates).
    def execute(  # type: ignore[override]
        self,
        query: QueryNoTemplate,
        params: Params | None = None,
        *,
        prepare: bool | None = True,
        binary: bool | None = None,
    ) -> Self:
        return super().execute(query, params, prepare=prepare, binary=binary)


def quiet(conn: psycopg.Connection) -> bool:
    """Whether `conn` is idle with nothing on its socket: alive as far as it can tell without a
    round trip."""
    pgconn = conn.pgconn
    if pgconn.status != _OK or pgconn.transaction_status != _IDLE:
        return False
    try:
        poller = select.poll()
        poller.register(pgconn.socket, select.POLLIN | select.POLLPRI)
        return not poller.poll(0)  # POLLHUP and POLLERR are reported whatever was asked
    except (OSError, psycopg.Error):
        return False


class DatabaseOperations(operations.DatabaseOperations):
    def last_executed_query(self, cursor: Any, sql: str, params: Any) -> str:
        """A fixed statement's text with its values, as the ORM's reads (Django shows a
        server-bound one's placeholders only when every cursor binds on the server)."""
        if isinstance(cursor, BoundCursor):
            try:
                return self.compose_sql(sql, params)
            except psycopg.DataError:
                return sql
        return super().last_executed_query(cursor, sql, params)


class DatabaseWrapper(base.DatabaseWrapper):
    ops_class = DatabaseOperations

    def get_connection_params(self) -> dict[str, Any]:
        params = super().get_connection_params()
        if "prepare_threshold" not in self.settings_dict["OPTIONS"]:
            params["prepare_threshold"] = ONLY_WHEN_ASKED
        return params

    def close_if_health_check_failed(self) -> None:
        # The health-check flags are BaseDatabaseWrapper's own (set in connect()); not in the stubs.
        enabled = self.health_check_enabled  # type: ignore[attr-defined]
        done = self.health_check_done  # type: ignore[has-type]
        if self.connection is None or not enabled or done:
            return
        if quiet(self.connection):
            self.health_check_done = True
            return
        super().close_if_health_check_failed()

    def fixed_cursor(self) -> Any:
        """A cursor for a fixed statement, bound by the server and prepared: see the module's
        docstring."""
        self.close_if_health_check_failed()
        self.ensure_connection()
        with self.wrap_database_errors:
            cursor = PreparingCursor(self.connection)
            # As create_cursor does: the cursor's zone, when the connection's is another.
            loader = self.connection.adapters.get_loader(base.TIMESTAMPTZ_OID, Format.TEXT)
            if self.timezone != loader.timezone:
                register_tzloader(self.timezone, cursor)
            return self._prepare_cursor(cursor)  # type: ignore[attr-defined]
