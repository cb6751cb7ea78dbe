"""A loopback OTLP/HTTP sink for the traces section of bench/worker.py.

    python bench/otlpsink.py

Listens on 127.0.0.1 on a free port and prints it. Answers every `POST /v1/traces` with 200 and
an empty body (what a collector's success is, to the exporter), counting exports and bytes
without decoding them, so the sink's own work stays small and out of the workers' CPU;
`GET /stats` answers `{"exports": N, "bytes": N}`. Runs until SIGTERM.
"""

import json
import signal
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

COUNTS = {"exports": 0, "bytes": 0}
LOCK = threading.Lock()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        with LOCK:
            COUNTS["exports"] += 1
            COUNTS["bytes"] += length
        self._answer(b"", "application/x-protobuf")

    def do_GET(self) -> None:
        with LOCK:
            body = json.dumps(COUNTS).encode()
        self._answer(body, "application/json")

    def _answer(self, body: bytes, content_type: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


def main() -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    print(server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
