"""`manage.py sandboxprovider` as scripts/start runs it: it says where it listens, serves until
SIGTERM, logs what it did to each write (applied, refused or dropped: one `[sandbox]` line each),
stops cleanly, and refuses bad options or a taken port with a message that names them."""

import http.client
import json
import re
import signal
import socket
import subprocess
from pathlib import Path

import pytest

from tests.conftest import manage
from tests.support.worker import wait_until

pytestmark = pytest.mark.process

DEADLINE = 30.0  # seconds


def _listening_port(log: Path, process: subprocess.Popen) -> int:
    def announced() -> int | None:
        if process.poll() is not None:
            raise AssertionError(f"sandboxprovider exited {process.returncode}:\n{log.read_text()}")
        found = re.search(r"sandbox provider on http://127\.0\.0\.1:(\d+)", log.read_text())
        return int(found.group(1)) if found else None

    return wait_until(announced, timeout=DEADLINE, what="the sandbox to listen")


def test_sandboxprovider__serves_until_sigterm_and_logs_each_write(process_env, tmp_path):
    log = tmp_path / "sandbox.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            manage(
                "sandboxprovider",
                "--port",
                "0",
                "--fail-after-apply",
                "1",
                "--fail-before-apply",
                "0",
            ),
            env=process_env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        port = _listening_port(log, process)
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        body = json.dumps({"sku": "book-42", "quantity": 2})
        connection.request(
            "POST", "/reservations", body, {"Idempotency-Key": "e1:reserve"}
        )  # applied, then the connection is dropped
        with pytest.raises((http.client.HTTPException, OSError)):
            connection.getresponse()
        connection.close()
        lookup = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        lookup.request("GET", "/reservations/by-key/e1%3Areserve")
        found = lookup.getresponse()
        assert (found.status, json.loads(found.read())["quantity"]) == (200, 2)
        lookup.request(
            "POST",
            "/charges",
            json.dumps({"customer": "cus_declined_bo", "amount": 900, "currency": "EUR"}),
            {"Idempotency-Key": "e2:charge", "Authorization": "Bearer x"},
        )  # refused for good, before any fault is drawn
        assert lookup.getresponse().status == 402
        lookup.close()
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=DEADLINE) == 0, log.read_text()
    text = log.read_text()
    assert "key=e1:reserve: applied res_000001, then dropped the connection" in text
    assert "[sandbox] POST /charges key=e2:charge: refused 402 CARD_DECLINED" in text
    assert all(line.startswith("[sandbox] ") for line in text.splitlines()), text
    assert text.rstrip().endswith("sandbox provider stopped")
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--fail-after-apply", "0.7", "--fail-before-apply", "0.5"], "together at most 1"),
        (["--fail-before-apply", "2"], "--fail-before-apply: must be a fraction"),
        (["--port", "70000"], "--port: must be between 0 and 65535"),
    ],
)
def test_sandboxprovider__bad_options__refused_by_name(process_env, arguments, message):
    done = subprocess.run(
        manage("sandboxprovider", *arguments),
        env=process_env,
        capture_output=True,
        text=True,
        timeout=DEADLINE,
    )

    assert done.returncode != 0
    assert message in done.stderr


def test_sandboxprovider__port_taken__says_so(process_env):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            manage("sandboxprovider", "--port", str(port)),
            env=process_env,
            capture_output=True,
            text=True,
            timeout=DEADLINE,
        )

    assert done.returncode != 0
    assert f"--port {port}: cannot listen on 127.0.0.1" in done.stderr
