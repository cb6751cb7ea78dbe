"""The API's benchmark (bench/worker.py's `api` section): each hot endpoint beside the web ceiling.

One gunicorn, started as `scripts/start` starts it (orquestador/gunicorn.py, its worker class,
worker and thread counts; --web-workers overrides WEB_WORKERS only when given), with the settings
of bench/websettings.py: production's plus `GET /api/bench/ceiling`, the API's own view class
(bearer JWT, permission check, JSON) reading no database. At each client count (1, 8, 32 by
default; bench/apiclients.py, real HS256 tokens, keep-alive sessions):

- ceiling: GET /api/bench/ceiling;
- transitions: POST /api/v1/requests/{id}/transitions, each on a fresh DRAFT request;
- executions: GET /api/v1/executions/{id}, ids drawn at random from the accepted executions;
- execution pages / request pages: GET /api/v1/executions?limit=50 and /api/v1/requests?limit=50
  and the pages after them by their cursors (the first ten pages, cycled);

each as requests/s, p50 and p99, and each as a ratio of the ceiling measured at the same client
count in the same run, just before it; and the CPU each call cost the web server (gunicorn's
processes), PostgreSQL (the whole server) and the clients, which moves far less with the machine's
load than the rates do. Everything is warmed up first (each gunicorn process and thread has
imported and connected before the first timed call).
"""

import json
import os
import resource
import secrets
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from contextlib import ExitStack
from pathlib import Path
from typing import Any

READY_TIMEOUT = 60  # seconds for gunicorn to answer /healthz
PAGE = 50  # items per list page
PAGES = 10  # list pages cycled through, first to tenth
WARM_UP_CALLS = 200  # untimed calls of each GET kind before the first timed one
KINDS = ("ceiling", "transitions", "executions", "execution_pages", "request_pages")
CEILING_PATH = "/api/bench/ceiling"
INSERT_REQUESTS = (
    "INSERT INTO request (id, flow_id, owner, scope, data, state) "
    "SELECT gen_random_uuid(), %s, 'bench-api', 'bench', '{}', 'DRAFT' "
    "FROM generate_series(1, %s) RETURNING id"
)
RANDOM_EXECUTIONS = (
    "SELECT e.id FROM execution e JOIN request r ON r.id = e.request_id "
    "WHERE r.owner = 'bench-api' ORDER BY random() LIMIT %s"
)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def tree_cpu_seconds(root: int) -> float:
    """CPU (user and system) of process `root` and its live children, from /proc."""
    total = 0.0
    ticks = os.sysconf("SC_CLK_TCK")
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # ended meanwhile
            continue
        if int(entry.name) == root or int(fields[1]) == root:
            total += (int(fields[11]) + int(fields[12])) / ticks
    return total


def children_cpu_seconds() -> float:
    """CPU of this process's reaped children (the clients' runs)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def token(secret: str, issuer: str, audience: str) -> str:
    import jwt  # the API's own dependency

    now = int(time.time())
    claims = {
        "sub": "bench-api",
        "tenant": "bench",
        "scope": "requests:write requests:read",
        "iss": issuer,
        "aud": audience,
        "iat": now,
        "exp": now + 3600,
    }
    return jwt.encode(claims, secret, algorithm="HS256")


def serve(
    python: str, env: dict[str, str], root: Path, log_path: Path, stack: ExitStack
) -> tuple[str, subprocess.Popen]:
    """gunicorn with the production configuration and bench/websettings.py; its base URL."""
    port = free_port()
    log = stack.enter_context(open(log_path, "wb"))
    server = subprocess.Popen(
        [
            str(Path(python).parent / "gunicorn"),
            "-c",
            "python:orquestador.gunicorn",  # the production configuration
            "orquestador.wsgi:application",
        ],
        cwd=root,
        env={**env, "WEB_BIND": f"127.0.0.1:{port}", "DJANGO_SETTINGS_MODULE": "bench.websettings"},
        stdout=log,
        stderr=subprocess.STDOUT,
    )

    def stop() -> None:
        server.terminate()  # our own child, by its pid
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()

    stack.callback(stop)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + READY_TIMEOUT
    while True:
        try:
            with urllib.request.urlopen(f"{base}/healthz", timeout=1):  # noqa: S310
                return base, server
        except OSError:
            if time.monotonic() > deadline or server.poll() is not None:
                raise RuntimeError(f"gunicorn did not start; see {log_path}") from None
            time.sleep(0.1)  # polling the port, with a deadline


def _get_json(url: str, bearer: str) -> Any:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {bearer}"})  # noqa: S310
    with urllib.request.urlopen(request, timeout=30) as answer:  # noqa: S310
        return json.load(answer)


def page_paths(base: str, bearer: str, list_name: str) -> list[str]:
    """The paths of the first PAGES pages of a list (as far as it goes)."""
    path = f"/api/v1/{list_name}?limit={PAGE}"
    paths = []
    while path and len(paths) < PAGES:
        paths.append(path)
        cursor = _get_json(base + path, bearer)["next"]
        path = (
            f"/api/v1/{list_name}?limit={PAGE}&cursor={urllib.parse.quote(cursor)}"
            if cursor
            else ""
        )
    return paths


def clients_run(
    python: str,
    root: Path,
    base: str,
    bearer: str,
    kind: str,
    lines: list[str],
    ids_file: Path,
    count: int,
) -> dict:
    ids_file.write_text("\n".join(lines))
    run = subprocess.run(
        [
            python,
            str(root / "bench" / "apiclients.py"),
            base,
            bearer,
            kind,
            str(ids_file),
            str(count),
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(run.stdout)


def run(
    bench: Any, *, python: str, root: Path, clients: list[int], calls: int, web_workers: int | None
) -> dict:
    """The section: the report's `api` entry."""
    secret = secrets.token_urlsafe(48)
    issuer, audience = "orquestador", "orquestador-api"
    env = {
        **bench.env,
        "REQUEST_API_ENABLED": "true",
        "JWT_SECRET": secret,
        "JWT_ISSUER": issuer,
        "JWT_AUDIENCE": audience,
    }
    if web_workers is not None:
        env["WEB_WORKERS"] = str(web_workers)
    bearer = token(secret, issuer, audience)
    report: dict = {"server": "gunicorn", "web_workers": web_workers or "default"}
    report.update({kind: [] for kind in KINDS})
    with ExitStack() as stack:
        base, server = serve(python, env, root, bench.base / "gunicorn-api.log", stack)
        owner = bench.owner

        def fresh_requests(n: int) -> list[str]:
            return [str(row[0]) for row in owner.execute(INSERT_REQUESTS, [bench.flow_id, n])]

        def measure(kind: str, count: int, n: int = calls) -> dict:
            if kind == "transitions":
                client_kind, lines = "transitions", fresh_requests(n)
            elif kind == "executions":
                rows = owner.execute(RANDOM_EXECUTIONS, [n]).fetchall()
                client_kind = "get"
                lines = [f"/api/v1/executions/{row[0]}" for row in rows]
            elif kind == "ceiling":
                client_kind, lines = "get", [CEILING_PATH] * n
            else:
                list_name = "executions" if kind == "execution_pages" else "requests"
                paths = page_paths(base, bearer, list_name)
                client_kind, lines = "get", [paths[i % len(paths)] for i in range(n)]
            ids_file = bench.base / f"api-{kind}-{count}.lines"
            before = (
                tree_cpu_seconds(server.pid),
                bench._server_cpu_seconds(),
                children_cpu_seconds(),
            )
            result = clients_run(python, root, base, bearer, client_kind, lines, ids_file, count)
            web, postgres, clients = (
                tree_cpu_seconds(server.pid) - before[0],
                bench._server_cpu_seconds() - before[1],
                children_cpu_seconds() - before[2],
            )
            done = result["calls"]
            result["cpu_ms_per_call"] = {
                "web": round(web / done * 1000, 3),
                "postgres": round(postgres / done * 1000, 3),
                "clients": round(clients / done * 1000, 3),
            }
            return result

        # Warm-up: requests and executions for the reads and pages, and every process and
        # thread of the server past its first call (imports, connection), none of it timed.
        warm = max(clients)
        clients_run(
            python,
            root,
            base,
            bearer,
            "transitions",
            fresh_requests(calls),
            bench.base / "api-warm.lines",
            warm,
        )
        for kind in ("ceiling", "executions", "execution_pages", "request_pages"):
            measure(kind, warm, min(calls, WARM_UP_CALLS))
        for count in clients:
            ceiling = None
            for kind in KINDS:
                result = measure(kind, count)
                if kind == "ceiling":
                    ceiling = result["requests_per_second"]
                else:
                    result["of_ceiling"] = round(result["requests_per_second"] / ceiling, 2)
                report[kind].append(result)
                cpu = result["cpu_ms_per_call"]
                print(
                    f"  {kind} at {count} clients: {result['requests_per_second']} req/s"
                    + (f" ({result['of_ceiling']}x ceiling)" if kind != "ceiling" else "")
                    + f", p50 {result['p50_ms']} ms, p99 {result['p99_ms']} ms, "
                    f"CPU/call web {cpu['web']} + PostgreSQL {cpu['postgres']} ms "
                    f"(clients {cpu['clients']} ms), statuses {result['statuses']}",
                    flush=True,
                )
    return report


def summary_lines(report: dict) -> list[str]:
    if "api" not in report:
        return []
    lines = []
    for kind in KINDS:
        runs = report["api"].get(kind)
        if not runs:
            continue
        lines.append(
            f"  API {kind}: "
            + "; ".join(
                f"{r['clients']} clients {r['requests_per_second']} req/s"
                + (f" ({r['of_ceiling']}x)" if "of_ceiling" in r else "")
                + f" p50 {r['p50_ms']} p99 {r['p99_ms']} ms"
                + (
                    f" CPU/call {r['cpu_ms_per_call']['web']} + {r['cpu_ms_per_call']['postgres']}"
                    " ms"
                    if "cpu_ms_per_call" in r
                    else ""
                )
                for r in runs
            )
        )
    return lines
