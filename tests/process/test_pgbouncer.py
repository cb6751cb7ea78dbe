"""Behind PgBouncer in transaction pooling mode (DATABASE_POOLER=transaction): real processes.

The web process (gunicorn, the production configuration) and four runworker processes run
through a real PgBouncer 1.18 with fewer server connections than clients; every call answers as
it does directly, every execution completes, and afterwards no server session carries anything a
client left behind (settings, prepared statements, cursors, LISTEN). Two of the workers LISTEN on
a direct WORKER_LISTEN_DATABASE_URL, two poll. Refusals of combinations that cannot work are
checked on real `runworker` and web processes. Skipped, saying why, where pgbouncer is not
installed.
"""

import concurrent.futures
import copy
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
import requests

from executions.flows.publication import flow_publish
from tests.conftest import ROOT, manage
from tests.integration.api.conftest import FLOW
from tests.support import tokens
from tests.support.pgbouncer import PgBouncer, pgbouncer_missing, running_pgbouncer
from tests.support.worker import WorkerProcess, wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.process]

START_DEADLINE = 60  # seconds for a server to answer /healthz
TIMEOUT = 20  # seconds per HTTP call
POOL_SIZE = 3  # server connections PgBouncer may open; fewer than the clients below
CLIENTS = 8


@pytest.fixture
def bouncer(runtime_dsn) -> Iterator[PgBouncer]:
    missing = pgbouncer_missing()
    if missing:
        pytest.skip(missing)
    with running_pgbouncer(runtime_dsn, pool_size=POOL_SIZE) as running:
        yield running


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def pooled_web(process_env, bouncer, runtime_dsn, tmp_path) -> Iterator[str]:
    port = _free_port()
    env = {
        **process_env,
        "DATABASE_URL": bouncer.dsn(runtime_dsn),
        "DATABASE_POOLER": "transaction",
        "REQUEST_API_ENABLED": "true",
        "JWT_SECRET": tokens.SECRET,
        "JWT_PUBLIC_KEY": "",
        "WEB_BIND": f"127.0.0.1:{port}",
        "WEB_WORKERS": "2",
    }
    log_path = tmp_path / "web.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [
                str(Path(sys.executable).parent / "gunicorn"),
                "-c",
                "python:orquestador.gunicorn",
                "orquestador.wsgi:application",
            ],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        base = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + START_DEADLINE
            while True:
                assert process.poll() is None, log_path.read_text()
                try:
                    if requests.get(f"{base}/readyz", timeout=TIMEOUT).status_code == 200:
                        break
                except requests.ConnectionError:
                    pass
                assert time.monotonic() < deadline, "the web server did not become ready"
                time.sleep(0.1)  # polling a condition (the port answering), with a deadline
            yield base
        finally:
            process.terminate()  # our own child
            process.wait(timeout=30)
    output = log_path.read_text(errors="replace")
    assert "Traceback" not in output, output
    assert '"level": "ERROR"' not in output, output


# Parameters PgBouncer itself keeps per client and sets on the server session it assigns.
POOLER_TRACKED = (
    "client_encoding",
    "DateStyle",
    "TimeZone",
    "standard_conforming_strings",
    "application_name",
    "IntervalStyle",
)


def _session_state(conn: psycopg.Connection) -> tuple:
    """What a server session carries that a client could have left behind: settings changed by
    SET in the session, prepared statements, open cursors, LISTEN channels; and its pid."""
    return conn.execute(
        "SELECT (SELECT coalesce(array_agg(name ORDER BY name), '{}') FROM pg_settings "
        "        WHERE source = 'session' AND name <> ALL(%s)), "
        "(SELECT count(*) FROM pg_prepared_statements), "
        "(SELECT count(*) FROM pg_cursors WHERE name <> ''), "
        "(SELECT count(*) FROM pg_listening_channels()), pg_backend_pid()",
        [list(POOLER_TRACKED)],
    ).fetchone()


def assert_no_leaked_session_state(bouncer: PgBouncer, runtime_dsn: str) -> None:
    """Hold every server connection of the pool at once and look at each one's session."""
    clients = [bouncer.connect(runtime_dsn) for _ in range(POOL_SIZE)]
    try:
        for conn in clients:
            conn.execute("BEGIN")  # pins one server connection to this client
        states = [_session_state(conn) for conn in clients]
    finally:
        for conn in clients:
            conn.close()
    assert len({state[-1] for state in states}) == POOL_SIZE  # every server session was seen
    for state in states:
        assert state[:-1] == ([], 0, 0, 0), state


def test_api_through_pgbouncer__answers_every_call_and_leaks_no_session_state(
    pooled_web, bouncer, runtime_dsn
):
    flow_publish(definition=copy.deepcopy(FLOW))
    headers = {"Authorization": f"Bearer {tokens.token(sub='alice', tenant='acme')}"}

    def one_request(index: int) -> tuple[int, int, int]:
        with requests.Session() as http:
            http.headers.update(headers)
            created = http.post(
                f"{pooled_web}/api/v1/requests",
                json={"flowKey": FLOW["key"], "data": {"applicant": f"Ada {index}"}},
                timeout=TIMEOUT,
            )
            accepted = http.post(
                f"{pooled_web}/api/v1/requests/{created.json()['id']}/transitions",
                json={"transitionId": "submit", "expectedRevision": 1},
                headers={"Idempotency-Key": f"k-{index}"},
                timeout=TIMEOUT,
            )
            read = http.get(
                f"{pooled_web}/api/v1/executions/{accepted.json()['id']}", timeout=TIMEOUT
            )
            return created.status_code, accepted.status_code, read.status_code

    with concurrent.futures.ThreadPoolExecutor(CLIENTS) as pool:
        answers = list(pool.map(one_request, range(CLIENTS * 4)))

    assert answers == [(201, 202, 200)] * (CLIENTS * 4)
    with psycopg.connect(runtime_dsn, autocommit=True) as direct:
        assert direct.execute(
            "SELECT count(*) FROM execution WHERE idempotency_key LIKE 'k-%%'"
        ).fetchone() == (CLIENTS * 4,)
    assert_no_leaked_session_state(bouncer, runtime_dsn)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"DATABASE_POOLER": "session"}, "DATABASE_POOLER must be empty"),
        (
            {"WORKER_LISTEN_DATABASE_URL": "postgres://x:y@127.0.0.1:1/orquestador"},
            "WORKER_LISTEN_DATABASE_URL is set but DATABASE_POOLER is not 'transaction'",
        ),
    ],
)
def test_runworker__refuses_what_cannot_work_naming_it(process_env, overrides, message):
    refused = subprocess.run(
        manage("runworker"),
        env={**process_env, "WORKER_ENABLED": "true", "SIMULATION_MODE": "true", **overrides},
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert refused.returncode != 0
    assert message in refused.stderr


def test_web_process__refuses_an_unknown_pooler_mode(process_env):
    refused = subprocess.run(
        manage("check"),
        env={**process_env, "DATABASE_POOLER": "statement"},
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert refused.returncode != 0
    assert "DATABASE_POOLER must be empty" in refused.stderr


def test_workers_and_api_through_pgbouncer__every_execution_completes_leaking_nothing(
    pooled_web, bouncer, runtime_dsn, process_env, tmp_path
):
    definition = copy.deepcopy(FLOW)
    definition["key"] = "pooled"
    definition["transitions"][0]["actions"] = [
        {"id": "noop", "capability": "NO_OP", "version": 1, "input": {}}
    ]
    flow_publish(definition=definition)
    headers = {"Authorization": f"Bearer {tokens.token(sub='alice', tenant='acme')}"}
    pooled = {
        **process_env,
        "DATABASE_URL": bouncer.dsn(runtime_dsn),
        "DATABASE_POOLER": "transaction",
        "WORKER_CONCURRENCY": "4",
        "WORKER_LEASE_SECONDS": "10",
        "WORKER_RENEW_SECONDS": "2",
    }
    workers = [
        WorkerProcess(
            pooled,
            tmp_path / f"worker-{index}.log",
            **({"WORKER_LISTEN_DATABASE_URL": runtime_dsn} if index < 2 else {}),
        )
        for index in range(4)
    ]
    try:
        for worker in workers:
            worker.wait_started()

        def one_request(index: int) -> str:
            with requests.Session() as http:
                http.headers.update(headers)
                created = http.post(
                    f"{pooled_web}/api/v1/requests",
                    json={"flowKey": "pooled", "data": {"applicant": f"Ada {index}"}},
                    timeout=TIMEOUT,
                )
                assert created.status_code == 201, created.text
                accepted = http.post(
                    f"{pooled_web}/api/v1/requests/{created.json()['id']}/transitions",
                    json={"transitionId": "submit", "expectedRevision": 1},
                    timeout=TIMEOUT,
                )
                assert accepted.status_code == 202, accepted.text
                return accepted.json()["id"]

        with concurrent.futures.ThreadPoolExecutor(CLIENTS) as pool:
            ids = list(pool.map(one_request, range(CLIENTS * 4)))

        with psycopg.connect(runtime_dsn, autocommit=True) as direct:
            wait_until(
                lambda: (
                    direct.execute(
                        "SELECT count(*) FROM execution "
                        "WHERE id = ANY(%s) AND status = 'SUCCEEDED'",
                        [ids],
                    ).fetchone()[0]
                    == len(ids)
                ),
                timeout=60,
                what="every execution to succeed through the pooler",
            )
        for worker in workers:
            worker.signal(signal.SIGTERM)
        for worker in workers:
            assert worker.wait() == 0, worker.output()
    finally:
        for worker in workers:
            worker.close()

    for index, worker in enumerate(workers):
        output = worker.output()
        assert "Traceback" not in output, output
        assert not [e for e in worker.events() if e.get("level") == "ERROR"], output
        assert ("no LISTEN" in output) is (index >= 2), output
    claimed = sum(
        e["claimed"] for w in workers for e in w.events() if e["event"] == "worker stopped"
    )
    assert claimed == len(ids)
    assert_no_leaked_session_state(bouncer, runtime_dsn)
