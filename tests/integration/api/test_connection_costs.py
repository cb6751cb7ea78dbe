"""What the database connection costs an API call besides its statements (orquestador/postgresql):
the health check still replaces a connection the server has closed before the request's first
statement; the fixed statements of an acceptance and a read by id are bound by the server and
prepared on a direct connection, never when the settings turn preparing off (behind a
transaction pooler), and the ORM's never.
"""

import time

import psycopg
import pytest
from django.db import connection

from orquestador.postgresql import fixed_cursor

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


def test_health_check__a_terminated_backend_is_replaced_before_the_first_statement(
    migration_dsn, round_trips
):
    connection.ensure_connection()
    old_pid = connection.connection.info.backend_pid
    with psycopg.connect(migration_dsn, autocommit=True) as other:
        assert other.execute("SELECT pg_terminate_backend(%s)", [old_pid]).fetchone() == (True,)
        deadline = time.monotonic() + DEADLINE
        gone = "SELECT NOT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = %s)"
        while not other.execute(gone, [old_pid]).fetchone()[0]:  # the backend on its way out
            assert time.monotonic() < deadline, "the terminated backend never ended"
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
