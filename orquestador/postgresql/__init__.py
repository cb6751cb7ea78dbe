"""The project's PostgreSQL backend for Django (see base.py) and the calls its users make."""

from typing import Any

from django.db import connection


def last_rows(cursor: Any) -> list[tuple]:
    """The rows of the last statement `cursor` ran: a statement sent with others before it (a
    page's planner setting, executions/sql/reads.py) leaves a result of its own first."""
    while cursor.description is None and cursor.nextset():
        pass
    return cursor.fetchall()


def fixed_cursor() -> Any:
    """A cursor of the default connection for a fixed statement that is the same plan whatever
    its values, bound by the server and prepared on its connection (base.py says when not);
    Django's own cursor under a settings module that names another ENGINE."""
    make = getattr(connection, "fixed_cursor", None)
    return make() if make is not None else connection.cursor()


def read_rows(statement: str, params: Any, *, prepare: bool = False) -> list[tuple]:
    """The rows of a read-only statement on the default connection, with no health check's round
    trip before it (base.py says how a lost connection is replaced instead); bound by the server
    and prepared when `prepare` (a fixed statement, as `fixed_cursor`). Django's cursor under a
    settings module that names another ENGINE."""
    read = getattr(connection, "read_rows", None)
    if read is not None:
        return read(statement, params, prepare=prepare)
    return _django_rows(statement, params)


def write_rows(statement: str, params: Any, *, prepare: bool = False) -> list[tuple]:
    """The rows a statement that writes returns, on the default connection, after the health
    check when it is due (as any statement); bound by the server and prepared when `prepare`.
    Django's cursor under a settings module that names another ENGINE."""
    write = getattr(connection, "write_rows", None)
    if write is not None:
        return write(statement, params, prepare=prepare)
    return _django_rows(statement, params)


def _django_rows(statement: str, params: Any) -> list[tuple]:
    """The statement's rows on Django's own cursor (a settings module with another ENGINE)."""
    with connection.cursor() as cursor:
        cursor.execute(statement, params)
        return last_rows(cursor)
