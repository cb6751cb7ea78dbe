"""Slow clients cannot stall the API: gunicorn as scripts/start runs it (2 processes x 4 threads)
behind nginx from the one template (deploy/proxy). 50 clients trickling a request's head a line
at a time and 50 trickling a body a byte at a time, and meanwhile ordinary calls are answered
about as fast as without them. The same clients against gunicorn alone take every thread it has:
ordinary calls get no answer at all, which is what the proxy is for. The latencies are printed.
"""

import contextlib
import http.client
import os
import socket
import statistics
import threading
import time
from collections.abc import Iterator

import pytest
from django.conf import settings

from tests.conftest import _dsn, runtime_settings
from tests.support import tokens
from tests.support.web import proxied_gunicorn
from tests.support.worker import wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.process]

SLOW_HEADS = 50
SLOW_BODIES = 50
TRICKLE_SECONDS = 2.0  # between two pieces of a slow client; under nginx's 10 s read timeouts
CALLS = 50  # ordinary calls measured, without and with the slow clients
CALL_SPACING = 0.08  # seconds between two: the calls span two trickles, within nginx's timeouts
CALL_TIMEOUT = 3.0  # seconds an ordinary call may take before it counts as unanswered
STALL_CALLS = 2  # ordinary calls against gunicorn alone, each expected to go unanswered
AUTH = {"Authorization": f"Bearer {tokens.token(exp_in=3600)}"}


@pytest.fixture(scope="module")
def stack(django_db_setup, tmp_path_factory) -> Iterator[tuple[int, int]]:
    """(nginx's port, gunicorn's port)."""
    env = {  # as tests/conftest.py's process_env, once for the module
        **os.environ,
        "DATABASE_URL": _dsn(runtime_settings()),
        "MIGRATION_DATABASE_URL": _dsn(settings.DATABASES["default"]),
        "DJANGO_SETTINGS_MODULE": "orquestador.settings",
        "PYTHONUNBUFFERED": "1",
        "WEB_WORKERS": "2",  # scripts/start's and the compose file's
        "WEB_THREADS": "4",
    }
    with proxied_gunicorn(env, tmp_path_factory.mktemp("slow")) as (proxy, direct):
        yield int(proxy.rsplit(":", 1)[1]), int(direct.rsplit(":", 1)[1])


def call(port: int) -> float:
    """One ordinary call, on its own connection, as a client would make it; its seconds."""
    started = time.monotonic()
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=CALL_TIMEOUT)
    try:
        connection.request("GET", "/api/v1/requests", headers=AUTH)
        response = connection.getresponse()
        assert response.status == 200, response.read()[:300]
        response.read()
    finally:
        connection.close()
    return time.monotonic() - started


def latencies(port: int) -> list[float]:
    samples = []
    for _ in range(CALLS):
        samples.append(call(port))
        time.sleep(CALL_SPACING)  # a pace, not a wait for anything
    return samples


def p50_p99(samples: list[float]) -> tuple[float, float]:
    cuts = statistics.quantiles(samples, n=100, method="inclusive")
    return cuts[49], cuts[98]


class SlowClients:
    """SLOW_HEADS clients sending a head a line every TRICKLE_SECONDS, SLOW_BODIES sending a
    declared body a byte every TRICKLE_SECONDS; none ever finishes."""

    def __init__(self, port: int) -> None:
        self.socks: list[socket.socket] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._trickle, daemon=True)
        self.port = port

    def __enter__(self) -> "SlowClients":
        for i in range(SLOW_HEADS + SLOW_BODIES):
            sock = socket.create_connection(("127.0.0.1", self.port), timeout=5)
            if i < SLOW_HEADS:
                sock.sendall(b"GET /api/v1/requests HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            else:
                sock.sendall(
                    b"POST /api/v1/requests HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                    b"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"
                )
            self.socks.append(sock)
        self._thread.start()
        return self

    def _trickle(self) -> None:
        line = 0
        while not self._stop.wait(TRICKLE_SECONDS):
            line += 1
            for i, sock in enumerate(self.socks):
                piece = b"X-Slow-%d: x\r\n" % line if i < SLOW_HEADS else b" "
                with contextlib.suppress(OSError):  # closed by the server: closed() counts it
                    sock.sendall(piece)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=TRICKLE_SECONDS * 2)

    def closed(self) -> int:
        """How many the server has closed or reset (the trickle stopped first)."""
        self.stop()
        count = 0
        for sock in self.socks:
            sock.setblocking(False)
            try:
                if sock.recv(1, socket.MSG_PEEK) == b"":
                    count += 1
            except BlockingIOError:
                pass  # open, nothing sent back: still held
            except OSError:
                count += 1
        return count

    def __exit__(self, *exc: object) -> None:
        self.stop()
        for sock in self.socks:
            sock.close()


def test_slow_clients__do_not_stall_calls_through_nginx(stack, capsys):
    proxy, _ = stack
    call(proxy)  # the first call of each process pays for its connection to PostgreSQL
    quiet = latencies(proxy)
    with SlowClients(proxy) as slow:
        loaded = latencies(proxy)
        held = SLOW_HEADS + SLOW_BODIES - slow.closed()
    (quiet_p50, quiet_p99), (loaded_p50, loaded_p99) = p50_p99(quiet), p50_p99(loaded)
    with capsys.disabled():
        print(
            f"\nordinary calls through nginx, {CALLS} each: alone p50 {quiet_p50 * 1000:.1f} ms, "
            f"p99 {quiet_p99 * 1000:.1f} ms; beside {SLOW_HEADS} slow heads and {SLOW_BODIES} "
            f"slow bodies p50 {loaded_p50 * 1000:.1f} ms, p99 {loaded_p99 * 1000:.1f} ms"
        )
    assert held == SLOW_HEADS + SLOW_BODIES, "the slow clients were not all there throughout"
    # Close to their usual time: the noise of a shared machine, not a queue behind the slow ones
    # (a stalled call takes CALL_TIMEOUT and fails above).
    bound = max(0.5, 5 * quiet_p99)
    assert max(loaded) < bound, (sorted(loaded)[-5:], bound)
    assert loaded_p50 < max(0.1, 3 * quiet_p50), (loaded_p50, quiet_p50)


def test_slow_clients__stall_gunicorn_alone(stack, capsys):
    """What the proxy is for: the same clients take every thread gunicorn has."""
    _, direct = stack
    call(direct)
    with SlowClients(direct):
        stalled = 0
        for _ in range(STALL_CALLS):
            try:
                call(direct)
            except TimeoutError:
                stalled += 1
    with capsys.disabled():
        print(
            f"\nordinary calls to gunicorn alone beside them: {stalled} of {STALL_CALLS} "
            f"unanswered within {CALL_TIMEOUT} s"
        )
    assert stalled == STALL_CALLS
    # Once they are gone gunicorn answers again (the module's other test uses it through nginx).
    wait_until(lambda: _answers(direct), timeout=30, what="gunicorn to answer again")


def _answers(port: int) -> bool:
    try:
        call(port)
    except (OSError, AssertionError):
        return False
    return True
