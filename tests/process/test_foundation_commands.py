"""Real `manage.py` processes: migrate and grantruntime as the migration role, check and readyz
as the runtime role, on a fresh database."""

import subprocess
import uuid
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from django.db import connection

from tests.conftest import manage

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.process]


def _on_db(dsn: str, name: str) -> str:
    parts = urlsplit(dsn)
    return urlunsplit((parts.scheme, parts.netloc, "/" + name, "", ""))


@pytest.fixture
def fresh_db(process_env, migration_dsn):
    name = "fresh_" + uuid.uuid4().hex[:8]
    with psycopg.connect(migration_dsn, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    with psycopg.connect(_on_db(migration_dsn, name), autocommit=True) as conn:
        conn.execute("REVOKE CREATE ON SCHEMA public FROM PUBLIC")
    env = {
        **process_env,
        "DATABASE_URL": _on_db(process_env["DATABASE_URL"], name),
        "MIGRATION_DATABASE_URL": _on_db(process_env["MIGRATION_DATABASE_URL"], name),
    }
    yield env
    connection.close()
    with psycopg.connect(migration_dsn, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


def _run(env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(manage(*args), env=env, capture_output=True, text=True, timeout=120)


def test_migrate_and_grantruntime__run_as_the_migration_role(fresh_db):
    # As the runtime role alone, migrate cannot create tables.
    alone = {**fresh_db, "MIGRATION_DATABASE_URL": ""}
    refused = _run(alone, "migrate", "--noinput")
    assert refused.returncode != 0
    assert "permission denied" in refused.stderr

    migrated = _run(fresh_db, "migrate", "--noinput")
    assert migrated.returncode == 0, migrated.stderr
    granted = _run(fresh_db, "grantruntime")
    assert granted.returncode == 0, granted.stderr
    assert "granted runtime role" in granted.stdout

    checked = _run(fresh_db, "check", "--database", "default")
    assert checked.returncode == 0, checked.stderr

    with psycopg.connect(fresh_db["DATABASE_URL"]) as conn:
        owner = conn.execute(
            "SELECT tableowner FROM pg_tables WHERE tablename = 'execution'"
        ).fetchone()[0]
    assert owner == urlsplit(fresh_db["MIGRATION_DATABASE_URL"]).username


def test_check__refuses_an_unrestricted_runtime_role(fresh_db):
    assert _run(fresh_db, "migrate", "--noinput").returncode == 0
    as_owner = {**fresh_db, "DATABASE_URL": fresh_db["MIGRATION_DATABASE_URL"]}
    checked = _run(as_owner, "check", "--database", "default")
    assert checked.returncode != 0
    assert "orquestador.E001" in checked.stderr
    assert "owns schema" in checked.stderr


def test_missing_required_setting__stops_with_its_name(process_env):
    env = {k: v for k, v in process_env.items() if k != "SECRET_KEY"}
    result = _run(env, "check")
    assert result.returncode != 0
    assert "SECRET_KEY is required" in result.stderr


@pytest.mark.parametrize("name", ["DEBUG", "SESSION_COOKIE_SECURE", "REQUEST_API_ENABLED"])
def test_true_false_setting__refuses_another_word_with_its_name(process_env, name):
    # A typo must not read as a silent false (DEBUG=ture, SESSION_COOKIE_SECURE=yes please).
    result = _run({**process_env, name: "ture"}, "check")
    assert result.returncode != 0
    assert f"{name} must be true or false" in result.stderr


READYZ = (
    "from django.test import Client; r = Client(HTTP_HOST='localhost').get('/readyz'); "
    "print(r.status_code, r.content.decode())"
)


def test_readyz__503_when_database_unreachable_and_when_unmigrated(fresh_db):
    closed = {**fresh_db, "DATABASE_URL": "postgres://nobody:x@127.0.0.1:1/none"}
    result = _run(closed, "shell", "--no-imports", "-c", READYZ)
    assert result.stdout.startswith("503"), result.stderr
    assert "database unreachable" in result.stdout

    result = _run(fresh_db, "shell", "--no-imports", "-c", READYZ)
    assert result.stdout.startswith("503"), result.stderr
    assert "unapplied migrations" in result.stdout

    assert _run(fresh_db, "migrate", "--noinput").returncode == 0
    assert _run(fresh_db, "grantruntime").returncode == 0
    result = _run(fresh_db, "shell", "--no-imports", "-c", READYZ)
    assert result.stdout.startswith("200"), result.stdout + result.stderr


def test_healthz__answers_while_up(client):
    response = client.get("/healthz")
    assert response.status_code == 200 and response.json() == {"status": "ok"}
