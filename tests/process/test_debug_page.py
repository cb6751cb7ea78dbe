"""Even with DEBUG turned on, the debug page of a real server shows no secret.

runserver puts the whole process environment into each request's META, so its debug page once
printed DATABASE_URL and MIGRATION_DATABASE_URL in full (the schema owner's password) to anyone
sending a foreign Host header. Every secret of the process is searched for in the page."""

import socket
import subprocess
import time
from collections.abc import Iterator

import environ
import pytest
import requests

from tests.conftest import manage

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.process]

START_DEADLINE = 60  # seconds for the server to answer /healthz
SECRETS = {
    "SECRET_KEY": "debug-page-test-secret-key-" + "k" * 40,
    "JWT_SECRET": "debug-page-test-jwt-secret-" + "j" * 20,
    "METRICS_TOKEN": "debug-page-test-metrics-token-" + "m" * 10,
    "PROVIDER_API_CREDENTIAL": "debug-page-test-provider-credential",
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def debug_server(process_env, tmp_path) -> Iterator[tuple[str, dict]]:
    env = {**process_env, **SECRETS, "DEBUG": "true", "REQUEST_API_ENABLED": "true"}
    port = free_port()
    log_path = tmp_path / "server.log"
    with log_path.open("w") as log:
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
            assert process.poll() is None, log_path.read_text()
            try:
                if requests.get(f"{base}/healthz", timeout=5).status_code == 200:
                    break
            except requests.ConnectionError:
                pass
            assert time.monotonic() < deadline, "the server did not answer /healthz in time"
            time.sleep(0.1)  # polling a condition (the port answering), with a deadline
        yield base, env
    finally:
        process.terminate()  # our own child, by its pid
        process.wait(timeout=30)


def test_debug_on__foreign_host_page_masks_every_secret(debug_server):
    base, env = debug_server
    passwords = [
        environ.Env.db_url_config(env[name])["PASSWORD"]
        for name in ("DATABASE_URL", "MIGRATION_DATABASE_URL")
    ]
    for path in ("/healthz", "/admin/", "/api/v1/requests"):
        response = requests.get(f"{base}{path}", headers={"Host": "evil.example"}, timeout=10)
        assert response.status_code == 400
        page = response.text
        assert "DisallowedHost" in page  # the debug page itself
        assert "MIGRATION_DATABASE_URL" in page  # listed, masked
        for secret in [*passwords, *SECRETS.values()]:
            assert secret not in page, path
