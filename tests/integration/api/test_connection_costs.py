"""What the database connection costs an API call besides its statements (orquestador/postgresql):
the health check asks the socket instead of the server when the connection is idle and quiet,
and still replaces a connection the server has closed; the fixed statements of an acceptance
and a read by id are bound by the server and prepared on a direct connection, never when the
settings turn preparing off (behind a transaction pooler), and the ORM's never.
"""

import time

import psycopg
import pytest
from django.db import connection

from orquestador.postgresql import base, fixed_cursor

pytestmark = pytest.mark.django_db(transaction=True)  # the connection as a request leaves it

DEADLINE = 10.0  # seconds


def _health_check_due() -> None:
    """As at the start of a request on a persistent connection (close_if_unusable_or_obsolete)."""
    connection.health_check_enabled = True
    connection.health_check_done = False


@pytest.fixture
def round_trips(monkeypatch) -> list[str]:
    """The health check's `SELECT 1`s, by Django's is_usable."""
    sent: list[str] = []
    is_usable = connection.is_usable

    def counted() -> bool:
        sent.append("SELECT 1")
        return is_usable()

    monkeypatch.setattr(connection, "is_usable", counted)
    return sent


def test_health_check__a_quiet_idle_connection_costs_no_round_trip(round_trips):
    connection.ensure_connection()
    before = connection.connection
    _health_check_due()

    with fixed_cursor() as cursor:
        cursor.execute("SELECT 1 + 1")
        assert cursor.fetchone() == (2,)

    assert round_trips == []
    assert connection.connection is before and connection.health_check_done


def test_health_check__a_connection_in_a_transaction_is_asked(round_trips):
    connection.ensure_connection()
    connection.connection.execute("BEGIN")
    try:
        assert not base.quiet(connection.connection)
        _health_check_due()
        connection.close_if_health_check_failed()
        assert round_trips == ["SELECT 1"]
    finally:
        connection.connection.execute("ROLLBACK")


def test_health_check__a_terminated_backend_is_replaced_before_the_first_statement(
    migration_dsn, round_trips
):
    connection.ensure_connection()
    old_pid = connection.connection.info.backend_pid
    with psycopg.connect(migration_dsn, autocommit=True) as other:
        assert other.execute("SELECT pg_terminate_backend(%s)", [old_pid]).fetchone() == (True,)
    deadline = time.monotonic() + DEADLINE
    while base.quiet(connection.connection):  # the server's goodbye on its way to the socket
        assert time.monotonic() < deadline, "the terminated connection never became readable"
        time.sleep(0.01)
    _health_check_due()

    with fixed_cursor() as cursor:  # no error: the health check closed it, this one is new
        cursor.execute("SELECT pg_backend_pid()")
        (new_pid,) = cursor.fetchone()

    assert round_trips == ["SELECT 1"]
    assert new_pid != old_pid


def _prepared(cursor) -> list[str]:
    cursor.execute("SELECT statement FROM pg_prepared_statements")
    return [row[0] for row in cursor.fetchall()]


def test_fixed_statements__are_prepared_on_a_direct_connection_and_the_orm_s_never():
    with connection.cursor() as cursor:
        for _ in range(10):  # past any threshold psycopg would prepare at by itself
            cursor.execute("SELECT %(n)s::int + 39", {"n": 3})
            assert cursor.fetchone() == (42,)
    with fixed_cursor() as cursor:
        cursor.execute("SELECT %(n)s::int + 40", {"n": 2})
        assert cursor.fetchone() == (42,)
        prepared = _prepared(connection.cursor())
    assert any("$1::int + 40" in text for text in prepared), prepared
    assert not any("+ 39" in text for text in prepared), prepared


def test_fixed_statements__are_never_prepared_when_the_settings_say_so(monkeypatch):
    # As behind a transaction pooler: orquestador/settings.py sets prepare_threshold None.
    monkeypatch.setitem(connection.settings_dict, "OPTIONS", {"prepare_threshold": None})
    connection.close()
    try:
        with fixed_cursor() as cursor:
            cursor.execute("SELECT %(n)s::int + 41", {"n": 1})
            assert cursor.fetchone() == (42,)
            assert not any("+ 41" in text for text in _prepared(connection.cursor()))
    finally:
        connection.close()  # the next one connects with the suite's options


def test_fixed_statements__show_their_values_in_the_captured_sql(django_assert_num_queries):
    with django_assert_num_queries(1) as captured, fixed_cursor() as cursor:
        cursor.execute("SELECT %(tenant)s::text", {"tenant": "acme"})
    assert captured.captured_queries[0]["sql"] == "SELECT 'acme'::text"
