"""The prober's database: Django's ORM in the prober's thread, on the runworker's prober
connection, so a runworker stays within its connection budget
(docs/worker-protocol.md#connections-per-process).

`orm_on(source)` borrows that connection (autocommit) for one step, a few statements or one
transaction, never across a provider call, and lends it to this thread's Django connection
through `_Lent`: Django's own client-binding cursors and loaders, nothing SET on it. The step
ends with the connection idle (anything left open rolled back), the pool takes it back, and
Django never closes it. Without a source (tests, a remote runtime) Django uses its own.
"""

import contextlib
from collections.abc import Iterator
from typing import Any

import psycopg
from django.db import connection
from django.db.backends.postgresql.base import Cursor as DjangoCursor
from django.db.backends.postgresql.psycopg_any import register_tzloader
from psycopg.pq import TransactionStatus
from psycopg.types.string import TextLoader

from executions.worker.loops import ConnectionSource


class _Lent:
    """A borrowed worker connection as Django's backend uses it; everything else passes through."""

    def __init__(self, conn: psycopg.Connection, timezone: Any) -> None:
        object.__setattr__(self, "_conn", conn)
        object.__setattr__(self, "_timezone", timezone)
        object.__setattr__(self, "adapters", _django_adapters(conn, timezone))

    def cursor(self, *args: Any, **kwargs: Any) -> DjangoCursor:
        if args or kwargs:  # a named (server-side) cursor: the prober never asks for one
            raise NotImplementedError("the prober's borrowed connection has no named cursors")
        # With psycopg 3 Django's Cursor is a psycopg ClientCursor; the stubs leave out that base.
        cursor = DjangoCursor(self._conn)  # type: ignore[call-arg]
        for name in ("jsonb", "inet", "cidr"):
            cursor.adapters.register_loader(name, TextLoader)  # type: ignore[attr-defined]
        register_tzloader(self._timezone, cursor)
        return cursor

    def close(self) -> None:
        """Django never closes it: the pool owns it."""

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._conn, name, value)  # autocommit, as transaction.atomic sets it


def _django_adapters(conn: psycopg.Connection, timezone: Any) -> psycopg.adapt.AdaptersMap:
    """The adapters Django's create_cursor compares its time zone with (a copy: the worker's
    connection keeps its own)."""
    adapters = psycopg.adapt.AdaptersMap(conn.adapters)
    register_tzloader(timezone, _Holder(adapters))
    return adapters


class _Holder:
    def __init__(self, adapters: psycopg.adapt.AdaptersMap) -> None:
        self.adapters = adapters


@contextlib.contextmanager
def orm_on(source: ConnectionSource | None) -> Iterator[None]:
    """Django's ORM in this thread runs on a connection borrowed from `source` until the block
    ends; with no source, on Django's own connection."""
    if source is None:
        yield
        return
    if connection.in_atomic_block:
        raise RuntimeError("a borrowed connection cannot join a transaction already open")
    connection.close()  # Django's own, if this thread ever opened one
    with source() as conn:
        _lend(conn)
        try:
            yield
        finally:
            _take_back(conn)


def _lend(conn: psycopg.Connection) -> None:
    """Django's connection of this thread becomes `conn`, as connect() would leave it."""
    connection.in_atomic_block = False
    connection.savepoint_ids = []
    connection.atomic_blocks = []
    connection.needs_rollback = False
    # The health-check flags are BaseDatabaseWrapper's own (set in connect()); not in the stubs.
    connection.health_check_enabled = False  # type: ignore[attr-defined]
    connection.close_at = None
    connection.closed_in_transaction = False
    connection.errors_occurred = False
    connection.health_check_done = True  # type: ignore[attr-defined]
    connection.run_on_commit = []
    connection.connection = _Lent(conn, connection.timezone)
    connection.autocommit = conn.autocommit


def _take_back(conn: psycopg.Connection) -> None:
    connection.connection = None
    connection.in_atomic_block = False
    connection.needs_rollback = False
    connection.run_on_commit = []
    if conn.closed or conn.broken:
        return  # the pool discards it
    if conn.info.transaction_status != TransactionStatus.IDLE:
        conn.rollback()
    conn.autocommit = True
