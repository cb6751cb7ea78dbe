"""The `limits` section of bench/worker.py: route limits (INTEGRATIONS.md#flow-control) with
4 runworker processes x concurrency 50 against a loopback provider that answers in 50 ms and
records when each call starts and ends (tests/support/meteredprovider.py, in this process).

1. `max_in_flight = 8`: executions/s beside 8 / 50 ms (160/s; the target is 0.9 x 144/s with
   the writes around each call), the most calls the provider saw at once, attempts past the
   first (waiting must spend none), worker CPU per parked execution-second (an upper bound: all
   the workers' CPU, the calls' own included, over the seconds executions spent waiting).
2. `rate_limit = "50/s"`: the sustained rate, the most starts in any sliding second by the
   limiter's own record (route_call: the moment each start was granted for) and by the
   provider, and how long after its moment each call reached the provider (matched by its
   Idempotency-Key; the host's one clock), p50, p99 and the most.
3. An unlimited route's pickup (acceptance commit -> the provider's call start) at about 20
   acceptances a second, p50 and p99, beside a limited backlog and without it.
4. Limits far above need against no limits, one runworker at concurrency 100: worker and
   PostgreSQL CPU per execution with a no-op provider (0 ms) and a 100 ms one, in alternated
   rounds (none, far above, none, ...: --limit-overhead-rounds of --limit-overhead-calls
   each): each round's ratio, and their median and spread (one short pair cannot tell 5 %
   from this machine's noise).
"""

from __future__ import annotations

import statistics
import time
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING

from psycopg.types.json import Jsonb

from tests.support.meteredprovider import MeteredProvider

if TYPE_CHECKING:
    from bench.worker import Bench

PROCESSES, CONCURRENCY = 4, 50
DELAY = 0.05  # seconds the provider takes per call
PICKUP_GAP_SECONDS = 0.05  # seconds between the unlimited route's acceptances
FAR_ABOVE = 'max_in_flight = 100000\nrate_limit = "1000000/s"\n'

INTEGRATIONS = """
[contracts."bench.limited@1"]
effect = "READ_ONLY"
max_attempts = 3
timeout_seconds = 10

[routes."bench.limited@1"]
adapter = "http.json"
url = "{limited}"
{limits}
[contracts."bench.free@1"]
effect = "READ_ONLY"
max_attempts = 3
timeout_seconds = 10

[routes."bench.free@1"]
adapter = "http.json"
url = "{free}"
"""
# Attempts past the first, and how long executions waited for their call (acceptance -> the
# limiter's grant), for one tag's executions.
WAITED = """
SELECT count(*) FILTER (WHERE c.attempt > 1),
       coalesce(sum(extract(epoch FROM rc.started_at - e.created_at)), 0)
  FROM execution AS e
  JOIN request AS r ON r.id = e.request_id
  JOIN action_execution AS c ON c.execution_id = e.id
  LEFT JOIN route_call AS rc ON rc.execution_id = e.id
 WHERE r.scope = %(tag)s
"""
GRANT_STARTS = """
SELECT extract(epoch FROM started_at), execution_id::text FROM route_call WHERE route = %(route)s
"""
CLEAR = "TRUNCATE route_call, route_park, route_limit, route_event"
# What a pickup run's backlog leaves unfinished is set aside (cancelled, as the bench's owner),
# so the next run's "all done" is about its own executions only.
SET_ASIDE = """
UPDATE execution SET status = 'CANCELLED', finished_at = clock_timestamp(),
       lease_owner = NULL, lease_expires_at = NULL
 WHERE status IN ('PENDING', 'RETRY_WAIT', 'RUNNING', 'SUSPENDED')
"""


def _flow(key: str, capability: str) -> dict:
    return {
        "key": key,
        "version": 1,
        "initialState": "DRAFT",
        "states": ["DRAFT", "DONE"],
        "dataSchema": {"type": "object"},
        "transitions": [
            {
                "id": "go",
                "from": ["DRAFT"],
                "actions": [{"id": "call", "capability": capability, "version": 1, "input": {}}],
                "decision": {
                    "hitPolicy": "FIRST",
                    "rules": [{"id": "done", "when": True, "target": "DONE", "outcome": "DONE"}],
                },
            }
        ],
    }


def _spread(values: list[float]) -> dict | None:
    """p50, p99 and the most of sorted `values`, rounded."""
    if not values:
        return None
    return {
        "p50": round(statistics.median(values), 2),
        "p99": round(values[min(len(values) - 1, int(len(values) * 0.99))], 2),
        "max": round(values[-1], 2),
    }


def most_within(starts: list[float], seconds: float) -> int:
    starts = sorted(starts)
    most, first = 0, 0
    for last, at in enumerate(starts):
        while at - starts[first] >= seconds:
            first += 1
        most = max(most, last - first + 1)
    return most


class Limits:
    def __init__(self, bench: Bench) -> None:
        self.bench = bench

    def _flows(self) -> tuple[int, int]:
        owner = self.bench.owner
        ids = []
        for key, capability in (("bench-limited", "bench.limited"), ("bench-free", "bench.free")):
            found = owner.execute("SELECT id FROM flow WHERE key = %s", [key]).fetchone()
            if found is None:
                found = owner.execute(
                    "INSERT INTO flow (key, version, definition, checksum) "
                    "VALUES (%s, 1, %s, 'x') RETURNING id",
                    [key, Jsonb(_flow(key, capability))],
                ).fetchone()
            ids.append(found[0])
        return ids[0], ids[1]

    def _env(self, limited: MeteredProvider, free: MeteredProvider, limits: str) -> dict:
        path = Path(self.bench.base) / "integrations-limits.toml"
        path.write_text(INTEGRATIONS.format(limited=limited.url(), free=free.url(), limits=limits))
        self.bench.owner.execute(CLEAR)  # a fresh limiter: no declaration of an earlier run
        return {"INTEGRATIONS_FILE": str(path), "SIMULATION_MODE": "false"}

    def _limited_run(self, label: str, limits: str, n: int, route_flow: int) -> dict:
        """One throughput run on the limited route; `label` names its log files too."""
        with MeteredProvider(delay=DELAY) as limited, MeteredProvider(delay=DELAY) as free:
            env = self._env(limited, free, limits)
            result = self.bench.throughput(
                PROCESSES,
                n,
                label.replace("/", "-per-"),
                CONCURRENCY,
                flow_id=route_flow,
                env=env,
            )
            tag = self.bench.owner.execute(
                "SELECT scope FROM request ORDER BY created_at DESC LIMIT 1"
            ).fetchone()[0]
            retried, waited = self.bench.runtime.execute(WAITED, {"tag": tag}).fetchone()
            granted = self.bench.runtime.execute(
                GRANT_STARTS, {"route": "bench.limited@1"}
            ).fetchall()
            grants = [float(at) for at, _ in granted]
            arrived = {key.split(":")[0]: at for at, key in limited.arrivals}
            delays = sorted(
                (arrived[execution] - float(at)) * 1000
                for at, execution in granted
                if execution in arrived
            )
            worker_cpu = result["worker_cpu_ms_per_execution"] * n  # ms, all workers
            result.update(
                provider_most_in_flight=limited.most,
                provider_most_starts_per_second=limited.most_started_within(1.0),
                limiter_most_starts_per_second=most_within(grants, 1.0),
                provider_after_grant_ms=_spread(delays),
                attempts_past_first=retried,
                parked_execution_seconds=round(float(waited), 1),
                worker_cpu_ms_per_parked_second=round(worker_cpu / max(float(waited), 1e-9), 4),
            )
        print(
            f"  {label}: provider saw at most {result['provider_most_in_flight']} at once and "
            f"{result['provider_most_starts_per_second']} starts in a second (limiter "
            f"{result['limiter_most_starts_per_second']}); {retried} attempts past the first; "
            f"worker CPU {result['worker_cpu_ms_per_parked_second']} ms per parked second",
            flush=True,
        )
        return result

    def _pickup(self, label: str, samples: int, backlog: int, limited_flow: int, free_flow: int):
        bench = self.bench
        with ExitStack() as stack:
            limited = stack.enter_context(MeteredProvider(delay=DELAY))
            free = stack.enter_context(MeteredProvider(delay=0.0))
            env = self._env(limited, free, "max_in_flight = 8\n")
            bench.start_workers(PROCESSES, stack, label, CONCURRENCY, env)
            if backlog:
                bench.enqueue(backlog, limited_flow)
                time.sleep(1.0)  # the backlog claimed and parked before the samples start
            accepted = []
            for _ in range(samples):
                bench.enqueue(1, free_flow)
                accepted.append(time.monotonic())
                time.sleep(PICKUP_GAP_SECONDS)
            deadline = time.monotonic() + 60
            while len(free.answered()) < samples and time.monotonic() < deadline:
                time.sleep(0.05)
            starts = sorted(start for start, _, _ in free.answered())
        bench.owner.execute(SET_ASIDE)
        waits = sorted((start - at) * 1000 for at, start in zip(accepted, starts, strict=False))
        result = {
            "samples": len(waits),
            "backlog": backlog,
            "p50_ms": round(statistics.median(waits), 2) if waits else None,
            "p99_ms": round(waits[min(len(waits) - 1, int(len(waits) * 0.99))], 2)
            if waits
            else None,
        }
        print(
            f"  {label}: unlimited route pickup p50 {result['p50_ms']} ms, "
            f"p99 {result['p99_ms']} ms",
            flush=True,
        )
        return result

    def _overhead(
        self, delay: float, n: int, rounds: int, free_flow: int, limited_flow: int
    ) -> dict:
        runs: dict[str, list[dict]] = {"none": [], "far_above": []}
        ratios: list[dict] = []
        keys = ("worker_cpu_ms_per_execution", "postgres_cpu_ms_per_execution")
        for index in range(rounds):
            for name, limits, flow in (
                ("none", "", free_flow),
                ("far_above", FAR_ABOVE, limited_flow),
            ):
                with MeteredProvider(delay=delay) as limited, MeteredProvider(delay=delay) as free:
                    env = self._env(limited, free, limits)
                    runs[name].append(
                        self.bench.throughput(
                            1,
                            n,
                            f"{name} limits, {delay * 1000:.0f} ms provider, round {index + 1}",
                            100,
                            flow_id=flow,
                            env=env,
                        )
                    )
            ratios.append(
                {
                    key: round(runs["far_above"][-1][key] / max(runs["none"][-1][key], 1e-9), 3)
                    for key in keys
                }
            )
        ratio = {
            key: {
                "median": round(statistics.median(r[key] for r in ratios), 3),
                "rounds": sorted(r[key] for r in ratios),
            }
            for key in keys
        }
        medians = {
            name: {key: round(statistics.median(r[key] for r in found), 3) for key in keys}
            for name, found in runs.items()
        }
        print(
            f"  limits far above need / none, {delay * 1000:.0f} ms provider, {rounds} rounds: "
            + "; ".join(
                f"{key.split('_')[0]} {ratio[key]['median']}x {ratio[key]['rounds']}"
                for key in keys
            ),
            flush=True,
        )
        return {
            "provider_delay_seconds": delay,
            "rounds": rounds,
            "runs": runs,
            "medians": medians,
            "ratio": ratio,
        }

    def run(
        self,
        *,
        calls: int,
        rate_calls: int,
        pickup_samples: int,
        overhead_calls: int,
        overhead_rounds: int,
    ) -> dict:
        limited_flow, free_flow = self._flows()
        report = {
            "max_in_flight": self._limited_run(
                "max_in_flight = 8", "max_in_flight = 8\n", calls, limited_flow
            ),
            "rate_limit": self._limited_run(
                'rate_limit = "50/s"', 'rate_limit = "50/s"\n', rate_calls, limited_flow
            ),
            "pickup_alone": self._pickup(
                "pickup alone", pickup_samples, 0, limited_flow, free_flow
            ),
            "pickup_beside_backlog": self._pickup(
                "pickup beside a limited backlog", pickup_samples, calls, limited_flow, free_flow
            ),
            "overhead": [
                self._overhead(delay, overhead_calls, overhead_rounds, free_flow, limited_flow)
                for delay in (0.0, 0.1)
            ],
        }
        return report


def summary_lines(report: dict) -> list[str]:
    found = report.get("limits")
    if not found:
        return []
    flight, rate = found["max_in_flight"], found["rate_limit"]
    alone, beside = found["pickup_alone"], found["pickup_beside_backlog"]
    lines = [
        f"  limits, max_in_flight = 8: {flight['executions_per_second']} executions/s "
        f"({flight['executions_per_second'] / 144:.2f}x of 144/s), at most "
        f"{flight['provider_most_in_flight']} at once at the provider, "
        f"{flight['attempts_past_first']} attempts past the first, worker CPU "
        f"{flight['worker_cpu_ms_per_parked_second']} ms per parked second",
        f'  limits, rate_limit = "50/s": {rate["executions_per_second"]} executions/s, at most '
        f"{rate['limiter_most_starts_per_second']} grants / "
        f"{rate['provider_most_starts_per_second']} provider starts in a second; at the "
        f"provider after its moment {rate['provider_after_grant_ms']} ms",
        f"  limits, unlimited route pickup p99: {beside['p99_ms']} ms beside a backlog, "
        f"{alone['p99_ms']} ms alone",
    ]
    for run in found["overhead"]:
        worker = run["ratio"]["worker_cpu_ms_per_execution"]
        postgres = run["ratio"]["postgres_cpu_ms_per_execution"]
        lines.append(
            f"  limits far above need / none, {run['provider_delay_seconds'] * 1000:.0f} ms "
            f"provider, median of {run['rounds']} alternated rounds: worker CPU "
            f"{worker['median']}x {worker['rounds']}, PostgreSQL {postgres['median']}x "
            f"{postgres['rounds']}"
        )
    return lines
