"""A real web process on a free loopback port: `manage.py runserver` (no reloader), or gunicorn
with the production configuration, as scripts/start runs it, alone or behind nginx as
scripts/start puts it (deploy/proxy: the one template)."""

import contextlib
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import requests

from tests.conftest import ROOT, manage
from tests.support import tokens
from tests.support.worker import wait_until

START_DEADLINE = 60.0  # seconds for the process to answer /healthz
HTTP_TIMEOUT = 5.0  # seconds per call while waiting for it


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def web_process(env: dict[str, str], log_path: Path, **overrides: str) -> Iterator[str]:
    """A web process with the request API on (tokens.SECRET signs its JWTs); yields its base
    URL once it answers /healthz. Only this process is ever signalled, by its pid."""
    port = free_port()
    command = manage("runserver", f"127.0.0.1:{port}", "--noreload", "--skip-checks")
    with _serving(command, port, env, log_path, overrides) as base:
        yield base


@contextlib.contextmanager
def gunicorn_process(env: dict[str, str], log_path: Path, **overrides: str) -> Iterator[str]:
    """gunicorn with orquestador/gunicorn.py, otherwise as web_process."""
    port = free_port()
    gunicorn = str(Path(sys.executable).parent / "gunicorn")
    command = [gunicorn, "-c", "python:orquestador.gunicorn", "orquestador.wsgi:application"]
    overrides = {"WEB_BIND": f"127.0.0.1:{port}", **overrides}
    with _serving(command, port, env, log_path, overrides) as base:
        yield base


@contextlib.contextmanager
def proxy_process(upstream: str, run_dir: Path, log_path: Path) -> Iterator[str]:
    """nginx from deploy/proxy in front of `upstream` (a base URL); yields its own base URL once
    it answers /healthz."""
    port = free_port()
    command = [
        str(ROOT / "deploy" / "proxy"),
        f"127.0.0.1:{port}",
        upstream.removeprefix("http://"),
        str(run_dir),
    ]
    with _serving(command, port, {"PATH": "/usr/sbin:/usr/bin:/bin"}, log_path, {}) as base:
        yield base


@contextlib.contextmanager
def proxied_gunicorn(
    env: dict[str, str], run_dir: Path, **overrides: str
) -> Iterator[tuple[str, str]]:
    """gunicorn_process behind proxy_process, their logs in `run_dir`; yields (the proxy's base
    URL, gunicorn's)."""
    with gunicorn_process(env, run_dir / "gunicorn.log", **overrides) as direct:
        with proxy_process(direct, run_dir / "proxy", run_dir / "proxy.log") as base:
            yield base, direct


@contextlib.contextmanager
def _serving(
    command: list[str], port: int, env: dict[str, str], log_path: Path, overrides: dict[str, str]
) -> Iterator[str]:
    base = f"http://127.0.0.1:{port}"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            command,
            env={
                **env,
                "REQUEST_API_ENABLED": "true",
                "JWT_SECRET": tokens.SECRET,
                "DEBUG": "false",
                **overrides,
            },
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:

            def answers() -> bool:
                assert process.poll() is None, log_path.read_text()
                with contextlib.suppress(requests.RequestException):
                    return requests.get(f"{base}/healthz", timeout=HTTP_TIMEOUT).ok
                return False

            wait_until(answers, timeout=START_DEADLINE, what="the web process to answer /healthz")
            yield base
        finally:
            process.terminate()
            process.wait(timeout=30)
