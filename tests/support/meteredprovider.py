"""A loopback JSON provider that records when each call starts and ends, for the route limit
tests and the benchmark's `limits` section: the most calls it saw at once, the most starts in
any sliding window, and optionally a 429 with Retry-After for the first calls."""

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import psycopg


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 1024

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass


class MeteredProvider:
    """POST anything: answers `{}` after `delay` seconds; `refuse_first` calls get 429 with
    `Retry-After: retry_after` instead. Only 127.0.0.1, a free port, daemon threads."""

    def __init__(self, *, delay: float = 0.05, refuse_first: int = 0, retry_after: int = 2):
        self.delay = delay
        self.refuse_first = refuse_first
        self.retry_after = retry_after
        self.lock = threading.Lock()
        self.calls: list[tuple[float, float, int]] = []  # (start, end, status), monotonic
        # (start on the wall clock, the call's Idempotency-Key), to match each call with the
        # limiter's grant (route_call.started_at, the database's clock: the same host's).
        self.arrivals: list[tuple[float, str]] = []
        self.current = 0
        self.most = 0  # calls in progress at once, at most
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # The headers and the body are two writes: with Nagle's algorithm the body waits
            # for the client's delayed ACK of the headers (up to 40 ms on a reused connection),
            # which made a 50 ms provider answer in about 90.
            disable_nagle_algorithm = True

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                owner._serve(self)

        self.server = _Server(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def url(self, path: str = "/calls") -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}{path}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> "MeteredProvider":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _serve(self, handler: BaseHTTPRequestHandler) -> None:
        length = int(handler.headers.get("Content-Length") or 0)
        handler.rfile.read(length)
        started, wall = time.monotonic(), time.time()
        with self.lock:
            self.current += 1
            self.most = max(self.most, self.current)
            refused = len(self.calls) < self.refuse_first
            self.calls.append((started, 0.0, 0))
            self.arrivals.append((wall, handler.headers.get("Idempotency-Key") or ""))
            index = len(self.calls) - 1
        status = 429 if refused else 200
        if not refused:
            time.sleep(self.delay)
        body = b"{}" if not refused else json.dumps({"error": "slow down"}).encode()
        ended = time.monotonic()
        with self.lock:
            self.current -= 1
            self.calls[index] = (started, ended, status)
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(body)))
        if refused:
            handler.send_header("Retry-After", str(self.retry_after))
        handler.end_headers()
        handler.wfile.write(body)

    def answered(self) -> list[tuple[float, float, int]]:
        with self.lock:
            return list(self.calls)

    def most_started_within(self, seconds: float, *, status: int | None = 200) -> int:
        """The most calls (of `status`; None: any) that started in any window of `seconds`."""
        starts = sorted(s for s, _, code in self.answered() if status is None or code == status)
        most, first = 0, 0
        for last, at in enumerate(starts):
            while at - starts[first] >= seconds:
                first += 1
            most = max(most, last - first + 1)
        return most


def route_tables_clear(dsn: str) -> None:
    """Empty the route limiter's tables (raw tables, which the test database's flush between
    tests does not know), as the schema owner: route_event is append-only for the runtime."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("TRUNCATE route_call, route_park, route_limit, route_event")
