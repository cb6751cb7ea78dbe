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

The `api-keys` section (`keys_run`): the ceiling's web CPU per call under each kind of key, a
static one (HS256 secret, RS256 and ES256 PEM) or the identity provider's (RS256, ES256 from a
JWKS endpoint on 127.0.0.1): with one token throughout (remembered after its first verification,
orquestador/tokencache.py) and with a new token on every call (each verified in full).
"""

import json
import os
import resource
import secrets
import socket
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from contextlib import ExitStack
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
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


# The api-keys section's configurations: (name, algorithm, from the provider's JWKS).
KEY_CONFIGS = (
    ("HS256 secret", "HS256", False),
    ("RS256 PEM", "RS256", False),
    ("ES256 PEM", "ES256", False),
    ("RS256 JWKS", "RS256", True),
    ("ES256 JWKS", "ES256", True),
)


def _private_key(algorithm: str) -> Any:
    from cryptography.hazmat.primitives.asymmetric import ec, rsa

    if algorithm == "RS256":
        return rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return ec.generate_private_key(ec.SECP256R1())


def _public(key: Any) -> tuple[str, dict]:
    """The PEM and the JWK of a private key's public half."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from jwt.algorithms import ECAlgorithm, RSAAlgorithm

    public = key.public_key()
    pem = public.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    ).decode()
    jwk_of = RSAAlgorithm if isinstance(public, rsa.RSAPublicKey) else ECAlgorithm
    return pem, jwk_of.to_jwk(public, as_dict=True)


class JwksEndpoint:
    """A JWKS document on 127.0.0.1, answered from a thread of the benchmark; counts its GETs."""

    def __init__(self, keys: list[dict]) -> None:
        document = json.dumps({"keys": keys}).encode()
        endpoint = self
        self.fetches = 0

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # http.server's name
                endpoint.fetches += 1
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(document)))
                self.end_headers()
                self.wfile.write(document)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/jwks.json"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def keys_run(bench: Any, *, python: str, root: Path, clients: int, calls: int) -> dict:
    """The `api-keys` section: the report's `api_keys` entry, one row per key configuration."""
    import jwt  # the API's own dependency

    issuer, audience = "orquestador", "orquestador-api"
    secret = secrets.token_urlsafe(48)
    keys = {algorithm: _private_key(algorithm) for algorithm in ("RS256", "ES256")}
    jwks = [{**_public(key)[1], "kid": f"bench-{alg}", "use": "sig"} for alg, key in keys.items()]
    report: dict = {"clients": clients, "calls": calls, "configurations": []}
    with ExitStack() as stack:
        endpoint = JwksEndpoint(jwks)
        stack.callback(endpoint.close)
        for name, algorithm, from_jwks in KEY_CONFIGS:
            env = {
                **bench.env,
                "REQUEST_API_ENABLED": "true",
                "JWT_ISSUER": issuer,
                "JWT_AUDIENCE": audience,
                "JWT_SECRET": secret if algorithm == "HS256" else "",
                "JWT_PUBLIC_KEY": "",
                "JWT_JWKS_URL": endpoint.url if from_jwks else "",
            }
            if algorithm != "HS256" and not from_jwks:
                env["JWT_PUBLIC_KEY"] = _public(keys[algorithm])[0]
            signing_key = secret if algorithm == "HS256" else keys[algorithm]
            headers = {"kid": f"bench-{algorithm}"} if from_jwks else None

            def mint(
                sub: str,
                signing_key: Any = signing_key,
                algorithm: str = algorithm,
                headers: Any = headers,
            ) -> str:
                now = int(time.time())
                claims = {
                    "sub": sub,
                    "tenant": "bench",
                    "scope": "requests:read",
                    "iss": issuer,
                    "aud": audience,
                    "iat": now,
                    "exp": now + 3600,
                }
                return jwt.encode(claims, signing_key, algorithm=algorithm, headers=headers)

            one = mint("bench-api")
            fresh = [mint(f"bench-{n}") for n in range(calls)]
            with ExitStack() as server_stack:
                slug = name.lower().replace(" ", "-")
                base, server = serve(
                    python, env, root, bench.base / f"gunicorn-keys-{slug}.log", server_stack
                )
                lines_file = bench.base / f"api-keys-{slug}.lines"
                # Warm-up: every process and thread past its first call (and its keys fetched).
                warm = [mint(f"warm-{n}") for n in range(WARM_UP_CALLS)]
                clients_run(python, root, base, one, "bearers", warm, lines_file, clients)
                row: dict = {"keys": name}
                for label, kind, lines in (
                    ("one token", "get", [CEILING_PATH] * calls),
                    ("a new token each call", "bearers", fresh),
                ):
                    before = tree_cpu_seconds(server.pid)
                    result = clients_run(python, root, base, one, kind, lines, lines_file, clients)
                    web = tree_cpu_seconds(server.pid) - before
                    row[label] = {
                        "web_cpu_ms_per_call": round(web / result["calls"] * 1000, 3),
                        "requests_per_second": result["requests_per_second"],
                        "p50_ms": result["p50_ms"],
                        "statuses": result["statuses"],
                    }
                row["jwks_fetches"] = endpoint.fetches if from_jwks else None
                endpoint.fetches = 0
            report["configurations"].append(row)
            print(
                f"  {name}: web CPU/call one token {row['one token']['web_cpu_ms_per_call']} ms,"
                f" a new token each call {row['a new token each call']['web_cpu_ms_per_call']} ms"
                f" (statuses {row['one token']['statuses']}, "
                f"{row['a new token each call']['statuses']})"
                + (f", {row['jwks_fetches']} JWKS fetches" if from_jwks else ""),
                flush=True,
            )
    return report


def keys_summary_lines(report: dict) -> list[str]:
    if "api_keys" not in report:
        return []
    return [
        f"  API keys {row['keys']}: web CPU/call {row['one token']['web_cpu_ms_per_call']} ms "
        f"(one token), {row['a new token each call']['web_cpu_ms_per_call']} ms (a new token "
        "each call)"
        for row in report["api_keys"]["configurations"]
    ]


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
