"""The lists' benchmark (bench/worker.py's `lists` section): page latency of GET /api/v1/requests
and GET /api/v1/executions with a million of each.

--list-rows requests across 100 tenants (10 owners each), each with 1 KiB of data and one
execution (1 KiB of actor snapshot), spread over 30 days, bulk-loaded with SQL before the tables'
indexes are built (once, as their migrations define them), then VACUUM ANALYZE. Through gunicorn
as `scripts/start` runs it (the production configuration, 2 workers), one client with real HS256
tokens: for each filter and each access mode (the owner's, the whole tenant's with
requests:read:tenant), --list-samples times a first page (50 rows) for a random tenant and owner,
then the pages after it by their cursors down to the tenth (after a few untimed pages of each
list and mode, so a gunicorn worker's first requests are not counted). Reports p50 and p99
of the first and of the tenth page (or the deepest page there is, with how deep it went).
"""

import random
import statistics
import subprocess
import time
import urllib.request
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import psycopg

TENANTS, OWNERS = 100, 10
PAGE = 50
DEEP = 10  # the page whose latency is reported beside the first
WARM_UP = 5  # untimed pages per list and mode before the first timed one
READY_TIMEOUT = 60  # seconds for gunicorn to answer /healthz
DAY = 86_400

# Flows: "lists-a" at two versions and "lists-b"; their ids fill %(a1)s, %(a2)s, %(b1)s.
LOAD_REQUESTS = """
INSERT INTO request (id, flow_id, owner, scope, data, state, revision, version, created_at,
                     updated_at)
SELECT gen_random_uuid(),
       (ARRAY[%(a1)s, %(a2)s, %(b1)s])[1 + k %% 3],
       'owner-' || k %% %(owners)s, 'tenant-' || g %% %(tenants)s,
       jsonb_build_object('pad', repeat('x', 1000)),
       (ARRAY['DRAFT', 'SUBMITTED', 'APPROVED', 'CLOSED'])[1 + (k / %(owners)s) %% 4], 2, 2,
       t, t + interval '1 second'
  FROM generate_series(1, %(n)s) AS g,
       LATERAL (SELECT g / %(tenants)s AS k,
                       now() - (g * (30.0 * %(day)s / %(n)s)) * interval '1 second' AS t) AS s
"""
# One execution per request: 90% SUCCEEDED, 4% FAILED (two codes), 3% PENDING, 3% CANCELLED.
LOAD_EXECUTIONS = """
INSERT INTO execution (id, request_id, flow_id, transition_id, status, accepted_revision,
                       attempts, fencing_token, result, actor_snapshot, error_code, created_at,
                       next_attempt_at, started_at, finished_at)
SELECT gen_random_uuid(), r.id, r.flow_id, (ARRAY['submit', 'approve', 'close'])[1 + m %% 3],
       st, 2, 1, 1, '{"outcome": "DONE", "targetState": "CLOSED"}',
       jsonb_build_object('pad', repeat('y', 1000)),
       CASE WHEN st = 'FAILED' THEN (ARRAY['PERMANENT_FAILURE', 'RETRIES_EXHAUSTED'])[1 + m %% 2]
       END,
       r.created_at, r.created_at, r.created_at,
       CASE WHEN st <> 'PENDING' THEN r.created_at + interval '1 second' END
  FROM request AS r,
       LATERAL (SELECT abs(hashtext(r.id::text)) %% 100 AS m) AS h,
       LATERAL (SELECT CASE WHEN m < 4 THEN 'FAILED' WHEN m < 7 THEN 'PENDING'
                            WHEN m < 10 THEN 'CANCELLED' ELSE 'SUCCEEDED' END AS st) AS s
 WHERE r.scope LIKE 'tenant-%%'
"""
BLOCK = """
UPDATE request AS r SET blocked_by_id = e.id
  FROM execution AS e
 WHERE e.request_id = r.id AND e.status = 'PENDING' AND r.scope LIKE 'tenant-%%'
"""

# The request's and the execution's indexes that no constraint owns, with their definitions.
INDEXES = """
SELECT i.indexname, i.indexdef
  FROM pg_indexes AS i
 WHERE i.schemaname = current_schema() AND i.tablename IN ('request', 'execution')
   AND NOT EXISTS (SELECT 1 FROM pg_constraint AS c
                    WHERE c.conindid = (quote_ident(i.schemaname) || '.' ||
                                        quote_ident(i.indexname))::regclass)
 ORDER BY i.tablename, i.indexname
"""


def _ago(days: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - days * DAY))


def _cases() -> list[tuple[str, str, dict[str, str]]]:
    """(list, label, query): each filter alone, and the combinations clients use most."""
    week, day, month = _ago(7), _ago(1), _ago(20)
    return [
        ("requests", "none", {}),
        ("requests", "flowKey", {"flowKey": "lists-a"}),
        ("requests", "state", {"state": "SUBMITTED"}),
        ("requests", "flowKey+state", {"flowKey": "lists-b", "state": "APPROVED"}),
        ("requests", "state+createdAfter", {"state": "SUBMITTED", "createdAfter": week}),
        ("requests", "blocked=true", {"blocked": "true"}),
        ("requests", "blocked=false", {"blocked": "false"}),
        ("requests", "createdAfter", {"createdAfter": week}),
        ("requests", "createdBefore", {"createdBefore": month}),
        ("requests", "updatedAfter", {"updatedAfter": day}),
        ("executions", "none", {}),
        ("executions", "status", {"status": "FAILED"}),
        ("executions", "status+createdAfter", {"status": "SUCCEEDED", "createdAfter": week}),
        ("executions", "requestId", {"requestId": "REQUEST"}),
        ("executions", "transitionId", {"transitionId": "approve"}),
        ("executions", "errorCode", {"errorCode": "RETRIES_EXHAUSTED"}),
        ("executions", "createdAfter", {"createdAfter": week}),
        ("executions", "createdBefore", {"createdBefore": month}),
        ("executions", "finishedAfter", {"finishedAfter": day}),
    ]


def _p(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))], 2)


def load(owner: psycopg.Connection, rows: int) -> dict[str, float]:
    """Bulk-load `rows` requests and as many executions; returns seconds per step."""
    seconds: dict[str, float] = {}
    flows = {}
    for key, version in (("lists-a", 1), ("lists-a", 2), ("lists-b", 1)):
        flows[f"{key[-1]}{version}"] = owner.execute(
            "INSERT INTO flow (key, version, definition, checksum) VALUES (%s, %s, '{}', 'x') "
            "RETURNING id",
            [key, version],
        ).fetchone()[0]
    # The tables' own indexes (not those behind a key or a unique constraint) are built once
    # after the load, as their migrations define them, rather than kept up row by row.
    indexes = owner.execute(INDEXES).fetchall()
    for name, _definition in indexes:
        owner.execute(f'DROP INDEX "{name}"')
    steps: list[tuple[str, str, dict | None]] = [
        (
            "requests",
            LOAD_REQUESTS,
            {**flows, "n": rows, "tenants": TENANTS, "owners": OWNERS, "day": DAY},
        ),
        ("executions", LOAD_EXECUTIONS, {}),  # {}: '%%' is still read as '%'
        ("blocks", BLOCK, {}),
        ("indexes", "SET maintenance_work_mem = '256MB'", None),
        *(("indexes", definition, None) for _name, definition in indexes),
        ("vacuum", "VACUUM ANALYZE request, execution", None),
    ]
    for number, (label, statement, params) in enumerate(steps):
        started = time.monotonic()
        owner.execute(statement, params)
        seconds[label] = round(seconds.get(label, 0.0) + time.monotonic() - started, 1)
        if number + 1 == len(steps) or steps[number + 1][0] != label:
            print(f"  loaded {label} in {seconds[label]} s", flush=True)
    return seconds


def _serve(
    python: str, env: dict[str, str], root: Path, log_path: Path, port: int, stack: ExitStack
) -> str:
    log = stack.enter_context(open(log_path, "wb"))
    server = subprocess.Popen(
        [
            str(Path(python).parent / "gunicorn"),
            "-c",
            "python:orquestador.gunicorn",  # the production configuration
            "orquestador.wsgi:application",
        ],
        cwd=root,
        env={**env, "WEB_BIND": f"127.0.0.1:{port}"},
        stdout=log,
        stderr=subprocess.STDOUT,
    )

    def stop() -> None:
        server.terminate()  # our own child, by its pid
        server.wait(timeout=30)

    stack.callback(stop)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + READY_TIMEOUT
    while True:
        try:
            with urllib.request.urlopen(f"{base}/healthz", timeout=1):  # noqa: S310
                return base
        except OSError:
            if time.monotonic() > deadline or server.poll() is not None:
                raise RuntimeError(f"gunicorn did not start; see {log_path}") from None
            time.sleep(0.1)  # polling the port, with a deadline


def measure(
    base: str,
    tokens: Any,
    request_ids: dict[tuple[str, str], list[str]],
    samples: int,
) -> list[dict]:
    """For each case and mode: p50/p99 of the first page and of the tenth (or deepest)."""
    import requests  # a dev dependency, as for bench/apiclients.py

    rng = random.Random(20261201)
    session = requests.Session()
    # Untimed first: each gunicorn worker's first requests pay its lazy start (URL resolver,
    # database connection, catalog caches), which a serving process pays once, not per page.
    for list_name in ("requests", "executions"):
        for mode in ("owner", "tenant"):
            for _ in range(WARM_UP):
                tenant, owner = f"tenant-{rng.randrange(TENANTS)}", f"owner-{rng.randrange(OWNERS)}"
                session.get(
                    f"{base}/api/v1/{list_name}",
                    params={"limit": PAGE},
                    headers={"Authorization": f"Bearer {tokens(tenant, owner, mode)}"},
                ).raise_for_status()
    results = []
    for list_name, label, query in _cases():
        for mode in ("owner", "tenant"):
            first, deep, depths = [], [], []
            for _ in range(samples):
                tenant, owner = f"tenant-{rng.randrange(TENANTS)}", f"owner-{rng.randrange(OWNERS)}"
                params = dict(query)
                if params.get("requestId") == "REQUEST":
                    params["requestId"] = rng.choice(request_ids[(tenant, owner)])
                headers = {"Authorization": f"Bearer {tokens(tenant, owner, mode)}"}
                cursor, page = None, 0
                while True:
                    page += 1
                    started = time.perf_counter()
                    response = session.get(
                        f"{base}/api/v1/{list_name}",
                        params={**params, "limit": PAGE, **({"cursor": cursor} if cursor else {})},
                        headers=headers,
                    )
                    elapsed = (time.perf_counter() - started) * 1000
                    if response.status_code != 200:
                        raise RuntimeError(f"{list_name} {query}: {response.status_code}")
                    cursor = response.json()["next"]
                    if page == 1:
                        first.append(elapsed)
                    if page == DEEP or cursor is None:
                        deep.append(elapsed)
                        depths.append(page)
                        break
            result = {
                "list": list_name,
                "filter": label,
                "mode": mode,
                "first_p50_ms": _p(first, 50),
                "first_p99_ms": _p(first, 99),
                "deep_p50_ms": _p(deep, 50),
                "deep_p99_ms": _p(deep, 99),
                "deepest_page": min(depths),
                "mean_depth": round(statistics.fmean(depths), 1),
            }
            print(
                f"  {list_name} {label} ({mode}): first page p50 {result['first_p50_ms']} ms, "
                f"p99 {result['first_p99_ms']} ms; page {DEEP} (or last, >= "
                f"{result['deepest_page']}) p50 {result['deep_p50_ms']} ms, "
                f"p99 {result['deep_p99_ms']} ms",
                flush=True,
            )
            results.append(result)
    return results


def run(
    owner: psycopg.Connection,
    env: dict[str, str],
    root: Path,
    base_dir: Path,
    port: int,
    *,
    python: str,
    rows: int,
    samples: int,
) -> dict:
    """The section: load, serve, measure (see the module docstring)."""
    import secrets

    import jwt  # the API's own dependency

    report: dict[str, Any] = {"rows": rows, "samples": samples, "page": PAGE}
    report["load_seconds"] = load(owner, rows)
    request_ids: dict[tuple[str, str], list[str]] = {}
    for request_id, scope, who in owner.execute(
        "SELECT DISTINCT ON (scope, owner) id, scope, owner FROM request "
        "WHERE scope LIKE 'tenant-%' ORDER BY scope, owner, created_at DESC"
    ):
        request_ids.setdefault((scope, who), []).append(str(request_id))
    secret = secrets.token_urlsafe(48)
    issuer, audience = "orquestador", "orquestador-api"
    minted: dict[tuple[str, str, str], str] = {}

    def tokens(tenant: str, subject: str, mode: str) -> str:
        key = (tenant, subject, mode)
        if key not in minted:
            now = int(time.time())
            minted[key] = jwt.encode(
                {
                    "sub": subject if mode == "owner" else "auditor",
                    "tenant": tenant,
                    "scope": "requests:read" if mode == "owner" else "requests:read:tenant",
                    "iss": issuer,
                    "aud": audience,
                    "iat": now,
                    "exp": now + 7200,
                },
                secret,
                algorithm="HS256",
            )
        return minted[key]

    served = {
        **env,
        "REQUEST_API_ENABLED": "true",
        "JWT_SECRET": secret,
        "JWT_ISSUER": issuer,
        "JWT_AUDIENCE": audience,
        "WEB_WORKERS": env.get("WEB_WORKERS", "2"),
    }
    with ExitStack() as stack:
        base = _serve(python, served, root, base_dir / "gunicorn-lists.log", port, stack)
        report["pages"] = measure(base, tokens, request_ids, samples)
    worst = max(r["first_p99_ms"] for r in report["pages"])
    worst_deep = max(r["deep_p99_ms"] for r in report["pages"])
    report["worst_first_p99_ms"], report["worst_deep_p99_ms"] = worst, worst_deep
    return report
