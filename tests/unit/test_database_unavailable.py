"""Which database errors mean "cannot reach the database" (503) and which are faults (500)."""

import psycopg
import pytest
from django import db

from orquestador.database import is_unavailable, reason


def _wrapped(cause: Exception) -> db.Error:
    """The way Django raises a driver error: its own class, the driver's error as the cause."""
    wrapper = getattr(db, type(cause).__mro__[1].__name__, db.DatabaseError)
    try:
        raise wrapper(str(cause)) from cause
    except db.Error as exc:
        return exc


@pytest.mark.parametrize(
    ("cause", "unavailable", "why"),
    [
        (psycopg.OperationalError("connection refused"), True, "cannot connect"),
        (psycopg.errors.AdminShutdown(), True, "shutting down"),
        (psycopg.errors.CrashShutdown(), True, "crashed"),
        (psycopg.errors.CannotConnectNow(), True, "starting up"),
        (psycopg.errors.ConnectionFailure(), True, "cannot connect"),
        (psycopg.InterfaceError("the connection is closed"), True, "closed"),
        (psycopg.errors.QueryCanceled(), False, "QueryCanceled"),
        (psycopg.errors.InvalidPassword(), False, "credentials"),
        (psycopg.errors.UniqueViolation(), False, "UniqueViolation"),
    ],
)
def test_is_unavailable__by_the_driver_error_under_djangos_wrapper(cause, unavailable, why):
    assert is_unavailable(cause) is unavailable
    assert is_unavailable(_wrapped(cause)) is unavailable
    assert why in reason(_wrapped(cause))


def test_is_unavailable__not_for_errors_that_are_not_the_databases():
    assert is_unavailable(ValueError("no")) is False
    assert is_unavailable(db.InterfaceError("closed")) is True
