"""The demo's webhook receiver (`scripts/start` runs it): it subscribes a tenant's events to itself
on 127.0.0.1 and prints one line per delivery, with its signature checked as a receiver should
(executions/webhooks/signing.py, docs/api.md#webhooks). For a local demo only: the target is
http:// on loopback, which the settings refuse unless WEBHOOK_ALLOW_HTTP and
WEBHOOK_ALLOW_PRIVATE_NETWORKS are on."""

import json
import signal
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from executions.webhooks.models import SUBSCRIBABLE
from executions.webhooks.services import webhook_create, webhook_delete, webhook_list
from executions.webhooks.signing import signature_verify
from orquestador.errors import CodedError

DEFAULT_PORT = 9100
DEFAULT_TENANT = "acme"  # the README tour's tenant
MAX_BODY_BYTES = 1024 * 1024  # bytes of a delivery read at most
IDLE_SECONDS = 10.0  # seconds a connection may stay silent
PREFIX = "[webhook] "  # every line this command prints
DESCRIPTION = "the demo's receiver (manage.py webhookreceiver)"


class Command(BaseCommand):
    help = (
        "Receive this application's webhooks on 127.0.0.1 and print each delivery with its "
        "signature checked, until SIGTERM or Ctrl-C. On start it replaces the tenant's "
        "subscription to this receiver with a new one (a new secret), for every event. A local "
        "demo only: it needs WEBHOOK_ALLOW_HTTP and WEBHOOK_ALLOW_PRIVATE_NETWORKS."
    )
    requires_system_checks = []  # it needs the database only

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--port", type=int, default=DEFAULT_PORT, help="0: any free port")
        parser.add_argument("--tenant", default=DEFAULT_TENANT, help="whose events it receives")
        parser.add_argument(
            "--ready-file", type=Path, default=None, help="written once it listens and subscribed"
        )

    def handle(
        self, *args: Any, port: int, tenant: str, ready_file: Path | None, **options: Any
    ) -> None:
        if not 0 <= port <= 65535:
            raise CommandError(f"--port: must be between 0 and 65535, got {port}")
        try:
            server = ThreadingHTTPServer(("127.0.0.1", port), self._handler())
        except OSError as exc:
            raise CommandError(
                f"--port {port}: cannot listen on 127.0.0.1: {exc.strerror}"
            ) from None
        server.daemon_threads = True
        url = f"http://127.0.0.1:{server.server_address[1]}/"
        try:
            self.secret = self._subscribe(tenant, url)
        except BaseException:
            server.server_close()
            raise
        stop = threading.Event()
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: stop.set())
        serving = threading.Thread(target=server.serve_forever, name="webhook-receiver")
        serving.start()
        self._line(
            f"receiver on {url}, subscribed to tenant {tenant}'s events; it checks each "
            "signature; SIGTERM or Ctrl-C stops it"
        )
        if ready_file is not None:
            ready_file.write_text(url + "\n")
        stop.wait()
        server.shutdown()
        server.server_close()
        serving.join()
        self._line("receiver stopped")

    def _subscribe(self, tenant: str, url: str) -> str:
        """The secret of a new subscription of `tenant` to `url`, the earlier ones to it gone
        (their secrets died with the receiver that held them)."""
        try:
            for earlier in webhook_list(tenant=tenant).filter(url=url):
                webhook_delete(tenant=tenant, webhook_id=str(earlier.id))
            _, secret = webhook_create(
                tenant=tenant, url=url, events=list(SUBSCRIBABLE), description=DESCRIPTION
            )
        except CodedError as exc:
            raise CommandError(
                f"cannot subscribe {url}: {exc.detail}; a local demo sets WEBHOOK_ALLOW_HTTP=true "
                "and WEBHOOK_ALLOW_PRIVATE_NETWORKS=true (never in production)"
            ) from None
        return secret

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        command = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            timeout = IDLE_SECONDS

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                status = command._received(self)
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

        return Handler

    def _received(self, handler: BaseHTTPRequestHandler) -> int:
        """The answer's status for one delivery, once its line is printed."""
        try:
            length = int(handler.headers.get("Content-Length", ""))
        except ValueError:
            length = -1
        if not 0 <= length <= MAX_BODY_BYTES:
            handler.close_connection = True
            self._line(f"refused a POST without a Content-Length up to {MAX_BODY_BYTES} bytes")
            return 411
        body = handler.rfile.read(length)
        header = handler.headers.get("Orquestador-Signature", "")
        verified = signature_verify(header=header, body=body, secret=self.secret)
        try:
            event = json.loads(body)
            data = event.get("data") or {}
            what = f"{event['type']} {event['id']}: execution {data.get('id')} {data.get('status')}"
        except (ValueError, AttributeError, KeyError, TypeError):
            what = f"{length} bytes that are not an event"
        if not verified:
            self._line(f"{what}: signature does NOT verify; answered 401", warning=True)
            return 401
        self._line(f"{what}: signature verified")
        return 204

    def _line(self, text: str, *, warning: bool = False) -> None:
        # Prefixed so it stands out among the worker's JSON lines in the scripts/start terminal.
        style = self.style.WARNING if warning else self.style.HTTP_INFO
        shown = "".join(ch if ch.isprintable() else "?" for ch in text)  # a body's text too
        self.stdout.write(PREFIX + shown, style_func=style)
        self.stdout.flush()
