"""`manage.py webhookreceiver` as scripts/start runs it: it refuses to subscribe an http://
loopback URL unless the demo's settings allow it, replaces its tenant's earlier subscription to
it, prints one `[webhook]` line per delivery with the signature checked against the secret its
subscription holds, answers 401 to one that does not verify, and stops on SIGINT."""

import http.client
import json
import signal
import socket
import subprocess
import time

import pytest

from executions.webhooks.models import WebhookSubscription
from executions.webhooks.signing import secret_new, signature_header
from tests.conftest import manage
from tests.support.worker import wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.process]

DEADLINE = 30.0  # seconds
DEMO = {"WEBHOOK_ALLOW_HTTP": "true", "WEBHOOK_ALLOW_PRIVATE_NETWORKS": "true"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _post(port: int, body: bytes, signature: str) -> int:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        connection.request("POST", "/", body, {"Orquestador-Signature": signature})
        return connection.getresponse().status
    finally:
        connection.close()


def test_webhookreceiver__without_the_demo_settings__refuses_to_subscribe(process_env):
    done = subprocess.run(
        manage("webhookreceiver", "--port", "0"),
        env=process_env,
        capture_output=True,
        text=True,
        timeout=DEADLINE,
    )
    assert done.returncode != 0
    assert "WEBHOOK_ALLOW_HTTP=true" in done.stderr and "(rule: https)" in done.stderr


def test_webhookreceiver__prints_each_delivery_with_its_signature_checked(process_env, tmp_path):
    port = _free_port()
    url = f"http://127.0.0.1:{port}/"
    earlier = WebhookSubscription.objects.create(
        tenant="acme", url=url, events=["execution.failed"], secret=secret_new()
    )
    log, ready = tmp_path / "receiver.log", tmp_path / "ready"
    with log.open("wb") as out:
        process = subprocess.Popen(
            manage("webhookreceiver", "--port", str(port), "--ready-file", str(ready)),
            env={**process_env, **DEMO},
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_until(
            lambda: ready.exists() or process.poll() is not None, timeout=DEADLINE, what="ready"
        )
        assert process.poll() is None, log.read_text()
        (subscription,) = WebhookSubscription.objects.filter(tenant="acme", url=url)
        assert subscription.pk != earlier.pk and len(subscription.events) == 6
        body = json.dumps(
            {"id": "e1", "type": "execution.succeeded", "data": {"id": "x1", "status": "SUCCEEDED"}}
        ).encode()
        now = int(time.time())
        good = signature_header(secrets=[subscription.secret], timestamp=now, body=body)
        assert _post(port, body, good) == 204
        forged = signature_header(secrets=[earlier.secret], timestamp=now, body=body)
        assert _post(port, body, forged) == 401
    finally:
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=DEADLINE) == 0, log.read_text()
    lines = log.read_text().splitlines()
    assert lines[0].startswith(f"[webhook] receiver on {url}, subscribed to tenant acme's events")
    assert lines[1:] == [
        "[webhook] execution.succeeded e1: execution x1 SUCCEEDED: signature verified",
        "[webhook] execution.succeeded e1: execution x1 SUCCEEDED: signature does NOT verify; "
        "answered 401",
        "[webhook] receiver stopped",
    ]
