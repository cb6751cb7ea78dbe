"""The API in a real web process on the runtime role, driven over a socket with a token from
`manage.py minttoken`, as the README shows: create, accept (the worker is not running), poll."""

import copy
import socket
import subprocess
import threading
import time
from collections.abc import Iterator

import pytest
import requests

from executions.flows.publication import flow_publish
from tests.conftest import manage
from tests.support import tokens

from .conftest import FLOW

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.process]

START_DEADLINE = 60  # seconds for the server to answer /healthz
TIMEOUT = 10  # seconds per HTTP call


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def server(process_env, tmp_path) -> Iterator[tuple[str, dict]]:
    env = {
        **process_env,
        "REQUEST_API_ENABLED": "true",
        "FLOW_ADMIN_ENABLED": "true",
        "JWT_SECRET": tokens.SECRET,
        "JWT_PUBLIC_KEY": "",
        "DEBUG": "false",
    }
    port = free_port()
    log = (tmp_path / "server.log").open("w")
    process = subprocess.Popen(
        manage("runserver", f"127.0.0.1:{port}", "--noreload", "--skip-checks"),
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_DEADLINE
        while True:
            assert process.poll() is None, (tmp_path / "server.log").read_text()
            try:
                if requests.get(f"{base}/healthz", timeout=TIMEOUT).status_code == 200:
                    break
            except requests.ConnectionError:
                pass
            assert time.monotonic() < deadline, "the server did not answer /healthz in time"
            time.sleep(0.1)  # polling a condition (the port answering), with a deadline
        yield base, env
    finally:
        process.terminate()
        process.wait(timeout=30)
        log.close()


def mint(env: dict, scope: str) -> str:
    result = subprocess.run(
        manage("minttoken", "--sub", "alice", "--tenant", "acme", "--scope", scope),
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return result.stdout.strip()


def test_readme_walkthrough__as_the_runtime_role(server):
    base, env = server
    flow_publish(definition=copy.deepcopy(FLOW))
    auth = {"Authorization": f"Bearer {mint(env, 'requests:write requests:read')}"}

    created = requests.post(
        f"{base}/api/v1/requests",
        json={"flowKey": "claims", "data": {"applicant": "Ada"}},
        headers=auth,
        timeout=TIMEOUT,
    )
    assert created.status_code == 201, created.text
    request_id = created.json()["id"]

    accepted = requests.post(
        f"{base}/api/v1/requests/{request_id}/transitions",
        json={"transitionId": "submit", "expectedRevision": 1},
        headers={**auth, "Idempotency-Key": "submit-1"},
        timeout=TIMEOUT,
    )
    assert accepted.status_code == 202, accepted.text
    location = accepted.headers["Location"]
    assert location == f"/api/v1/executions/{accepted.json()['id']}"

    polled = requests.get(f"{base}{location}", headers=auth, timeout=TIMEOUT)
    assert polled.status_code == 200
    assert polled.json()["status"] == "PENDING"

    conflict = requests.post(
        f"{base}/api/v1/requests/{request_id}/transitions",
        json={"transitionId": "submit", "expectedRevision": 2},
        headers=auth,
        timeout=TIMEOUT,
    )
    assert (conflict.status_code, conflict.json()["code"]) == (409, "REQUEST_BLOCKED")

    broken = requests.post(
        f"{base}/api/v1/requests",
        data=b"{oops",
        headers={**auth, "Content-Type": "application/json"},
        timeout=TIMEOUT,
    )
    assert (broken.status_code, broken.json()["code"]) == (400, "INVALID_BODY")

    anonymous = requests.get(f"{base}{location}", timeout=TIMEOUT)
    assert anonymous.status_code == 401
    assert anonymous.headers["WWW-Authenticate"].startswith("Bearer")

    flows = requests.get(
        f"{base}/api/v1/flows",
        headers={"Authorization": f"Bearer {mint(env, 'flows:admin')}"},
        timeout=TIMEOUT,
    )
    assert [(f["key"], f["version"]) for f in flows.json()] == [("claims", 1)]

    schema = requests.get(f"{base}/api/schema/", params={"format": "json"}, timeout=TIMEOUT)
    assert "/api/v1/requests/{request_id}/transitions" in schema.json()["paths"]


def test_catastrophic_pattern__answers_at_once_and_healthz_is_unaffected(server):
    """The issue's repro: `^(a+)+$` and ~30 characters froze the web process for seconds."""
    base, env = server
    definition = copy.deepcopy(FLOW)
    definition["key"] = "patterned"
    definition["dataSchema"]["properties"]["applicant"]["pattern"] = "^(a+)+$"
    flow_publish(definition=definition)
    auth = {"Authorization": f"Bearer {mint(env, 'requests:write requests:read')}"}
    answers: list[tuple[int, str, float]] = []

    def hostile() -> None:
        for size in (30, 1_000, 10_000):
            started = time.monotonic()
            response = requests.post(
                f"{base}/api/v1/requests",
                json={"flowKey": "patterned", "data": {"applicant": "a" * size + "!"}},
                headers=auth,
                timeout=TIMEOUT,
            )
            took = time.monotonic() - started
            answers.append((response.status_code, response.json()["code"], took))

    attacker = threading.Thread(target=hostile)
    attacker.start()
    probes = []
    while attacker.is_alive():
        started = time.monotonic()
        assert requests.get(f"{base}/healthz", timeout=TIMEOUT).status_code == 200
        probes.append(time.monotonic() - started)
    attacker.join()
    assert [(status, code) for status, code, _ in answers] == [(422, "DATA_INVALID")] * 3
    assert max(took for _, _, took in answers) < 1.0, answers  # seconds, HTTP round trip
    assert probes and max(probes) < 1.0, probes
