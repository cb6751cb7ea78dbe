"""Where one API call's time goes: the WSGI application called in this process, no server and no
socket, on a throwaway cluster like bench/run's.

    .venv/bin/python bench/apiprofile.py [--calls 2000] [--profile transitions] [--top 25]
    .venv/bin/python bench/apiprofile.py --callgrind [--calls 100]

For each kind (ceiling, transitions, executions, execution_pages, request_pages; as bench/api.py
names them and makes them: a page is one of a list's first ten of 50, by their cursors, cycled)
it times N calls one after another and reports the mean per call, split into the time spent in
each statement (client-side, round trip included: Django's execute wrapper) and the rest
(Python: middleware, DRF, authentication, parsing, rendering), with the CPU this process and its
PostgreSQL backend spent (/proc, a tick of 10 ms: use a few hundred calls). With --profile KIND,
the same calls again under cProfile timed by this process's CPU (not the waits), the top
functions by cumulative time.

With --callgrind, the process runs under valgrind's callgrind instead, and for each kind the
instructions this process executes per call are counted: a figure that does not move with the
machine's load, as times do. Only the calls are counted (not the start, the warm-up or the
setting up of each kind): each kind's calls run inside one `operator.call`, and callgrind counts
only within its C function (`--toggle-collect`) and writes one count per kind as it returns
(`--dump-after`).
"""

import argparse
import cProfile
import gc
import io
import json
import operator
import os
import pstats
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
PYTHON = str(ROOT / ".venv" / "bin" / "python")
PAGE, PAGES = 50, 10  # items per list page, pages cycled through (as bench/api.py)
KINDS = ("ceiling", "transitions", "executions", "execution_pages", "request_pages")


def parent(args: argparse.Namespace) -> int:
    from bench.worker import Bench

    (ROOT / ".local").mkdir(exist_ok=True)
    base = Path(tempfile.mkdtemp(prefix="apiprofile.", dir=ROOT / ".local"))
    os.chmod(base, 0o755)  # noqa: S103 (the server's OS user must reach the cluster inside)
    bench = Bench(argparse.Namespace(concurrency=10, log_level="WARNING"), base)
    try:
        bench.start_cluster()
        env = {
            **bench.env,
            "DJANGO_SETTINGS_MODULE": "bench.websettings",
            "REQUEST_API_ENABLED": "true",
            "JWT_SECRET": "apiprofile-secret-long-enough-for-hs256-0123456789",
            "BENCH_FLOW_ID": str(bench.flow_id),
        }
        command = [PYTHON, __file__, "--child", "--calls", str(args.calls), "--top", str(args.top)]
        if args.profile:
            command += ["--profile", args.profile]
        if not args.callgrind:
            return subprocess.run(command, env=env, cwd=ROOT, check=False).returncode
        out = base / "callgrind"
        out.mkdir()
        valgrind = [
            "valgrind",
            "--tool=callgrind",
            "--collect-atstart=no",
            f"--toggle-collect={WINDOW}",
            f"--dump-after={WINDOW}",
            f"--callgrind-out-file={out}/callgrind.out",
        ]
        returncode = subprocess.run(
            [*valgrind, *command, "--callgrind"],
            # The same dicts' layouts from run to run; and no reconnection (60 s by default) in
            # the middle of a kind's calls, which run fifty times slower under callgrind.
            env={**env, "PYTHONHASHSEED": "0", "DATABASE_CONN_MAX_AGE": "3600"},
            cwd=ROOT,
            check=False,
            stderr=subprocess.DEVNULL,
        ).returncode
        if returncode == 0:
            print(callgrind_report(out, args.calls))
        return returncode
    finally:
        bench.stop_cluster()
        shutil.rmtree(base, ignore_errors=True)


# The C function inside which callgrind counts: `operator.call`'s, which nothing else here calls.
WINDOW = "_operator_call"


def callgrind_report(out: Path, calls: int) -> str:
    """Instructions per call of each kind, from the dumps callgrind wrote in `out` (one per
    window, in KINDS order)."""
    dumps = sorted(
        (p for p in out.iterdir() if p.name.startswith("callgrind.out.")),
        key=lambda p: int(p.name.rsplit(".", 1)[1]),
    )
    totals = []
    for dump in dumps:
        for line in dump.read_text().splitlines():
            if line.startswith(("summary:", "totals:")):
                totals.append(int(line.split()[1]))
                break
    if len(totals) != len(KINDS):
        return f"expected {len(KINDS)} callgrind dumps, found {len(totals)} in {out}"
    lines = [f"instructions per call, {calls} calls each, in-process (callgrind):"]
    ceiling = totals[0] / calls
    for kind, total in zip(KINDS, totals, strict=True):
        per_call = total / calls
        lines.append(f"  {kind}: {per_call / 1e6:.3f}M ({per_call / ceiling:.2f}x the ceiling)")
    return "\n".join(lines)


def process_cpu(pid: int) -> float:
    """Seconds of CPU (user and system) process `pid` has used, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def child(args: argparse.Namespace) -> int:
    import django

    django.setup()
    import jwt
    from django.db import connection

    from orquestador.wsgi import application

    now = int(time.time())
    token = jwt.encode(
        {
            "sub": "bench-api",
            "tenant": "bench",
            "scope": "requests:write requests:read",
            "iss": "orquestador",
            "aud": "orquestador-api",
            "iat": now,
            "exp": now + 3600,
        },
        os.environ["JWT_SECRET"],
        algorithm="HS256",
    )
    flow_id = int(os.environ["BENCH_FLOW_ID"])
    statements: dict[str, list[float]] = defaultdict(list)

    def timed(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        started = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            statements[" ".join(sql.split())[:70]].append(time.perf_counter() - started)

    def call(method: str, path: str, body: bytes = b"") -> int:
        return answer(method, path, body)[0]

    def answer(method: str, path: str, body: bytes = b"") -> tuple[int, bytes]:
        query = ""
        if "?" in path:
            path, query = path.split("?", 1)
        environ = {
            "REQUEST_METHOD": method,
            "PATH_INFO": path,
            "QUERY_STRING": query,
            "SERVER_NAME": "127.0.0.1",
            "SERVER_PORT": "8000",
            "SERVER_PROTOCOL": "HTTP/1.1",
            "HTTP_HOST": "127.0.0.1",
            "HTTP_AUTHORIZATION": f"Bearer {token}",
            "wsgi.url_scheme": "http",
            "wsgi.input": io.BytesIO(body),
            "wsgi.errors": sys.stderr,
            "wsgi.multithread": False,
            "wsgi.multiprocess": True,
            "wsgi.run_once": False,
        }
        if body:
            environ["CONTENT_TYPE"] = "application/json"
            environ["CONTENT_LENGTH"] = str(len(body))
        status: list[str] = []
        chunks = application(environ, lambda s, h, *rest: status.append(s))
        content = b"".join(chunks)
        if hasattr(chunks, "close"):
            chunks.close()
        return int(status[0].split()[0]), content

    def fresh_requests(n: int) -> list[str]:
        with connection.cursor() as cursor:
            cursor.execute(
                "INSERT INTO request (id, flow_id, owner, scope, data, state) SELECT "
                "gen_random_uuid(), %s, 'bench-api', 'bench', '{}', 'DRAFT' FROM "
                "generate_series(1, %s) RETURNING id",
                [flow_id, n],
            )
            return [str(row[0]) for row in cursor.fetchall()]

    accept = json.dumps({"transitionId": "go", "expectedRevision": 1}).encode()

    def calls_of(kind: str, n: int) -> list[tuple[str, str, bytes]]:
        if kind == "transitions":
            return [
                ("POST", f"/api/v1/requests/{i}/transitions", accept) for i in fresh_requests(n)
            ]
        if kind == "executions":
            with connection.cursor() as cursor:
                cursor.execute("SELECT id FROM execution ORDER BY random() LIMIT %s", [n])
                ids = [row[0] for row in cursor.fetchall()]
            return [("GET", f"/api/v1/executions/{ids[i % len(ids)]}", b"") for i in range(n)]
        if kind == "ceiling":
            return [("GET", "/api/bench/ceiling", b"")] * n
        paths = page_paths("executions" if kind == "execution_pages" else "requests")
        return [("GET", paths[i % len(paths)], b"") for i in range(n)]

    def page_paths(list_name: str) -> list[str]:
        """The first PAGES pages of a list by their cursors, as bench/api.py cycles them."""
        paths = [f"/api/v1/{list_name}?limit={PAGE}"]
        while len(paths) < PAGES:
            after = json.loads(answer("GET", paths[-1])[1])["next"]
            if after is None:
                break
            paths.append(f"/api/v1/{list_name}?limit={PAGE}&cursor={urllib.parse.quote(after)}")
        return paths

    # Executions to read and list, and everything imported and connected.
    for method, path, body in calls_of("transitions", max(args.calls, PAGE * PAGES)):
        if call(method, path, body) != 202:
            raise RuntimeError(f"POST {path} did not answer 202")
    for kind in KINDS:
        for method, path, body in calls_of(kind, 50):
            call(method, path, body)

    if args.callgrind:
        for kind in KINDS:
            planned = calls_of(kind, args.calls)

            def run(planned: list = planned) -> None:
                for method, path, body in planned:
                    call(method, path, body)

            gc.collect()  # each kind's count starts from the same heap
            operator.call(run)
        return 0
    print(
        f"{args.calls} calls each, one after another, in-process (mean per call): wall time; "
        "this process's CPU; its PostgreSQL backend's CPU; time in statements (wall)"
    )
    for kind in KINDS:
        planned = calls_of(kind, args.calls)
        statements.clear()
        connection.ensure_connection()
        backend = connection.connection.info.backend_pid
        with connection.execute_wrapper(timed):
            started, cpu, db_cpu = time.perf_counter(), time.process_time(), process_cpu(backend)
            for method, path, body in planned:
                call(method, path, body)
            total = (time.perf_counter() - started) / len(planned)
            cpu = (time.process_time() - cpu) / len(planned)
            db_cpu = (process_cpu(backend) - db_cpu) / len(planned)
        if connection.connection.info.backend_pid != backend:
            db_cpu = float("nan")  # reconnected on the way: not one backend's
        in_sql = sum(sum(v) for v in statements.values()) / len(planned)
        print(
            f"  {kind}: wall {total * 1000:.3f} ms, CPU {cpu * 1000:.3f} ms, PostgreSQL "
            f"{db_cpu * 1000:.3f} ms; statements {in_sql * 1000:.3f} ms"
        )
        for sql, times in sorted(statements.items(), key=lambda item: -sum(item[1])):
            share = len(times) / len(planned)
            print(f"      {share:.2f}x {sum(times) / len(times) * 1000:.3f} ms  {sql}")
    if args.profile:
        planned = calls_of(args.profile, args.calls)
        profiler = cProfile.Profile(time.process_time)  # CPU, not the wait for a core
        profiler.enable()
        for method, path, body in planned:
            call(method, path, body)
        profiler.disable()
        out = io.StringIO()
        stats = pstats.Stats(profiler, stream=out).sort_stats("cumulative")
        stats.print_stats(args.top)
        print(out.getvalue())
    return 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--profile", choices=KINDS)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument(
        "--callgrind", action="store_true", help="instructions per call, counted by callgrind"
    )
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    return child(args) if args.child else parent(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
