"""The API against its own OpenAPI schema: schemathesis, every check, against gunicorn on
127.0.0.1 serving the schema it publishes, as the runtime role, with real signed tokens.

Fails on any 5xx, any answer the schema does not describe (status, headers, content type, body),
any schema-invalid request accepted, and any schema-valid request refused as malformed (400):
what a generated client sends from the schema, the server takes. The lists' cursors are left
out of what it generates (see schema_without_cursors). The statuses a schema cannot
predict (the flow named may not exist: 404; its dataSchema or transition may refuse the data:
422; the request may have moved on: 409) are the only other answers a valid request may get.
Bounded: SCHEMATHESIS_SECONDS of generation, a fixed seed, then the run stops by itself.
"""

import copy
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from executions.flows.publication import flow_publish
from tests.conftest import ROOT, manage
from tests.integration.api.conftest import FLOW

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.process]

SCHEMATHESIS_SECONDS = int(os.environ.get("SCHEMATHESIS_SECONDS", "90"))  # generation budget
START_DEADLINE = 60  # seconds for the server to answer /healthz
SEED = 20261201
SCOPES = "requests:write requests:read flows:admin executions:resume webhooks:admin"
# Authenticated by an HMAC of the body with a route's secret, not by the bearer token: a
# generated request can never be signed, so every answer would be 401. Its own tests cover it
# (tests/integration/api/test_callbacks.py).
UNSIGNABLE = "/api/v1/callbacks/"
# Statuses a schema-valid request may still get (see the module docstring); never 400 or 5xx.
VALID_MAY_GET = ["2xx", "401", "403", "404", "409", "422"]
CONFIG = f"""
[checks.positive_data_acceptance]
expected-statuses = {VALID_MAY_GET!r}
"""


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
        "JWT_SECRET": "s" * 48,
        "JWT_PUBLIC_KEY": "",
        "DEBUG": "false",
        "WEB_BIND": f"127.0.0.1:{free_port()}",
        "WEB_WORKERS": "2",
    }
    log_path = tmp_path / "gunicorn.log"
    gunicorn = str(Path(sys.executable).parent / "gunicorn")
    with log_path.open("w") as log:
        process = subprocess.Popen(
            [gunicorn, "-c", "python:orquestador.gunicorn", "orquestador.wsgi:application"],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    base = f"http://{env['WEB_BIND']}"
    try:
        deadline = time.monotonic() + START_DEADLINE
        while True:
            assert process.poll() is None, log_path.read_text()
            try:
                if requests.get(f"{base}/healthz", timeout=5).status_code == 200:
                    break
            except (requests.ConnectionError, requests.Timeout):  # not up yet, or still booting
                pass
            assert time.monotonic() < deadline, "gunicorn did not answer /healthz in time"
            time.sleep(0.1)  # polling a condition (the port answering), with a deadline
        yield base, env
    finally:
        process.terminate()  # our own child, by its pid
        process.wait(timeout=30)
        assert "Traceback" not in log_path.read_text(), log_path.read_text()[-4000:]


def mint(env: dict, scope: str) -> str:
    return subprocess.run(
        manage("minttoken", "--sub", "fuzz", "--tenant", "acme", "--scope", scope, "--ttl", "900"),
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout.strip()


def schema_without_cursors(base: str, path: Path) -> Path:
    """The published schema without the lists' `cursor` parameter: a generated cursor can never
    be one the server made for that caller and those filters, so every such request would be a
    right 400 INVALID_CURSOR that positive_data_acceptance counts as a refusal of valid data.
    Cursors have their own tests (tests/integration/api/test_lists.py)."""
    schema = requests.get(f"{base}/api/schema/?format=json", timeout=30).json()
    for operations in schema["paths"].values():
        for operation in operations.values():
            parameters = operation.get("parameters", [])
            operation["parameters"] = [p for p in parameters if p.get("name") != "cursor"]
    path.write_text(json.dumps(schema))
    return path


def test_schemathesis__every_check_passes_against_a_real_server(server, tmp_path):
    base, env = server
    # The flow the schema's examples name (the demo flow), and the suite's own.
    flow_publish(definition=json.loads((ROOT / "examples" / "onboarding.json").read_text()))
    flow_publish(definition=copy.deepcopy(FLOW))
    config = tmp_path / "schemathesis.toml"
    config.write_text(CONFIG)
    schemathesis = str(Path(sys.executable).parent / "schemathesis")
    result = subprocess.run(
        [
            schemathesis,
            "--config-file",
            str(config),
            "--no-color",
            "run",
            str(schema_without_cursors(base, tmp_path / "schema.json")),
            "--url",
            base,
            "--checks",
            "all",
            "--header",
            f"Authorization: Bearer {mint(env, SCOPES)}",
            "--exclude-path-regex",
            f"^{UNSIGNABLE}",
            "--max-time",
            str(SCHEMATHESIS_SECONDS),
            "--seed",
            str(SEED),
            # One worker: hypothesis describes its filters with ast.parse, which CPython 3.11 does
            # not make safe across threads ("AST constructor recursion depth mismatch").
            "--workers",
            "1",
            "--request-timeout",
            "10",
            "--generation-database",
            "none",
            # Top-level strings carry a no-NUL pattern in the schema; inside the free-form `data`
            # and flow documents JSON Schema cannot say "at any depth" without recursion, so the
            # descriptions say it and generation leaves NUL out there (the server answers 400).
            "--generation-allow-x00",
            "false",
            "--output-truncate",
            "false",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=SCHEMATHESIS_SECONDS + 120,
    )
    print(result.stdout[-6000:])  # the run's summary, shown with -s or on failure
    report = result.stdout[-20000:] + result.stderr[-4000:]
    assert result.returncode == 0, report
    # every operation of the schema was exercised, but the signed callback
    assert "Tested: 17" in result.stdout, report
