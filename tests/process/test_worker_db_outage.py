"""runworker rides through a database outage: real processes on a cluster of the test's own.

The cluster is built here with scripts/localpg.py (never the suite's database, which other tests
use), stopped and started under a running worker. While it is down the worker keeps running,
claims nothing, logs the outage once and its end once; when it is back the worker claims again.
With WORKER_DB_OUTAGE_EXIT_SECONDS it stops instead, with exit status 3.
"""

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from tests.conftest import ROOT, manage
from tests.support.worker import (
    WorkerProcess,
    action,
    create_flow,
    enqueue,
    flow_definition,
    status_of,
    wait_until,
)

pytestmark = pytest.mark.process

LOCALPG = [sys.executable, str(ROOT / "scripts" / "localpg.py")]
OUTAGE_TIMEOUT = 60  # seconds for a worker to notice an outage, or its end
EXIT_SECONDS = 2.0  # seconds from "worker stopped" to the process's exit, at most


class Cluster:
    """A throwaway cluster of this test's own: stop() and start() are ours to call."""

    def __init__(self, base: Path) -> None:
        self.base = base
        env_file = base / "db.env"
        subprocess.run(
            [*LOCALPG, "setup", "--dir", str(base / "pg"), "--env-file", str(env_file)],
            check=True,
            capture_output=True,
        )
        self.urls = dict(line.split("=", 1) for line in env_file.read_text().split())
        env = {
            **os.environ,
            **self.urls,
            "DJANGO_SETTINGS_MODULE": "orquestador.settings",
            "SECRET_KEY": "outage-test-" + "x" * 40,
        }
        for command in (["migrate", "--noinput"], ["grantruntime"]):
            subprocess.run(manage(*command), env=env, check=True, capture_output=True)
        self.env = env

    def stop(self) -> None:
        subprocess.run([*LOCALPG, "stop", "--dir", str(self.base / "pg")], check=True)

    def start(self) -> None:
        subprocess.run([*LOCALPG, "start", "--dir", str(self.base / "pg")], check=True)

    def connect(self) -> psycopg.Connection:
        return psycopg.connect(self.urls["DATABASE_URL"], autocommit=True)


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    (ROOT / ".local").mkdir(exist_ok=True)
    base = Path(tempfile.mkdtemp(prefix="outage.", dir=ROOT / ".local"))
    os.chmod(base, 0o755)  # noqa: S103 (the server's OS user must reach the cluster inside)
    try:
        yield Cluster(base)
    finally:
        subprocess.run([*LOCALPG, "stop", "--dir", str(base / "pg")], check=False)
        shutil.rmtree(base, ignore_errors=True)


def _events(worker: WorkerProcess, name: str) -> list[dict]:
    return [e for e in worker.events() if e.get("event") == name]


def test_runworker__keeps_running_through_an_outage_and_claims_again(cluster, tmp_path):
    with cluster.connect() as conn:
        flow = create_flow(conn, flow_definition([action("a", "NO_OP")], key="outage-1"))
        first = enqueue(conn, flow).execution_id
    with WorkerProcess(cluster.env, tmp_path / "worker.log") as worker:
        with cluster.connect() as conn:
            wait_until(lambda: status_of(conn, first) == "SUCCEEDED", timeout=OUTAGE_TIMEOUT)

        cluster.stop()
        try:
            worker.wait_for_event("database unreachable", timeout=OUTAGE_TIMEOUT)
            # It keeps trying (backoff) without a log line per attempt, and stays up.
            wait_until(lambda: worker.output().count('"claim"') >= 1, timeout=OUTAGE_TIMEOUT)
            assert worker.process.poll() is None, worker.output()
        finally:
            cluster.start()

        back = worker.wait_for_event("database reachable again", timeout=OUTAGE_TIMEOUT)
        assert back["outage_seconds"] > 0
        with cluster.connect() as conn:
            second = enqueue(conn, flow).execution_id
            wait_until(lambda: status_of(conn, second) == "SUCCEEDED", timeout=OUTAGE_TIMEOUT)
        worker.signal(signal.SIGTERM)
        assert worker.wait() == 0, worker.output()
    assert len(_events(worker, "database unreachable")) == 1, worker.output()
    assert len(_events(worker, "database reachable again")) == 1, worker.output()
    assert "Traceback" not in worker.output()


def test_runworker__stops_after_WORKER_DB_OUTAGE_EXIT_SECONDS(cluster, tmp_path):
    with WorkerProcess(
        cluster.env, tmp_path / "worker.log", WORKER_DB_OUTAGE_EXIT_SECONDS="1"
    ) as worker:
        worker.wait_for_event("worker started", timeout=OUTAGE_TIMEOUT)
        cluster.stop()
        try:
            status, after = worker.wait_after_stopped(timeout=OUTAGE_TIMEOUT)
        finally:
            cluster.start()
    assert status == 3, worker.output()
    # Nothing it closes waits on the database that is gone.
    assert after < EXIT_SECONDS, (after, worker.output())
    assert _events(worker, "database unreachable for too long; stopping"), worker.output()
    assert "WORKER_DB_OUTAGE_EXIT_SECONDS" in worker.output()
