"""The `slow` section of bench/worker.py: a one-action flow whose provider answers after a delay.

The http.json provider is bench/provider.py (loopback, TCP_NODELAY, --slow-delay); one runworker
at each --slow-concurrency: executions/s, the most PostgreSQL connections its role held, peak
RSS, CPU per execution; then again at LOG_LEVEL=INFO, the default, for its CPU beside the run at
--log-level. Beside it, the database-free ceiling (bench/httpclients.py: one requests.Session per
thread, same concurrency, same provider) and Procrastinate posting from an async httpx task. The
call is a READ_ONLY action; at the first concurrency it runs again declared an IDEMPOTENT_WRITE,
whose checkpoints a read does not write (RUNNING before the call, SUCCEEDED on its own).
"""

import json
import subprocess
from contextlib import ExitStack
from typing import TYPE_CHECKING

from bench.common import PYTHON, ROOT, ratio
from bench.procstat import switches_text

if TYPE_CHECKING:
    from bench.worker import Bench


def ours(bench: "Bench", label: str, n: int, concurrency: int, env: dict[str, str]) -> dict:
    """One runworker at `concurrency` on the slow flow; its throughput, or the error."""
    try:
        return bench.throughput(
            1,
            n,
            f"{label}, runworker at {concurrency}",
            concurrency,
            flow_id=bench.slow_flow_id,
            env=env,
        )
    except RuntimeError as exc:
        print(f"  {label} at {concurrency}: {exc}", flush=True)
        return {"concurrency": concurrency, "error": str(exc)}


def run(
    bench: "Bench", concurrencies: list[int], calls: int, delay: float, *, procrastinate: bool
) -> dict:
    with ExitStack() as stack:
        port, integrations = bench.slow_route(stack, delay)
        url = f"http://127.0.0.1:{port}/slow"
        env = {"INTEGRATIONS_FILE": str(integrations), "SIMULATION_MODE": "false"}
        # The same call declared an IDEMPOTENT_WRITE: its RUNNING checkpoint is committed
        # before the call and its SUCCEEDED one on its own after it (a read's is neither).
        writes = bench.base / "integrations-write.toml"
        writes.write_text(integrations.read_text().replace("READ_ONLY", "IDEMPOTENT_WRITE"))
        report: dict = {
            "provider_delay_seconds": delay,
            "ours": [],
            "ours_write": [],
            "ours_info": [],
            "http_only": [],
        }
        for concurrency in concurrencies:
            n = max(calls, concurrency * 10)
            report["ours"].append(ours(bench, "slow provider", n, concurrency, env))
            # The same run at the default level: what logging costs a person who keeps it.
            report["ours_info"].append(
                ours(
                    bench,
                    "slow provider at LOG_LEVEL=INFO",
                    n,
                    concurrency,
                    {**env, "LOG_LEVEL": "INFO"},
                )
            )
            if concurrency == concurrencies[0]:
                report["ours_write"].append(
                    ours(
                        bench,
                        "slow provider as a write",
                        n,
                        concurrency,
                        {**env, "INTEGRATIONS_FILE": str(writes)},
                    )
                )
            report["http_only"].append(_http_only(url, concurrency, n))
        if procrastinate:
            report["procrastinate"] = [
                _procrastinate(bench, c, max(calls, c * 10), url) for c in concurrencies
            ]
    return report


def _http_only(url: str, concurrency: int, n: int) -> dict:
    """The database-free ceiling: bench/httpclients.py's n calls at `concurrency`."""
    baseline = subprocess.run(
        [PYTHON, str(ROOT / "bench" / "httpclients.py"), url, str(concurrency), str(n)],
        check=True,
        capture_output=True,
        text=True,
    )
    http_only = {"concurrency": concurrency, **json.loads(baseline.stdout)}
    http_only["cpu_ms_per_call"] = round(http_only["cpu_seconds"] / http_only["calls"] * 1000, 3)
    http_only["context_switches_per_call"] = {
        "voluntary": round(http_only["voluntary_ctxt_switches"] / n, 2),
        "nonvoluntary": round(http_only["nonvoluntary_ctxt_switches"] / n, 2),
    }
    print(
        f"  slow provider, requests.Session per thread at {concurrency} (no "
        f"database): {http_only['calls_per_second']} calls/s, "
        f"{http_only['cpu_ms_per_call']} ms CPU/call, context switches/call "
        f"{http_only['context_switches_per_call']['voluntary']} + "
        f"{http_only['context_switches_per_call']['nonvoluntary']}",
        flush=True,
    )
    return http_only


def _procrastinate(bench: "Bench", concurrency: int, n: int, url: str) -> dict:
    """As `ours`: one concurrency that does not finish leaves the others measured."""
    try:
        return bench.procrastinate.run(1, concurrency, n, "post", {"BENCH_PROVIDER_URL": url})
    except RuntimeError as exc:
        print(f"  Procrastinate+httpx at {concurrency}: {exc}", flush=True)
        return {"concurrency": concurrency, "error": str(exc)}


def summary_lines(report: dict) -> list[str]:
    if "slow_provider" not in report:
        return []
    lines = []
    slow = report["slow_provider"]
    http = {r["concurrency"]: r["calls_per_second"] for r in slow["http_only"]}
    theirs = {
        r["concurrency"]: r["jobs_per_second"]
        for r in slow.get("procrastinate", [])
        if "error" not in r
    }
    for r in slow["ours"]:
        c = r["concurrency"]
        if "error" in r:
            lines.append(f"  slow provider at {c}: {r['error']}")
            continue
        lines.append(
            f"  slow provider at {c}: ours {r['executions_per_second']}/s on "
            f"{r['connections_per_process']} connections, peak RSS "
            f"{max(m['VmHWM'] for m in r['rss_mib'])} MiB, "
            f"{r['worker_cpu_ms_per_execution']} ms CPU/execution, "
            f"{switches_text(r['context_switches_per_execution'])} context switches; "
            f"HTTP alone {http[c]}/s "
            f"({ratio(r['executions_per_second'], http[c])}); Procrastinate+httpx "
            f"{theirs.get(c, 'n/a')}/s ({ratio(r['executions_per_second'], theirs.get(c, 0))})"
        )
    for r in slow.get("ours_write", []):
        c = r["concurrency"]
        if "error" in r:
            lines.append(f"  slow provider as a write at {c}: {r['error']}")
            continue
        lines.append(
            f"  slow provider as a write at {c}: ours {r['executions_per_second']}/s, "
            f"{r['worker_cpu_ms_per_execution']} ms CPU/execution, "
            f"{r['commits_per_execution']} commits/execution; HTTP alone {http[c]}/s "
            f"({ratio(r['executions_per_second'], http[c])}); Procrastinate+httpx "
            f"({ratio(r['executions_per_second'], theirs.get(c, 0))})"
        )
    level = {r["concurrency"]: r for r in slow["ours"] if "error" not in r}
    for r in slow.get("ours_info", []):
        c = r["concurrency"]
        if "error" in r or c not in level:
            missing = f"no run at {report['settings']['log_level']} beside it"
            lines.append(f"  slow provider at LOG_LEVEL=INFO at {c}: {r.get('error', missing)}")
            continue
        info, usual = r["worker_cpu_ms_per_execution"], level[c]["worker_cpu_ms_per_execution"]
        lines.append(
            f"  slow provider at LOG_LEVEL=INFO at {c}: ours {r['executions_per_second']}/s, "
            f"{info} ms CPU/execution against {usual} ms at "
            f"{report['settings']['log_level']} ({ratio(info, usual)})"
        )
    return lines
