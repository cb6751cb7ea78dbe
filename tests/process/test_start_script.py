"""The README's run command, as a newcomer uses it: scripts/start brings up the database, the
demo flows, the sandbox provider, a worker and the web server (gunicorn, DEBUG off); a foreign
Host header gets no debug page and no secret; the admin is styled; a transition goes from PENDING
to SUCCEEDED; an order goes through the sandbox (paid, or waiting for an operator: the sandbox
loses writes on purpose); the declined checkout's refusal is a `[sandbox]` line and its webhook
reaches the demo's receiver, signature verified; SIGINT to it in the background (SIGINT ignored,
as bash starts a background job) stops every process it started."""

import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import environ
import pytest

from tests.conftest import ROOT, manage

pytestmark = pytest.mark.process

START_TIMEOUT = 180  # seconds: install check, initdb, migrations, flows
STEP_TIMEOUT = 30  # seconds
ORDER_TIMEOUT = 120  # seconds: the sandbox loses half the reservations' answers, each retried


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _call(
    method: str,
    url: str,
    token: str | None = None,
    body: dict | None = None,
    authorization: str | None = None,
):
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method)  # noqa: S310 (loopback)
    request.add_header("Content-Type", "application/json")
    if token or authorization:
        request.add_header("Authorization", authorization or f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=5) as response:  # noqa: S310
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null")


def _until(condition, timeout: float, what: str, proc: subprocess.Popen, log: Path):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(
                f"scripts/start exited ({proc.returncode}) before {what}:\n{log.read_text()}"
            )
        try:
            value = condition()
        except (OSError, urllib.error.URLError):
            value = None
        if value:
            return value
        time.sleep(0.2)
    pytest.fail(f"timed out waiting for {what}:\n{log.read_text()[-4000:]}")


def _get(port: int, path: str, host: str | None = None) -> tuple[int, dict, bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        connection.request("GET", path, headers={"Host": host} if host else {})
        response = connection.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        connection.close()


def _assert_foreign_host_sees_no_secret(port: int, secrets: dict[str, str]) -> None:
    """The issue's repro: a foreign Host header once got the debug page with DATABASE_URL."""
    passwords = [
        environ.Env.db_url_config(secrets[name])["PASSWORD"]
        for name in ("DATABASE_URL", "MIGRATION_DATABASE_URL")
    ]
    for path in ("/healthz", "/api/v1/requests/x", "/admin/"):
        status, _, body = _get(port, path, host="evil.example")
        assert status == 400, body[:500]
        text = body.decode(errors="replace")
        assert "DATABASE_URL" not in text and "Traceback" not in text, text[:500]
        for secret in [*passwords, secrets["SECRET_KEY"], secrets["JWT_SECRET"]]:
            assert secret not in text


def _assert_admin_is_styled(port: int) -> None:
    status, _, page = _get(port, "/admin/login/")
    assert status == 200
    assert b"/static/admin/css/base.css" in page
    status, headers, css = _get(port, "/static/admin/css/base.css")
    assert status == 200 and headers["Content-Type"].startswith("text/css"), headers
    assert b"body" in css


@pytest.fixture
def local_dir():
    (ROOT / ".local").mkdir(exist_ok=True)
    path = Path(tempfile.mkdtemp(prefix="start-test.", dir=ROOT / ".local"))
    path.chmod(0o755)  # the database server's user must reach the cluster inside it
    yield path
    subprocess.run(
        ["python3", str(ROOT / "scripts" / "localpg.py"), "stop", "--dir", str(path / "pg")],
        check=False,
        capture_output=True,
    )
    shutil.rmtree(path, ignore_errors=True)


def _descendants(root: int) -> dict[int, str]:
    """The processes under `root` now, by PID, with their command lines."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # gone meanwhile
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = {}, list(children.get(root, ()))
    while todo:
        pid = todo.pop()
        try:
            found[pid] = (Path("/proc") / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
        todo.extend(children.get(pid, ()))
    return {pid: line.decode(errors="replace") for pid, line in found.items()}


def _running(pid: int) -> bool:
    """Whether `pid` is a live process (a zombie waiting for its parent is not)."""
    try:
        state = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def test_start__runs_the_demo_end_to_end_and_stops_everything(local_dir):
    port, sandbox_port, receiver_port = _free_port(), _free_port(), _free_port()
    base = f"http://127.0.0.1:{port}"
    env = {
        "PATH": os.environ["PATH"],
        "HOME": os.environ.get("HOME", "/root"),
        "LOCAL_DIR": str(local_dir),
        "PORT": str(port),
        "SANDBOX_PORT": str(sandbox_port),
        "WEBHOOK_RECEIVER_PORT": str(receiver_port),
    }
    log = local_dir / "start.log"
    # Started as bash starts a background job without job control: SIGINT ignored (inherited).
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with open(log, "w") as out:
            proc = subprocess.Popen(
                [str(ROOT / "scripts" / "start")], cwd=ROOT, env=env, stdout=out, stderr=out
            )
    finally:
        signal.signal(signal.SIGINT, previous)
    started: dict[int, str] = {}
    try:
        _until(lambda: _call("GET", f"{base}/readyz")[0] == 200, START_TIMEOUT, "readyz", proc, log)

        secrets = dict(
            line.split("=", 1)
            for name in ("db.env", "secrets.env")
            for line in (local_dir / name).read_text().splitlines()
        )
        _assert_foreign_host_sees_no_secret(port, secrets)
        _assert_admin_is_styled(port)
        token = subprocess.run(
            manage(
                "minttoken",
                "--sub",
                "ada",
                "--tenant",
                "acme",
                "--scope",
                "requests:write requests:read",
                "--ttl",
                "600",
            ),
            env={**env, **secrets},
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        ).stdout.strip()

        status, created = _call(
            "POST",
            f"{base}/api/v1/requests",
            token,
            {"flowKey": "onboarding", "data": {"applicant": "Ada", "amount": 120}},
        )
        assert status == 201, created
        status, execution = _call(
            "POST",
            f"{base}/api/v1/requests/{created['id']}/transitions",
            token,
            {"transitionId": "submit", "expectedRevision": 1},
        )
        assert status == 202 and execution["status"] == "PENDING", execution

        def finished():
            _, view = _call("GET", f"{base}/api/v1/executions/{execution['id']}", token)
            return view if view and view["status"] not in ("PENDING", "RUNNING") else None

        view = _until(finished, STEP_TIMEOUT, "the execution to finish", proc, log)
        assert (view["status"], view["targetState"]) == ("SUCCEEDED", "SUBMITTED"), view
        # Its webhook reaches the demo's receiver (tenant acme's events), its signature checked.
        delivered = f": execution {execution['id']} SUCCEEDED: signature verified"
        _until(
            lambda: any(
                line.startswith("[webhook] execution.succeeded ") and line.endswith(delivered)
                for line in log.read_text().splitlines()
            ),
            STEP_TIMEOUT,
            "the receiver to print the signed delivery",
            proc,
            log,
        )
        _, request = _call("GET", f"{base}/api/v1/requests/{created['id']}", token)
        assert (request["state"], request["revision"], request["blocked"]) == (
            "SUBMITTED",
            3,
            False,
        )
        _assert_an_order_goes_through_the_sandbox(base, token, sandbox_port, secrets, proc, log)
        _assert_a_declined_checkout_is_compensated(base, token, sandbox_port, proc, log)
        started = _descendants(proc.pid)
        for what in ("sandboxprovider", "webhookreceiver", "runworker", "gunicorn", "nginx"):
            assert any(what in line for line in started.values()), (what, started)
    finally:
        proc.send_signal(signal.SIGINT)
        returncode = proc.wait(timeout=STEP_TIMEOUT)
    assert returncode == 130, log.read_text()[-4000:]
    assert [(pid, line) for pid, line in started.items() if _running(pid)] == []

    status = subprocess.run(
        ["python3", str(ROOT / "scripts" / "localpg.py"), "status", "--dir", str(local_dir / "pg")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert status == "stopped", log.read_text()[-4000:]
    assert "worker stopped" in log.read_text()
    assert "sandbox provider stopped" in log.read_text()
    assert "receiver stopped" in log.read_text()
    for stopped in (port, sandbox_port, receiver_port):
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", stopped), timeout=1).close()


def _assert_an_order_goes_through_the_sandbox(base, token, sandbox_port, secrets, proc, log):
    """The README tour's order: reserved at the sandbox, then paid, or waiting for an operator
    (a charge whose answer the sandbox dropped and its lookup could not find)."""
    order = {"customer": "cus_ada", "sku": "book-42", "quantity": 1, "amount": 2500}
    status, created = _call(
        "POST",
        f"{base}/api/v1/requests",
        token,
        {"flowKey": "order", "data": {**order, "currency": "EUR"}},
    )
    assert status == 201, created
    status, execution = _call(
        "POST",
        f"{base}/api/v1/requests/{created['id']}/transitions",
        token,
        {"transitionId": "place", "expectedRevision": 1},
    )
    assert status == 202, execution

    def settled():
        _, view = _call("GET", f"{base}/api/v1/executions/{execution['id']}", token)
        done = ("SUCCEEDED", "FAILED", "RECONCILIATION_REQUIRED")
        return view if view and view["status"] in done else None

    view = _until(settled, ORDER_TIMEOUT, "the order to settle", proc, log)
    assert view["status"] in ("SUCCEEDED", "RECONCILIATION_REQUIRED"), view
    sandbox = f"http://127.0.0.1:{sandbox_port}"
    status, reservation = _call("GET", f"{sandbox}/reservations/by-key/{execution['id']}%3Areserve")
    assert (status, reservation["sku"]) == (200, "book-42"), reservation
    if view["status"] == "SUCCEEDED":
        status, charge = _call(
            "GET",
            f"{sandbox}/charges/by-key/{execution['id']}%3Acharge",
            authorization=secrets["PAYMENTS_AUTH"].strip("'"),  # quoted for the shell
        )
        assert (status, charge["chargesWithKey"], charge["amount"]) == (200, 1, 2500), charge


def _assert_a_declined_checkout_is_compensated(base, token, sandbox_port, proc, log):
    """The README tour's checkout for a declined customer: reserved, the charge refused for good,
    the reservation released by its compensation, the request back in DRAFT, no operator."""
    order = {"customer": "cus_declined_bo", "sku": "book-7", "quantity": 2, "amount": 900}
    status, created = _call(
        "POST",
        f"{base}/api/v1/requests",
        token,
        {"flowKey": "checkout", "data": {**order, "currency": "EUR"}},
    )
    assert status == 201, created
    status, execution = _call(
        "POST",
        f"{base}/api/v1/requests/{created['id']}/transitions",
        token,
        {"transitionId": "place", "expectedRevision": 1},
    )
    assert status == 202, execution

    def settled():
        _, view = _call("GET", f"{base}/api/v1/executions/{execution['id']}", token)
        done = ("COMPENSATED", "FAILED", "RECONCILIATION_REQUIRED")
        return view if view and view["status"] in done else None

    view = _until(settled, ORDER_TIMEOUT, "the checkout to settle", proc, log)
    if view["errorCode"] == "RETRIES_EXHAUSTED":  # the sandbox lost all 8 reserve answers
        return
    assert (view["status"], view["errorCode"]) == ("COMPENSATED", "PERMANENT_FAILURE"), view
    _, steps = _call("GET", f"{base}/api/v1/executions/{execution['id']}/actions", token)
    assert [(s["actionId"], s["status"], s["compensates"]) for s in steps["results"]] == [
        ("reserve", "SUCCEEDED", None),
        ("charge", "FAILED", None),
        ("reserve:compensate", "SUCCEEDED", "reserve"),
    ], steps
    sandbox = f"http://127.0.0.1:{sandbox_port}"
    key = f"{execution['id']}%3Areserve%3Acompensate"
    status, release = _call("GET", f"{sandbox}/releases/by-key/{key}")
    assert (status, release["status"]) == (200, "released"), release
    _, request = _call("GET", f"{base}/api/v1/requests/{created['id']}", token)
    assert (request["state"], request["blocked"], request["revision"]) == ("DRAFT", False, 2)
    refused = f"[sandbox] POST /charges key={execution['id']}:charge: refused 402 CARD_DECLINED"
    assert refused in log.read_text()
