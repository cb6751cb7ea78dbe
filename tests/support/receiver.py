"""A webhook receiver on 127.0.0.1 (plain HTTP: tests turn WEBHOOK_ALLOW_HTTP and
WEBHOOK_ALLOW_PRIVATE_NETWORKS on), recording every delivery it gets and answering from a script,
and the delivery loop run on a loop of its own with a small pool on the runtime role."""

import asyncio
import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from psycopg_pool import AsyncConnectionPool

from executions.webhooks.config import WebhookConfig
from executions.webhooks.delivery import WebhookDeliverer

# Fast enough for tests; every rule as in production but the two switches.
TEST_CONFIG = WebhookConfig(
    allow_http=True,
    allow_private_networks=True,
    timeout_seconds=2.0,
    max_age_seconds=3600.0,
    secret_overlap_seconds=3600.0,
    retry_base_seconds=0.05,
)


@dataclass(frozen=True)
class Delivered:
    path: str
    headers: dict[str, str]
    raw: bytes

    @property
    def body(self) -> dict[str, Any]:
        return json.loads(self.raw)


class Receiver:
    """Records deliveries; `answer(delivery) -> status` decides each reply (default 200), and
    `reply` its body (by default a short JSON for a 2xx, 2,000 characters otherwise)."""

    def __init__(
        self,
        answer: Callable[[Delivered], int] | None = None,
        *,
        delay: float = 0.0,
        reply: bytes | None = None,
    ) -> None:
        self.answer = answer or (lambda _: 200)
        self.delay = delay  # seconds each answer takes: a slow receiver, deliveries in flight
        self.reply = reply
        self.answered: list[float] = []  # monotonic time of each answer, once sent
        self.received: list[Delivered] = []
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # http.server's name
                length = int(self.headers.get("Content-Length", "0"))
                got = Delivered(self.path, dict(self.headers.items()), self.rfile.read(length))
                with receiver._lock:
                    receiver.received.append(got)
                status = receiver.answer(got)
                if receiver.delay:
                    time.sleep(receiver.delay)  # the receiver's own work, not a test's wait
                reply = receiver.reply
                if reply is None:
                    reply = b'{"ok": true}' if status < 300 else b"nope " * 400
                self.send_response(status)
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)
                with receiver._lock:
                    receiver.answered.append(time.monotonic())

            def log_message(self, *args: Any) -> None:
                pass

        class Server(ThreadingHTTPServer):
            request_queue_size = 128  # a burst of new connections waits in no SYN retry

            def handle_error(self, request: Any, client_address: Any) -> None:
                pass  # a sender that died mid-request (a killed worker): nothing to report

        self.server = Server(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def bodies(self) -> list[dict[str, Any]]:
        with self._lock:
            return [d.body for d in self.received]

    def __enter__(self) -> "Receiver":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


@contextlib.contextmanager
def delivering(
    dsn: str, config: WebhookConfig = TEST_CONFIG, **kwargs: Any
) -> Iterator[WebhookDeliverer]:
    """The delivery loop running on a loop in a thread, on two pooled runtime-role
    connections, until the block ends."""
    box: dict[str, Any] = {}
    started = threading.Event()

    async def main() -> None:
        async with AsyncConnectionPool(
            dsn, min_size=1, max_size=2, kwargs={"autocommit": True}, open=False
        ) as pool:
            deliverer = WebhookDeliverer(
                borrow=lambda: pool.connection(timeout=5.0), config=config, **kwargs
            )
            box["deliverer"] = deliverer
            box["loop"] = asyncio.get_running_loop()
            started.set()
            await deliverer.run()

    def target() -> None:
        try:
            asyncio.run(main())
        except BaseException as exc:  # surfaced to the test below
            box["error"] = exc
            started.set()

    thread = threading.Thread(target=target, daemon=True, name="webhook-delivery")
    thread.start()
    assert started.wait(10), "the delivery loop did not start"
    if "error" in box:
        raise box["error"]
    try:
        yield box["deliverer"]
    finally:
        if "deliverer" in box:
            box["deliverer"].stop()
        thread.join(15)
        if "error" in box:
            raise box["error"]


def poke(deliverer: WebhookDeliverer) -> None:
    """Wake the loop from the test's thread, as the scheduler does on the loop's."""
    loop = getattr(deliverer, "_loop", None)
    if loop is not None:
        loop.call_soon_threadsafe(deliverer.poke)
