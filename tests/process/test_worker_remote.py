"""The remote runtime between real processes: a web process serving the worker endpoint on
127.0.0.1 and a `runworker` with WORKER_RUNTIME=remote; and the start-up refusals of both."""

import collections
import contextlib
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from tests.conftest import manage
from tests.support.providers import JsonProvider
from tests.support.worker import (
    PROCESS_SETTINGS,
    WorkerProcess,
    action,
    audit_events,
    checkpoint_rows,
    create_flow,
    enqueue,
    execution_row,
    flow_definition,
    status_of,
    wait_until,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.process]

TOKEN = "e" * 40
START_DEADLINE = 60.0  # seconds for a process to answer over HTTP
# Leases long enough that the remote runtime's read timeout (lease - renewal) is comfortable.
REMOTE_LEASE = {"WORKER_LEASE_SECONDS": "10", "WORKER_RENEW_SECONDS": "2"}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def answers(url: str) -> bool:
    try:
        requests.get(url, timeout=5)
    except requests.ConnectionError:
        return False
    return True


@contextlib.contextmanager
def endpoint_process(env: dict[str, str], log_path: Path) -> Iterator[str]:
    """A web process serving the worker endpoint with `env`; yields its base URL."""
    port = free_port()
    with log_path.open("w") as log:
        process = subprocess.Popen(
            manage("runserver", f"127.0.0.1:{port}", "--noreload", "--skip-checks"),
            env={
                **env,
                "WORKER_ENDPOINT_ENABLED": "true",
                "WORKER_ENDPOINT_TOKEN": TOKEN,
                "DEBUG": "false",
            },
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            deadline = time.monotonic() + START_DEADLINE
            while not answers(f"http://127.0.0.1:{port}/healthz"):
                assert process.poll() is None, log_path.read_text()
                assert time.monotonic() < deadline, "the web process did not answer in time"
                time.sleep(0.1)  # polling a condition (the port answering), with a deadline
            yield f"http://127.0.0.1:{port}/internal/worker/"
        finally:
            process.terminate()  # our own child, by its pid
            process.wait(timeout=30)


@pytest.fixture
def endpoint_web(process_env, tmp_path) -> Iterator[tuple[str, Path]]:
    """A web process serving the worker endpoint; yields its base URL and its log file."""
    log_path = tmp_path / "web.log"
    with endpoint_process({**process_env, **PROCESS_SETTINGS, **REMOTE_LEASE}, log_path) as url:
        yield url, log_path


def test_runworker__runs_executions_on_the_worker_endpoint(
    endpoint_web, process_env, runtime_conn, tmp_path
):
    url, web_log = endpoint_web
    flow_id = create_flow(runtime_conn, flow_definition([action("a", "NO_OP")]))
    accepted = [enqueue(runtime_conn, flow_id) for _ in range(3)]
    overrides = {
        **REMOTE_LEASE,
        "WORKER_RUNTIME": "remote",
        "WORKER_REMOTE_URL": url,
        "WORKER_ENDPOINT_TOKEN": TOKEN,
    }
    with WorkerProcess(process_env, tmp_path / "worker.log", **overrides) as worker:
        wait_until(
            lambda: all(status_of(runtime_conn, a.execution_id) == "SUCCEEDED" for a in accepted),
            timeout=START_DEADLINE,
            what="the executions to succeed through the worker endpoint",
        )
        claimed = {
            e["execution_id"] for e in worker.events() if e.get("event") == "execution claimed"
        }
        assert claimed == {str(a.execution_id) for a in accepted}
    # The web server logs a request after answering it: wait for the lines rather than race them.
    wait_until(
        lambda: web_log.read_text().count("/internal/worker/execute") >= 3,
        timeout=START_DEADLINE,
        what="the web process to log the three endpoint calls",
    )


def _refused(command: str, env: dict) -> subprocess.CompletedProcess:
    result = subprocess.run(
        manage(command, *(["127.0.0.1:0", "--noreload"] if command == "runserver" else [])),
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode != 0, result.stdout
    return result


@pytest.mark.parametrize(
    ("token", "message"),
    [
        ("", "WORKER_ENDPOINT_ENABLED is true, but WORKER_ENDPOINT_TOKEN is not set"),
        ("short", "WORKER_ENDPOINT_TOKEN must be at least 32 characters"),
    ],
    ids=["without-token", "short-token"],
)
def test_web__refuses_to_start_the_endpoint_without_its_token(process_env, token, message):
    env = {**process_env, "WORKER_ENDPOINT_ENABLED": "true", "WORKER_ENDPOINT_TOKEN": token}
    assert message in _refused("runserver", env).stderr


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"WORKER_RUNTIME": "cloud"}, "WORKER_RUNTIME must be local or remote"),
        ({"WORKER_RUNTIME": "remote"}, "WORKER_REMOTE_URL is required"),
        (
            {
                "WORKER_RUNTIME": "remote",
                "WORKER_REMOTE_URL": "http://127.0.0.1:9/internal/worker/",
            },
            "WORKER_ENDPOINT_TOKEN is required",
        ),
    ],
)
def test_runworker__refuses_a_bad_runtime_setting_naming_it(
    process_env, runtime_conn, overrides, message
):
    accepted = enqueue(runtime_conn, create_flow(runtime_conn, flow_definition([])))
    result = _refused("runworker", {**process_env, **PROCESS_SETTINGS, **overrides})
    assert message in result.stderr
    assert execution_row(runtime_conn, accepted.execution_id)["attempts"] == 0  # nothing claimed


@pytest.mark.parametrize("server", ["runserver", "gunicorn"])
def test_web__refuses_to_serve_the_endpoint_as_an_unrestricted_role(process_env, server):
    env = {
        **process_env,
        "DATABASE_URL": process_env["MIGRATION_DATABASE_URL"],  # the schema owner
        "WORKER_ENDPOINT_ENABLED": "true",
        "WORKER_ENDPOINT_TOKEN": TOKEN,
    }
    if server == "runserver":
        result = _refused("runserver", env)
    else:
        result = subprocess.run(
            [
                str(Path(sys.executable).parent / "gunicorn"),
                "--bind",
                "127.0.0.1:0",
                "orquestador.wsgi:application",
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert result.returncode != 0, result.stderr
    assert "DATABASE_URL must name a restricted runtime role" in result.stderr
    assert "owns schema" in result.stderr


# A 2 s lease renewed every 0.5 s, and an endpoint that may work for 30 s on one package.
LONG_RUN = {
    "WORKER_LEASE_SECONDS": "2",
    "WORKER_RENEW_SECONDS": "0.5",
    "WORKER_ENDPOINT_RUN_SECONDS": "30",
}


def test_runworker__a_remote_run_longer_than_its_lease_completes_once(
    process_env, runtime_conn, tmp_path
):
    """Four actions, a non-idempotent write among them, taking about three leases in all on the
    endpoint: the dispatcher keeps renewing the lease while the endpoint works, so the run is
    never reclaimed, nothing runs twice, and the write happens once."""
    with JsonProvider() as provider:
        integrations = tmp_path / "integrations.toml"
        integrations.write_text(
            '[contracts."payments.charge@1"]\n'
            'effect = "NON_IDEMPOTENT_WRITE"\n'
            "timeout_seconds = 1\n"
            "\n"
            '[routes."payments.charge@1"]\n'
            'adapter = "http.json"\n'
            f'url = "{provider.url("/charges")}"\n'
        )
        env = {**process_env, "INTEGRATIONS_FILE": str(integrations)}
        nap = {"seconds": 1.5}
        flow_id = create_flow(
            runtime_conn,
            flow_definition(
                [
                    action("nap1", "SIM_SLEEP", input=nap),
                    action("charge", "payments.charge"),
                    action("nap2", "SIM_SLEEP", input=nap),
                    action("nap3", "SIM_SLEEP", input=nap),
                ]
            ),
        )
        accepted = enqueue(runtime_conn, flow_id)
        web_env = {**env, **PROCESS_SETTINGS, **LONG_RUN}
        with endpoint_process(web_env, tmp_path / "web.log") as url:
            overrides = {
                **LONG_RUN,
                "WORKER_RUNTIME": "remote",
                "WORKER_REMOTE_URL": url,
                "WORKER_ENDPOINT_TOKEN": TOKEN,
            }
            with WorkerProcess(env, tmp_path / "worker.log", **overrides) as worker:
                wait_until(
                    lambda: status_of(runtime_conn, accepted.execution_id) == "SUCCEEDED",
                    timeout=START_DEADLINE,
                    what="the long remote run to succeed",
                )
                events = worker.events()
        keys = collections.Counter(r.headers["idempotency-key"] for r in provider.requests())
        assert keys == {f"{accepted.execution_id}:charge": 1}  # the write, once
        assert len(provider.effects("/charges")) == 1

    claims = [e for e in events if e.get("event") == "execution claimed"]
    assert [c["execution_id"] for c in claims] == [str(accepted.execution_id)]
    assert not [e for e in events if e.get("event") in ("lease lost", "execution superseded")]
    execution = execution_row(runtime_conn, accepted.execution_id)
    assert (execution["attempts"], execution["fencing_token"]) == (1, 1)  # never reclaimed
    ran_for = (execution["finished_at"] - execution["started_at"]).total_seconds()
    assert ran_for > 2 * float(LONG_RUN["WORKER_LEASE_SECONDS"])  # well past one lease
    checkpoints = checkpoint_rows(runtime_conn, accepted.execution_id)
    assert {k: (c["status"], c["attempt"]) for k, c in checkpoints.items()} == {
        "nap1": ("SUCCEEDED", 1),
        "charge": ("SUCCEEDED", 1),
        "nap2": ("SUCCEEDED", 1),
        "nap3": ("SUCCEEDED", 1),
    }
    kinds = [kind for kind, _ in audit_events(runtime_conn, accepted.request_id)]
    assert "LEASE_TAKEN_OVER" not in kinds
    assert kinds[-1] == "TRANSITION_COMPLETED"
