"""gunicorn's configuration for the web role, shared by `scripts/start` and the image.

    gunicorn -c python:orquestador.gunicorn orquestador.wsgi:application

WEB_BIND (default 127.0.0.1:8000), WEB_WORKERS (default 2), WEB_THREADS (default 4) and
WEB_CONTROL_SOCKET (default: none) from the environment; request lines and headers are bounded so
a caller cannot make the server buffer without limit, and what gunicorn refuses itself is
answered in the API's format by the project's worker classes (orquestador/gunicornworker.py:
JSON 431 HEADERS_TOO_LARGE under /api/ for a head over them).
"""

import os

bind = [os.environ.get("WEB_BIND", "127.0.0.1:8000")]
workers = int(os.environ.get("WEB_WORKERS", "2"))  # processes; one per core is a fair start
# Threads per process: while one request waits on PostgreSQL, another runs. Above 1, gunicorn's
# threaded worker (which also keeps connections alive); 1, its sync worker. Each with the
# project's JSON refusals. Every thread holds its own database connection.
threads = int(os.environ.get("WEB_THREADS", "4"))
worker_class = (
    "orquestador.gunicornworker.ThreadWorker"
    if threads > 1
    else "orquestador.gunicornworker.SyncWorker"
)
timeout = 30  # seconds a worker may spend on one request before it is replaced
if os.environ.get("WORKER_ENDPOINT_ENABLED", "").strip().lower() in ("true", "1", "yes", "on"):
    # A worker endpoint holds a web thread up to WORKER_ENDPOINT_RUN_SECONDS per package, then
    # answers by itself (executions/worker/endpoint.py): leave it that long and a margin. A value
    # settings refuse keeps the default here; the application then refuses to start.
    try:
        run_seconds = float(os.environ.get("WORKER_ENDPOINT_RUN_SECONDS", "300"))
    except ValueError:
        run_seconds = 0.0
    if 0 < run_seconds <= 3600:
        timeout = max(timeout, int(run_seconds) + 15)
graceful_timeout = 10  # seconds in-flight requests may finish after SIGTERM
keepalive = 5  # seconds an idle keep-alive connection is held
# docs/api.md#limits. gunicorn takes no request line over 8190 bytes but 0, which is unbounded.
limit_request_line = 8190  # bytes of the request line
limit_request_fields = 100  # header fields
limit_request_field_size = 8190  # bytes of one header line (name, colon, value, CRLF)
# gunicorn 25.1+ opens a control socket for `gunicornc`, by default one path per user
# (~/.gunicorn/gunicorn.ctl): two copies of the app on one machine would take each other's. Only
# where WEB_CONTROL_SOCKET names one (scripts/start: its own run/ directory); older gunicorns
# ignore both settings.
control_socket = os.environ.get("WEB_CONTROL_SOCKET", "")
control_socket_disable = not control_socket
accesslog = None  # Django logs what matters as JSON; set --access-logfile - to see every call
errorlog = "-"
capture_output = False
