"""The two database roles: what the runtime role can and cannot do, proven with real SQL."""

import psycopg
import pytest
from django.conf import settings
from django.core.checks import Error
from django.db import connection

from orquestador.checks import check_runtime_role
from orquestador.dbroles import RoleError, grant_runtime, unrestricted_reasons

pytestmark = pytest.mark.django_db(transaction=True)


def _seed(conn: psycopg.Connection) -> tuple:
    flow_id = conn.execute(
        "INSERT INTO flow (key, version, definition, checksum) VALUES ('f', 1, '{}', 'x') "
        "RETURNING id"
    ).fetchone()[0]
    request_id = conn.execute(
        "INSERT INTO request (id, flow_id, owner, scope, data, state) "
        "VALUES (gen_random_uuid(), %s, 'alice', 'acme', '{}', 'DRAFT') RETURNING id",
        [flow_id],
    ).fetchone()[0]
    event_id = conn.execute(
        "INSERT INTO audit_event (request_id, type, actor, payload) "
        "VALUES (%s, 'REQUEST_CREATED', 'alice', '{}') RETURNING id",
        [request_id],
    ).fetchone()[0]
    return flow_id, request_id, event_id


def test_runtime_role__cannot_create_table(runtime_conn):
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        runtime_conn.execute("CREATE TABLE sneaky (id int)")


def test_runtime_role__cannot_alter_or_drop_application_tables(runtime_conn):
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        runtime_conn.execute("ALTER TABLE execution ADD COLUMN sneaky int")
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        runtime_conn.execute("DROP TABLE audit_event")


def test_runtime_role__cannot_update_or_delete_audit(runtime_conn):
    _, _, event_id = _seed(runtime_conn)
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        runtime_conn.execute("UPDATE audit_event SET actor = 'mallory' WHERE id = %s", [event_id])
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        runtime_conn.execute("DELETE FROM audit_event WHERE id = %s", [event_id])
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        runtime_conn.execute("TRUNCATE audit_event CASCADE")
    actor = runtime_conn.execute("SELECT actor FROM audit_event WHERE id = %s", [event_id])
    assert actor.fetchone() == ("alice",)


def test_audit_is_append_only_even_for_the_owner():
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO flow (key, version, definition, checksum) VALUES ('f', 1, '{}', 'x') "
            "RETURNING id"
        )
        flow_id = cursor.fetchone()[0]
        cursor.execute(
            "INSERT INTO request (id, flow_id, owner, scope, data, state) "
            "VALUES (gen_random_uuid(), %s, 'a', 't', '{}', 'S') RETURNING id",
            [flow_id],
        )
        request_id = cursor.fetchone()[0]
        cursor.execute(
            "INSERT INTO audit_event (request_id, type, actor, payload) "
            "VALUES (%s, 'REQUEST_CREATED', 'a', '{}') RETURNING id",
            [request_id],
        )
        event_id = cursor.fetchone()[0]
    with pytest.raises(Exception, match="append-only"), connection.cursor() as cursor:
        cursor.execute("UPDATE audit_event SET actor = 'x' WHERE id = %s", [event_id])


def test_runtime_role__can_do_the_applications_dml(runtime_conn):
    flow_id, request_id, _ = _seed(runtime_conn)
    execution_id = runtime_conn.execute(
        "INSERT INTO execution (id, request_id, flow_id, transition_id, accepted_revision, "
        "actor_snapshot) VALUES (gen_random_uuid(), %s, %s, 't', 2, '{}') RETURNING id",
        [request_id, flow_id],
    ).fetchone()[0]
    runtime_conn.execute(
        "UPDATE request SET blocked_by_id = %s, revision = 2 WHERE id = %s",
        [execution_id, request_id],
    )
    runtime_conn.execute(
        "INSERT INTO action_execution (execution_id, action_id, sequence, capability, "
        "capability_version, effect, status, input_hash, external_key, attempt, fencing_token) "
        "VALUES (%s, 'a', 0, 'NO_OP', 1, 'READ_ONLY', 'RUNNING', 'h', 'k', 1, 1)",
        [execution_id],
    )
    runtime_conn.execute("DELETE FROM django_session")
    count = runtime_conn.execute(
        "SELECT count(*) FROM action_execution WHERE execution_id = %s", [execution_id]
    )
    assert count.fetchone() == (1,)


def test_runtime_role__reads_but_cannot_write_migration_history(runtime_conn):
    assert runtime_conn.execute("SELECT count(*) FROM django_migrations").fetchone()[0] > 0
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        runtime_conn.execute("DELETE FROM django_migrations")


def test_restricted_role_check__passes_for_runtime_and_names_every_reason_for_owner(runtime_dsn):
    from django.db import connections

    reasons_owner = unrestricted_reasons(connection=connection)
    assert any("owns schema" in r for r in reasons_owner)
    assert any("CREATE on schema" in r for r in reasons_owner)
    assert any("owns tables" in r for r in reasons_owner)

    errors = check_runtime_role(databases=["default"])
    assert len(errors) == 1 and isinstance(errors[0], Error)
    assert "restricted runtime role" in errors[0].msg
    assert settings.DATABASES["default"]["USER"] in errors[0].msg

    with psycopg.connect(runtime_dsn) as conn:
        row = conn.execute(
            "SELECT rolsuper, has_schema_privilege(current_user, 'public', 'CREATE') "
            "FROM pg_roles WHERE rolname = current_user"
        ).fetchone()
    assert row == (False, False)
    assert connections  # the default connection is untouched by the probe


def test_grantruntime__is_idempotent():
    role = settings.RUNTIME_DATABASE_USER
    query = (
        "SELECT table_name, string_agg(privilege_type, ',' ORDER BY privilege_type) "
        "FROM information_schema.role_table_grants WHERE grantee = %s "
        "GROUP BY table_name ORDER BY table_name"
    )
    with connection.cursor() as cursor:
        cursor.execute(query, [role])
        before = cursor.fetchall()
    grant_runtime(connection=connection, role=role)
    with connection.cursor() as cursor:
        cursor.execute(query, [role])
        after = cursor.fetchall()
    assert before == after
    grants = dict(after)
    assert grants["audit_event"] == "INSERT,SELECT"
    assert grants["execution"] == "DELETE,INSERT,SELECT,UPDATE"
    assert grants["django_migrations"] == "SELECT"


def test_grantruntime__refuses_the_migration_role_itself():
    with pytest.raises(RoleError, match="same role"):
        grant_runtime(connection=connection, role=settings.DATABASES["default"]["USER"])


def test_grantruntime__refuses_a_missing_role():
    with pytest.raises(RoleError, match="does not exist"):
        grant_runtime(connection=connection, role="no_such_role_here")


def test_grantruntime__revokes_create_on_the_schema_from_public(runtime_dsn):
    """A database whose schema still lets PUBLIC create (PostgreSQL 14 and older by default)."""
    probe = "SELECT has_schema_privilege(current_user, current_schema(), 'CREATE')"
    with connection.cursor() as cursor:
        cursor.execute("GRANT CREATE ON SCHEMA public TO PUBLIC")
    try:
        with psycopg.connect(runtime_dsn) as conn:
            assert conn.execute(probe).fetchone() == (True,)
        grant_runtime(connection=connection, role=settings.RUNTIME_DATABASE_USER)
        with psycopg.connect(runtime_dsn) as conn:
            assert conn.execute(probe).fetchone() == (False,)
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute("CREATE TABLE intruder (id int)")
    finally:
        with connection.cursor() as cursor:
            cursor.execute("REVOKE CREATE ON SCHEMA public FROM PUBLIC")
