"""A PostgreSQL cluster of a test's own, for tests that stop, crash or restart the database.

Such tests never touch the suite's server (which may be one TEST_DATABASE_URL names and they do
not control): `own_cluster()` creates a cluster with scripts/localpg.py under the project's
.local/ (the server user must reach it), creates the database with its owner and runtime roles,
migrates and grants as a deployment does, and stops and removes it at the end. Without PostgreSQL
server binaries the test is skipped, saying why. Clusters are durable (fsync and
synchronous_commit on) unless `fast` is asked for.
"""

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

from tests.conftest import ROOT, manage

LOCALPG = ROOT / "scripts" / "localpg.py"
RUNTIME_ROLE = "orquestador_app"  # the runtime role scripts/localpg.py setup creates
DATABASE = "orquestador"


def localpg(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(LOCALPG), *args], capture_output=True, text=True, timeout=180
    )


@dataclass(frozen=True)
class Cluster:
    base: Path
    admin_url: str  # the superuser, on the database the processes use
    env: dict[str, str]  # DATABASE_URL, MIGRATION_DATABASE_URL and the rest, for manage.py

    def stop(self) -> None:
        done = localpg("stop", "--dir", str(self.base))
        assert done.returncode == 0, done.stderr

    def start(self) -> None:
        done = localpg("start", "--dir", str(self.base))
        assert done.returncode == 0, done.stderr

    def crash_restart(self) -> None:
        done = localpg("crash-restart", "--dir", str(self.base))
        assert done.returncode == 0, done.stderr

    def terminate_runtime_backends(self) -> int:
        """pg_terminate_backend every connection of the runtime role; how many there were."""
        with psycopg.connect(self.admin_url, autocommit=True, connect_timeout=5) as conn:
            return conn.execute(
                "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE usename = %s",
                [RUNTIME_ROLE],
            ).fetchone()[0]


@contextlib.contextmanager
def own_cluster(prefix: str = "pg-own") -> Iterator[Cluster]:
    (ROOT / ".local").mkdir(exist_ok=True)
    base = Path(tempfile.mkdtemp(prefix=f"{prefix}.", dir=ROOT / ".local"))
    try:
        made = localpg("setup", "--dir", str(base), "--env-file", str(base / "db.env"))
        if made.returncode != 0 and "were not found" in made.stderr:
            pytest.skip("needs PostgreSQL server binaries to run a cluster it may stop")
        assert made.returncode == 0, made.stderr
        urls = dict(line.split("=", 1) for line in (base / "db.env").read_text().splitlines())
        env = {
            **os.environ,
            **urls,
            "DJANGO_SETTINGS_MODULE": "orquestador.settings",
            "PYTHONUNBUFFERED": "1",
        }
        for command in (("migrate", "--no-input"), ("grantruntime",)):
            done = subprocess.run(
                manage(*command), env=env, capture_output=True, text=True, timeout=300
            )
            assert done.returncode == 0, done.stderr
        admin = localpg("url", "--dir", str(base)).stdout.strip().rsplit("/", 1)[0]
        yield Cluster(base, f"{admin}/{DATABASE}", env)
    finally:
        localpg("stop", "--dir", str(base))
        shutil.rmtree(base, ignore_errors=True)
