"""The crash-point matrices' harness (tests/process/test_crash_points.py and
test_compensation_crash_points.py): three doomed runworkers of one slot each, armed at one point
(executions/queue/faultpoints.py, reachable only under settings_test.py) for one step, take one
execution each and die there by SIGKILL; the point "in the adapter call" needs no hook (the
provider holds the call and the harness kills them). A recovery worker then takes every
execution over once its lease expired, and each test asserts its cells.
"""

import os
import signal
from pathlib import Path

import psycopg

from executions.queue import faultpoints
from tests.support.providers import JsonProvider, slow
from tests.support.worker import (
    Accepted,
    WorkerProcess,
    checkpoint_rows,
    enqueue,
    execution_row,
    wait_until,
)

IN_CALL = "adapter.in-call"  # not a hook: the provider holds the call, the test kills the worker
DEADLINE = 60.0  # seconds for a round's crashes, or its recovery, to happen
WORKER = {
    "WORKER_CONCURRENCY": "1",
    "WORKER_BATCH": "1",
    "WORKER_LEASE_SECONDS": "4",
    "WORKER_RENEW_SECONDS": "1",
    "WORKER_POLL_MS": "100",
}


def declared(capability: str, effect: str, url: str, *, contract: str = "", route: str = "") -> str:
    """`capability`@1 as an INTEGRATIONS_FILE declares it: `effect`, 3 attempts of at most 2 s,
    POSTed by http.json to `url`; `contract` and `route` are more lines of each table."""
    return (
        f'[contracts."{capability}@1"]\neffect = "{effect}"\nmax_attempts = 3\n'
        f"timeout_seconds = 2\n{contract}"
        f'[routes."{capability}@1"]\nadapter = "http.json"\nurl = "{url}"\n{route}'
        'method = "POST"\n\n'
    )


def crash_then_recover(
    point: str,
    *,
    step: str,
    routes: list[str],
    flows: dict[str, int],
    env: dict[str, str],
    conn: psycopg.Connection,
    provider: JsonProvider,
    logs: Path,
    ends: tuple[str, ...],
) -> dict[str, Accepted]:
    """One round at `point`, `step` being the action the fault points are armed for and `routes`
    the provider's routes its calls go to (held at IN_CALL): one execution of each of `flows`,
    accepted in one commit, crashed once by a doomed worker; then recovered until every one has
    a status of `ends`. Returns the accepted executions by the keys of `flows`."""
    doomed_env = {
        **env,
        "DJANGO_SETTINGS_MODULE": "orquestador.settings_test",
        "TEST_SETTINGS_ROLE": "runtime",
    }
    if point == IN_CALL:
        for route in routes:
            provider.plan(route, slow(30))  # held until the worker is killed
    else:
        doomed_env |= {faultpoints.POINT_ENV: point, faultpoints.ACTION_ENV: step}

    doomed = [WorkerProcess(doomed_env, logs / f"doomed-{n}.log", **WORKER) for n in range(3)]
    try:
        for worker in doomed:
            worker.wait_for_event("worker started", timeout=DEADLINE)
        with conn.transaction():  # one commit, one wake-up: each worker claims one
            accepted = {
                key: enqueue(conn, flow_id, data={"n": 7}) for key, flow_id in flows.items()
            }
        if point == IN_CALL:
            for route in routes:
                provider.wait_for_calls(1, route, timeout=DEADLINE)
            # Every step's RUNNING checkpoint committed before its call.
            wait_until(
                lambda: all(
                    step in checkpoint_rows(conn, a.execution_id) for a in accepted.values()
                ),
                timeout=DEADLINE,
                what=f"every {step} RUNNING checkpoint",
            )
            for worker in doomed:
                os.kill(worker.pid, signal.SIGKILL)
        for worker in doomed:
            assert worker.wait(DEADLINE) == -signal.SIGKILL, worker.output()
            if point != IN_CALL:
                assert worker.wait_for_event("fault point reached")["point"] == point
        # Each execution was run once, by a doomed worker, and crashed there.
        for item in accepted.values():
            assert execution_row(conn, item.execution_id)["attempts"] == 1
    finally:
        for worker in doomed:
            worker.close()

    with WorkerProcess(env, logs / "recovery.log", **WORKER):

        def settled() -> bool:
            rows = [execution_row(conn, a.execution_id) for a in accepted.values()]
            return all(row["status"] in ends for row in rows)

        wait_until(settled, timeout=DEADLINE, what="recovery of every execution")
    return accepted
