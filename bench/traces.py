"""The traces section of bench/worker.py: what tracing costs the worker and PostgreSQL.

One runworker on the no-op flow, then on the slow-provider flow (bench/provider.py) at the first
--slow-concurrency, each twice in a row: tracing off (no OTEL_* variable, as by default), then on
(OTEL_EXPORTER_OTLP_ENDPOINT to a loopback sink, bench/otlpsink.py, the SDK's default batching
and sampling). For the run with tracing on, every execution is accepted with a stored trace
context, as the API stores one when it traces, so each run continues a trace as in production.
Reports executions/s and CPU per execution (worker, PostgreSQL) of both, and their ratios.
Compare tracing off with the same figures of a run of the code before it (the throughput and
slow sections report the same measures) for what the off path costs.
"""

import json
import subprocess
import urllib.request
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from bench import slowprovider

# Each execution accepted while the on-runs are measured gets a trace context of its own, the
# shape the API stores (orquestador/tracing.py: carrier).
STORED_CONTEXT = """
ALTER TABLE execution ALTER COLUMN trace_context SET DEFAULT jsonb_build_object(
    'traceparent', '00-' || md5(random()::text) || '-' || left(md5(random()::text), 16) || '-01')
"""
NO_STORED_CONTEXT = "ALTER TABLE execution ALTER COLUMN trace_context DROP DEFAULT"


def _ratio(on: dict, off: dict, key: str) -> float | None:
    if "error" in on or "error" in off or not off.get(key):
        return None
    return round(on[key] / off[key], 3)


def _pair(bench: Any, label: str, run: Any, env: dict[str, str], sink: str) -> dict:
    off = run(f"{label}, tracing off", env)
    bench.owner.execute(STORED_CONTEXT)
    try:
        on = run(f"{label}, tracing on", {**env, "OTEL_EXPORTER_OTLP_ENDPOINT": sink})
    finally:
        bench.owner.execute(NO_STORED_CONTEXT)
    pair = {"off": off, "on": on}
    for key in ("worker_cpu_ms_per_execution", "postgres_cpu_ms_per_execution"):
        pair[f"{key}_on_over_off"] = _ratio(on, off, key)
    worker, server = (
        pair["worker_cpu_ms_per_execution_on_over_off"],
        pair["postgres_cpu_ms_per_execution_on_over_off"],
    )
    print(f"  {label}: tracing on / off, worker CPU x{worker}, PostgreSQL CPU x{server}")
    return pair


def run(
    bench: Any,
    *,
    python: str,
    root: Path,
    executions: int,
    concurrency: int,
    calls: int,
    delay: float,
) -> dict:
    """Both pairs of runs, with the sink's count of what was exported."""
    with ExitStack() as stack:
        sink = subprocess.Popen(
            [python, str(root / "bench" / "otlpsink.py")], stdout=subprocess.PIPE, text=True
        )
        stack.callback(bench._stop, sink)
        sink_url = f"http://127.0.0.1:{int(sink.stdout.readline())}"
        _, path = bench.slow_route(stack, delay)
        slow_env = {"INTEGRATIONS_FILE": str(path), "SIMULATION_MODE": "false"}
        n_slow = max(calls, concurrency * 10)

        def noop(label: str, env: dict[str, str]) -> dict:
            return bench.throughput(1, executions, label, env=env)

        def slow(label: str, env: dict[str, str]) -> dict:
            return slowprovider.ours(bench, label, n_slow, concurrency, env)

        measured = subprocess.run(
            [python, "-c", OFF_PATH], cwd=root, env=bench.env, check=True, capture_output=True
        )
        report: dict[str, Any] = {"off_path": json.loads(measured.stdout)}
        print(
            f"  tracing off, the span helpers and log fields of one run: "
            f"{report['off_path']['added_us_per_run']} µs added to "
            f"{report['off_path']['before_us_per_run']} µs of bare awaits",
            flush=True,
        )
        report |= {
            "noop": _pair(bench, "no-op, 1 process", noop, {}, sink_url),
            "slow": _pair(bench, f"slow provider at {concurrency}", slow, slow_env, sink_url),
        }
        with urllib.request.urlopen(f"{sink_url}/stats", timeout=10) as answer:  # noqa: S310
            report["exported"] = json.loads(answer.read())
        print(
            f"  exported: {report['exported']['exports']} OTLP requests, "
            f"{report['exported']['bytes']} bytes",
            flush=True,
        )
    return report


def summary_lines(report: dict) -> list[str]:
    lines = []
    if "off_path" in report:
        lines.append(f"traces, off: {report['off_path']['added_us_per_run']} µs added per run")
    for name in ("noop", "slow"):
        pair = report.get(name)
        if not pair:
            continue
        off, on = pair["off"], pair["on"]
        if "error" in off or "error" in on:
            lines.append(f"traces, {name}: a run did not finish")
            continue
        lines.append(
            f"traces, {name}: off {off['worker_cpu_ms_per_execution']} ms worker + "
            f"{off['postgres_cpu_ms_per_execution']} ms PostgreSQL CPU/execution, on "
            f"{on['worker_cpu_ms_per_execution']} + {on['postgres_cpu_ms_per_execution']} ms "
            f"(x{pair['worker_cpu_ms_per_execution_on_over_off']}, "
            f"x{pair['postgres_cpu_ms_per_execution_on_over_off']})"
        )
    return lines


def off_path_microseconds(rounds: int = 200_000) -> dict:
    """What tracing off adds to one run, without a database (Django set up, no connection): a
    run of one action, one call and three writes, each awaiting a finished coroutine, with the
    worker's span helpers around them and the dispatch's log fields, against the same awaits
    and the log fields as they were; microseconds per run."""
    import asyncio
    import time
    import uuid

    from actions.base import ActionResult, Outcome
    from executions.queue.claims import Dispatch
    from executions.queue.leases import Fence
    from executions.worker import spans
    from orquestador import tracing

    if tracing.active():
        raise RuntimeError("tracing is on in this process: nothing to measure")
    result = ActionResult(outcome=Outcome.SUCCEEDED, output={})
    action = {"id": "a", "capability": "c", "version": 1}
    fence = Fence(uuid.uuid4(), uuid.uuid4(), 1, "bench")

    async def done(value: Any = None) -> Any:
        return value

    async def before() -> None:
        dispatch = Dispatch(fence, 1, "go", 1, None)
        dispatch.fence.log_extra(attempt=dispatch.attempts)

        async def run() -> None:
            async def step() -> None:
                await done(result)
                for _ in range(3):
                    await done()

            await step()

        await run()

    async def after() -> None:
        dispatch = Dispatch(fence, 1, "go", 1, None)
        dispatch.log_extra  # noqa: B018 (what the worker computes once per dispatch)

        async def run() -> None:
            async def step() -> None:
                await spans.traced_call(None, 1, done(result))  # type: ignore[arg-type]
                for _ in range(3):
                    await spans.traced_writes("W", done)()

            await spans.traced_action(action, step())

        await spans.traced_run(dispatch, run())  # type: ignore[arg-type]

    async def timed(body: Any) -> float:
        start = time.perf_counter()
        for _ in range(rounds):
            await body()
        return time.perf_counter() - start

    async def measure() -> dict:
        plain, helped = await timed(before), await timed(after)
        plain, helped = min(plain, await timed(before)), min(helped, await timed(after))
        return {
            "before_us_per_run": round(plain / rounds * 1e6, 3),
            "after_us_per_run": round(helped / rounds * 1e6, 3),
            "added_us_per_run": round((helped - plain) / rounds * 1e6, 3),
        }

    return asyncio.run(measure())


OFF_PATH = (
    "import json, django; django.setup(); from bench.traces import off_path_microseconds; "
    "print(json.dumps(off_path_microseconds()))"
)
