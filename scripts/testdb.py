"""Run a command against throwaway databases and roles on a PostgreSQL server, then drop them.

    TEST_DATABASE_URL=postgres://admin@127.0.0.1:5432/postgres python scripts/testdb.py -- pytest

TEST_DATABASE_URL names a role allowed to create databases and roles. This creates a migration
role (allowed to create databases, for the test database), a restricted runtime role and a base
database, runs the command with DATABASE_URL and MIGRATION_DATABASE_URL pointing at them, and
drops every database the migration role owns and both roles afterwards, whatever the outcome.
"""

import os
import secrets
import subprocess
import sys
from urllib.parse import quote, urlsplit, urlunsplit

import psycopg
from psycopg import sql


def _with_credentials(admin_url: str, user: str, password: str, db: str) -> str:
    parts = urlsplit(admin_url)
    host = parts.hostname or "127.0.0.1"
    netloc = f"{user}:{quote(password, safe='')}@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit((parts.scheme, netloc, "/" + db, parts.query, ""))


def main(argv: list[str]) -> int:
    if "--" not in argv:
        print("usage: testdb.py -- COMMAND [ARGS...]", file=sys.stderr)
        return 2
    command = argv[argv.index("--") + 1 :]
    admin_url = os.environ.get("TEST_DATABASE_URL")
    if not admin_url:
        print("testdb: TEST_DATABASE_URL is not set", file=sys.stderr)
        return 2
    tag = "orq_t" + secrets.token_hex(4)
    owner, runtime, base_db = f"{tag}_owner", f"{tag}_app", tag
    passwords = {owner: secrets.token_urlsafe(18), runtime: secrets.token_urlsafe(18)}
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(
            sql.SQL("CREATE ROLE {} LOGIN CREATEDB PASSWORD {}").format(
                sql.Identifier(owner), sql.Literal(passwords[owner])
            )
        )
        conn.execute(
            sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(
                sql.Identifier(runtime), sql.Literal(passwords[runtime])
            )
        )
        conn.execute(
            sql.SQL("CREATE DATABASE {} OWNER {}").format(
                sql.Identifier(base_db), sql.Identifier(owner)
            )
        )
    env = {
        **os.environ,
        "DATABASE_URL": _with_credentials(admin_url, runtime, passwords[runtime], base_db),
        "MIGRATION_DATABASE_URL": _with_credentials(admin_url, owner, passwords[owner], base_db),
        "SECRET_KEY": os.environ.get("SECRET_KEY") or secrets.token_urlsafe(32),
    }
    env.pop("TEST_DATABASE_URL")
    try:
        return subprocess.run(command, env=env, check=False).returncode
    finally:
        with psycopg.connect(admin_url, autocommit=True) as conn:
            owned = conn.execute(
                "SELECT datname FROM pg_database d JOIN pg_roles r ON r.oid = d.datdba "
                "WHERE r.rolname = %s",
                [owner],
            ).fetchall()
            for (name,) in owned:
                conn.execute(
                    sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
                )
            for role in (runtime, owner):
                conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
