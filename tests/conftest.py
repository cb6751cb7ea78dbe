"""Shared fixtures: the test database as seen by the runtime role, and subprocess environments.

pytest-django creates and migrates the test database as the migration role (the suite's default
connection); the session fixture below then runs `grantruntime` on it, exactly as a deployment
does, so runtime-role connections and real processes see production privileges.
"""

import os
import sys
from pathlib import Path
from urllib.parse import quote

import psycopg
import pytest
from django.conf import settings
from django.db import connection

from orquestador.dbroles import grant_runtime

ROOT = Path(__file__).resolve().parent.parent


def _dsn(db: dict) -> str:
    return (
        f"postgres://{quote(db['USER'], safe='')}:{quote(db['PASSWORD'], safe='')}"
        f"@{db['HOST']}:{db['PORT']}/{db['NAME']}"
    )


def runtime_settings() -> dict:
    """The runtime role's credentials (DATABASE_URL) on the current test database."""
    import environ

    runtime = environ.Env.db_url_config(os.environ["DATABASE_URL"])
    return {**runtime, "NAME": settings.DATABASES["default"]["NAME"]}


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup, django_db_blocker):
    with django_db_blocker.unblock():
        grant_runtime(connection=connection, role=settings.RUNTIME_DATABASE_USER)


@pytest.fixture
def runtime_dsn(django_db_setup) -> str:
    return _dsn(runtime_settings())


@pytest.fixture
def migration_dsn(django_db_setup) -> str:
    return _dsn(settings.DATABASES["default"])


@pytest.fixture
def runtime_conn(runtime_dsn):
    with psycopg.connect(runtime_dsn, autocommit=True) as conn:
        yield conn


@pytest.fixture
def process_env(runtime_dsn, migration_dsn) -> dict:
    """Environment for a real `manage.py` process on the test database, as in production."""
    return {
        **os.environ,
        "DATABASE_URL": runtime_dsn,
        "MIGRATION_DATABASE_URL": migration_dsn,
        "DJANGO_SETTINGS_MODULE": "orquestador.settings",
        "PYTHONUNBUFFERED": "1",
    }


def manage(*args: str) -> list[str]:
    return [sys.executable, str(ROOT / "manage.py"), *args]
