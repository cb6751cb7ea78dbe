"""What the database connection costs an API call besides its statements (orquestador/postgresql):
the health check still replaces a connection the server has closed before the request's first
statement; a read (`read_rows`) makes no health check's round trip, and replaces such a
connection itself, reading again, but only where the check was due; the fixed statements of an
acceptance and a read by id are bound by the server and prepared on a direct connection, never
when the settings turn preparing off (behind a transaction pooler), and the ORM's never.
"""

import time

import psycopg
import pytest
from django.db import OperationalError, ProgrammingError, connection

from orquestador.postgresql import fixed_cursor, read_rows

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


def _terminate(migration_dsn: str) -> int:
    """End the backend of this test's connection as PostgreSQL's administrator would; its pid."""
    connection.ensure_connection()
    old_pid = connection.connection.info.backend_pid
    with psycopg.connect(migration_dsn, autocommit=True) as other:
        assert other.execute("SELECT pg_terminate_backend(%s)", [old_pid]).fetchone() == (True,)
        deadline = time.monotonic() + DEADLINE
        gone = "SELECT NOT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = %s)"
        while not other.execute(gone, [old_pid]).fetchone()[0]:  # the backend on its way out
            assert time.monotonic() < deadline, "the terminated backend never ended"
            time.sleep(0.01)
    return old_pid


def test_health_check__a_terminated_backend_is_replaced_before_the_first_statement(
    migration_dsn, round_trips
):
    old_pid = _terminate(migration_dsn)
    _health_check_due()

    with fixed_cursor() as cursor:  # no error: the health check closed it, this one is new
        cursor.execute("SELECT pg_backend_pid()")
        (new_pid,) = cursor.fetchone()

    assert round_trips == ["SELECT 1"]
    assert new_pid != old_pid


@pytest.mark.parametrize("prepare", [True, False])
def test_a_read__replaces_a_terminated_backend_itself_with_no_health_check(
    migration_dsn, round_trips, prepare
):
    old_pid = _terminate(migration_dsn)
    _health_check_due()

    rows = read_rows("SELECT pg_backend_pid(), %(n)s::int", {"n": 7}, prepare=prepare)

    assert round_trips == []  # the read was the check
    ((new_pid, seven),) = rows
    assert (new_pid != old_pid, seven) == (True, 7)
    # As after a check that passed: the request's next statements make none either.
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    assert round_trips == []


def test_a_read__made_when_no_check_is_due__fails_on_a_lost_connection_as_any_statement(
    migration_dsn, round_trips
):
    connection.ensure_connection()
    connection.health_check_done = True  # the request already ran a statement
    _terminate(migration_dsn)

    with pytest.raises(OperationalError):
        read_rows("SELECT pg_backend_pid()", {}, prepare=True)
    assert round_trips == []
    connection.close()


def test_a_read__that_fails_on_a_live_connection__is_not_run_again(round_trips):
    connection.ensure_connection()
    _health_check_due()
    pid = connection.connection.info.backend_pid
    with pytest.raises(ProgrammingError):  # any error but a lost connection's
        read_rows("SELECT * FROM no_such_table", {}, prepare=False)

    assert connection.connection is not None and not connection.connection.closed
    assert connection.connection.info.backend_pid == pid  # kept: nothing was replaced
    assert round_trips == []


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
