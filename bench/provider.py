"""The slow provider of bench/worker.py: a loopback JSON server that answers after a delay.

    python bench/provider.py DELAY_SECONDS

Listens on 127.0.0.1 on a free port and prints it. Every POST gets `{"ok": true}` after
DELAY_SECONDS; one thread per connection (HTTP/1.1 keep-alive), TCP_NODELAY on, a deep accept
backlog, so the server itself never limits a client's concurrency. Runs until SIGTERM.
"""

import json
import signal
import socket
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

BODY = json.dumps({"ok": True}).encode()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    delay = 0.1

    def setup(self) -> None:
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        time.sleep(self.delay)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(BODY)))
        self.end_headers()
        self.wfile.write(BODY)

    def log_message(self, format: str, *args: object) -> None:
        return


class Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024


def main(argv: list[str]) -> int:
    Handler.delay = float(argv[1])
    server = Server(("127.0.0.1", 0), Handler)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    print(server.server_address[1], flush=True)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
