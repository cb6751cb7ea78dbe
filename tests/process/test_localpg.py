"""scripts/localpg.py: a project-local cluster that is idempotent and touches only what it made."""

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import psycopg
import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.process

LOCALPG = ROOT / "scripts" / "localpg.py"


def _localpg(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(LOCALPG), *args], capture_output=True, text=True, timeout=120
    )


@pytest.fixture
def cluster_dir():
    # Under the project's .local/, as scripts/test does: the server user must reach the folder,
    # and pytest's own temporary folders are private to their owner.
    (ROOT / ".local").mkdir(exist_ok=True)
    base = Path(tempfile.mkdtemp(prefix="pg-localpg-test.", dir=ROOT / ".local"))
    yield base
    _localpg("stop", "--dir", str(base))
    shutil.rmtree(base, ignore_errors=True)


def test_localpg__setup_is_idempotent_and_creates_both_roles(cluster_dir):
    env_file = cluster_dir / "db.env"
    first = _localpg("setup", "--dir", str(cluster_dir), "--env-file", str(env_file))
    assert first.returncode == 0, first.stderr
    port = json.loads((cluster_dir / "cluster.json").read_text())["port"]
    urls = dict(line.split("=", 1) for line in env_file.read_text().splitlines())

    again = _localpg("setup", "--dir", str(cluster_dir), "--env-file", str(env_file))
    assert again.returncode == 0, again.stderr
    assert json.loads((cluster_dir / "cluster.json").read_text())["port"] == port
    assert dict(line.split("=", 1) for line in env_file.read_text().splitlines()) == urls

    with psycopg.connect(urls["DATABASE_URL"]) as conn:
        row = conn.execute(
            "SELECT current_user, rolsuper, has_schema_privilege(current_user, 'public', 'CREATE'),"
            " host(inet_server_addr()) FROM pg_roles WHERE rolname = current_user"
        ).fetchone()
    assert row == ("orquestador_app", False, False, "127.0.0.1")
    with psycopg.connect(urls["MIGRATION_DATABASE_URL"]) as conn:
        owner = conn.execute(
            "SELECT pg_get_userbyid(nspowner) FROM pg_namespace WHERE nspname = 'public'"
        ).fetchone()
    assert owner == ("orquestador_owner",)

    assert _localpg("status", "--dir", str(cluster_dir)).stdout.strip() == "running"
    assert _localpg("stop", "--dir", str(cluster_dir)).returncode == 0
    assert _localpg("status", "--dir", str(cluster_dir)).stdout.strip() == "stopped"
    assert _localpg("stop", "--dir", str(cluster_dir)).returncode == 0  # stopping twice is fine


def test_localpg__refuses_a_folder_it_did_not_create(tmp_path):
    foreign = tmp_path / "foreign"
    (foreign / "data").mkdir(parents=True)
    (foreign / "data" / "PG_VERSION").write_text("15\n")
    result = _localpg("start", "--dir", str(foreign))
    assert result.returncode != 0
    assert "was not created by this tool" in result.stderr
    assert sorted(p.name for p in (foreign / "data").iterdir()) == ["PG_VERSION"]


def test_localpg__stop_refuses_a_cluster_whose_marker_does_not_match(cluster_dir):
    assert _localpg("start", "--dir", str(cluster_dir), "--fast").returncode == 0
    state = json.loads((cluster_dir / "cluster.json").read_text())
    marker = cluster_dir / "data" / "ORQUESTADOR_LOCAL_CLUSTER"
    original = marker.read_text()
    marker.write_text("someone-else")
    try:
        result = _localpg("stop", "--dir", str(cluster_dir))
        assert result.returncode != 0 and "did not create" in result.stderr
        assert _localpg("status", "--dir", str(cluster_dir)).stdout.strip() == "running"
    finally:
        marker.write_text(original)
    assert state["port"] > 0


@pytest.mark.skipif(os.geteuid() != 0, reason="the server user differs only when run as root")
def test_localpg__says_when_the_server_user_cannot_reach_the_folder(tmp_path):
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    result = _localpg("start", "--dir", str(private / "pg"))
    assert result.returncode != 0
    assert "cannot reach" in result.stderr and "chmod o+x" in result.stderr
