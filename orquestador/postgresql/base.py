"""Django's PostgreSQL backend (ENGINE "orquestador.postgresql") with these additions for the
API's hot path (why: docs/adr/0021-an-entrance-as-fast-as-the-engine.md, Decision):

- `fixed_cursor()`: a cursor for statements whose plan does not depend on their values, bound by
  the server and prepared once per connection (never when OPTIONS sets `prepare_threshold`, as
  behind a transaction pooler); the ORM and the pages keep Django's client-side binding;
- `read_rows()`, `write_rows()`: a fixed statement on a cursor kept per connection, outside
  Django's wrapper unless a statement is logged or wrapped; a read is its own health check, run
  once more on a new connection only where Django's check was due (a request's first statement).
"""

import sys
from typing import Any, Self

import psycopg
from django.db import OperationalError
from django.db.backends.postgresql import base, operations
from django.db.backends.postgresql.psycopg_any import register_tzloader
from psycopg.abc import Params, QueryNoTemplate
from psycopg.pq import Format

from . import last_rows

# psycopg prepares a statement at its Nth run, or at once when asked: never unasked.
ONLY_WHEN_ASKED = sys.maxsize


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
    # Django's own, set in its __init__ (django-stubs does not declare them).
    health_check_enabled: bool
    health_check_done: bool
    # The cursors _rows keeps, and the connection they belong to.
    _cursors_of: Any = None
    _cursors: dict[bool, Any]

    def get_connection_params(self) -> dict[str, Any]:
        params = super().get_connection_params()
        if "prepare_threshold" not in self.settings_dict["OPTIONS"]:
            params["prepare_threshold"] = ONLY_WHEN_ASKED
        return params

    def read_rows(self, statement: str, params: Any, *, prepare: bool) -> list[tuple]:
        """The rows of a read-only statement, with no health check before it (see the module's
        docstring); bound and prepared by the server when `prepare`, as `fixed_cursor`."""
        check_due = (
            self.connection is not None
            and self.health_check_enabled
            and not self.health_check_done
            and not self.in_atomic_block
        )
        if check_due:
            self.health_check_done = True  # as the check does once it has run: this read is it
        try:
            return self._rows(statement, params, prepare=prepare)
        except OperationalError:
            if not (check_due and self.connection is not None and self.connection.closed):
                raise
        self.close()  # gone before this request's first statement: replace it, read again
        return self._rows(statement, params, prepare=prepare)

    def write_rows(self, statement: str, params: Any, *, prepare: bool) -> list[tuple]:
        """The rows a statement that writes returns: after the health check when it is due, as
        any statement, never run again; bound and prepared by the server when `prepare`."""
        self.close_if_health_check_failed()
        return self._rows(statement, params, prepare=prepare)

    def _rows(self, statement: str, params: Any, *, prepare: bool) -> list[tuple]:
        self.ensure_connection()
        cursor = self._kept_cursor(prepare)
        if self.queries_logged or self.execute_wrappers:
            # Logged or wrapped as Django does every statement (tests, DEBUG, bench/apiprofile.py),
            # by its cursor wrapper around the kept cursor (never closing it).
            wrapped = self._prepare_cursor(cursor)  # type: ignore[attr-defined]
            wrapped.execute(statement, params)
            return last_rows(wrapped)
        self.validate_thread_sharing()
        with self.wrap_database_errors:
            cursor.execute(statement, params)
            return last_rows(cursor)

    def _kept_cursor(self, prepare: bool) -> Any:
        """The connection's cursor of this kind (bound and prepared by the server, or Django's),
        made once per connection: making one, and Django's wrapper around it, cost a page a
        fifth of its statement's client-side work."""
        if self._cursors_of is not self.connection:
            self._cursors_of, self._cursors = self.connection, {}
        cursor = self._cursors.get(prepare)
        if cursor is None:
            with self.wrap_database_errors:
                cursor = self._fixed_cursor() if prepare else self.create_cursor()
            self._cursors[prepare] = cursor
        return cursor

    def fixed_cursor(self) -> Any:
        """A cursor for a fixed statement, bound by the server and prepared: see the module's
        docstring."""
        self.close_if_health_check_failed()
        self.ensure_connection()
        with self.wrap_database_errors:
            return self._prepare_cursor(self._fixed_cursor())  # type: ignore[attr-defined]

    def _fixed_cursor(self) -> PreparingCursor:
        cursor = PreparingCursor(self.connection)
        # As create_cursor does: the cursor's zone, when the connection's is another.
        loader = self.connection.adapters.get_loader(base.TIMESTAMPTZ_OID, Format.TEXT)
        if self.timezone != loader.timezone:
            register_tzloader(self.timezone, cursor)
        return cursor
