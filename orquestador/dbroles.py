"""The two database roles (docs/operations.md#two-database-roles): what the runtime role is granted,
and the check that it is restricted.

`grant_runtime` runs as the migration role (the schema owner); `unrestricted_reasons` runs on any
connection and describes that connection's own role.
"""

from django.db.backends.base.base import BaseDatabaseWrapper
from psycopg import sql

# Tables the runtime role reads but never writes.
READ_ONLY_TABLES = ("django_migrations",)
# Append-only: the runtime role may read and insert, never change or remove.
APPEND_ONLY_TABLES = ("audit_event", "route_event")


class RoleError(Exception):
    """The runtime role is missing or cannot be granted as asked."""


def grant_runtime(*, connection: BaseDatabaseWrapper, role: str) -> list[str]:
    """Grant `role` DML on the application's tables, and nothing more. Idempotent.

    Returns the statements it ran, for the command to report.
    """
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_schema(), current_user")
        schema, me = cursor.fetchone()
        if role == me:
            raise RoleError(
                f"DATABASE_URL and MIGRATION_DATABASE_URL name the same role ({role!r}); the "
                "runtime role must be a separate, restricted role."
            )
        cursor.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", [role])
        if cursor.fetchone() is None:
            raise RoleError(f"role {role!r} (the user of DATABASE_URL) does not exist.")
        cursor.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = %s ORDER BY tablename", [schema]
        )
        tables = [row[0] for row in cursor.fetchall()]

        r, s = sql.Identifier(role), sql.Identifier(schema)
        statements = [
            # PUBLIC too: PostgreSQL 14 and older grant CREATE on public to every role by default,
            # and the runtime role would keep it through PUBLIC whatever is revoked from it.
            sql.SQL("REVOKE CREATE ON SCHEMA {} FROM PUBLIC").format(s),
            sql.SQL("REVOKE CREATE ON SCHEMA {} FROM {}").format(s, r),
            sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(s, r),
            sql.SQL("GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA {} TO {}").format(s, r),
        ]
        for table in tables:
            t = sql.Identifier(schema, table)
            statements.append(sql.SQL("REVOKE ALL ON {} FROM {}").format(t, r))
            if table in READ_ONLY_TABLES:
                privileges = "SELECT"
            elif table in APPEND_ONLY_TABLES:
                privileges = "SELECT, INSERT"
            else:
                privileges = "SELECT, INSERT, UPDATE, DELETE"
            statements.append(sql.SQL("GRANT " + privileges + " ON {} TO {}").format(t, r))
        raw = connection.connection
        rendered = [stmt.as_string(raw) for stmt in statements]
        for stmt in rendered:
            cursor.execute(stmt)
    return rendered


# What makes a role unrestricted, each as one boolean column about current_user.
_PRIVILEGE_PROBE = """
SELECT r.rolsuper,
       r.rolbypassrls,
       pg_has_role(current_user, n.nspowner, 'USAGE') AS owns_schema,
       has_schema_privilege(current_user, n.oid, 'CREATE') AS can_create,
       EXISTS (SELECT 1 FROM pg_class c
               WHERE c.relnamespace = n.oid AND pg_has_role(current_user, c.relowner, 'USAGE'))
         AS owns_tables
FROM pg_roles r, pg_namespace n
WHERE r.rolname = current_user AND n.nspname = current_schema()
"""


def unrestricted_reasons(*, connection: BaseDatabaseWrapper) -> list[str]:
    """Why the connection's role is not a restricted runtime role; empty when it is."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_user, current_schema()")
        user, schema = cursor.fetchone()
        cursor.execute(_PRIVILEGE_PROBE)
        row = cursor.fetchone()
    if row is None:
        return [f"schema {schema!r} not found for role {user!r}"]
    superuser, bypassrls, owns_schema, can_create, owns_tables = row
    reasons = []
    if superuser:
        reasons.append(f"role {user!r} is a superuser")
    if bypassrls:
        reasons.append(f"role {user!r} bypasses row-level security")
    if owns_schema:
        reasons.append(f"role {user!r} owns schema {schema!r}")
    if can_create:
        reasons.append(f"role {user!r} has CREATE on schema {schema!r}")
    if owns_tables:
        reasons.append(f"role {user!r} owns tables in schema {schema!r}")
    return reasons


def restricted_role_message(reasons: list[str]) -> str:
    return (
        "DATABASE_URL must name a restricted runtime role (DML only): "
        + "; ".join(reasons)
        + ". Run migrations as MIGRATION_DATABASE_URL and `manage.py grantruntime`."
    )
