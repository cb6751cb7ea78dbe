"""The crash-point matrix: a runworker dies by SIGKILL at each persistence boundary, for each
effect class, and another process recovers the execution by the rules of
docs/worker-protocol.md#recovery.

Each round arms one point (executions/queue/faultpoints.py, reachable only under settings_test.py)
in three doomed workers of one slot each, enqueues three executions (one per effect class: the first
action `target` calls the loopback provider through http.json, a NO_OP follows), and waits until
each doomed worker has killed itself at that point. The point "in the adapter call" needs no hook:
the provider holds the call and the test SIGKILLs the workers. A recovery worker then takes every
execution over after its lease expires. For every cell the test asserts the final status, the error
code, the attempts, the target checkpoint's attempt, the provider's call count and the audit trail.
docs/crash-points.md is the same table in words.
"""

import os
import signal

import pytest

from executions.queue import faultpoints
from tests.support.providers import JsonProvider, slow
from tests.support.worker import (
    WorkerProcess,
    action,
    audit_events,
    checkpoint_rows,
    create_flow,
    enqueue,
    execution_row,
    flow_definition,
    request_row,
    wait_until,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.process]

IN_CALL = "adapter.in-call"  # not a hook: the provider holds the call, the test kills the worker
EFFECTS = {"READ_ONLY": "/read", "IDEMPOTENT_WRITE": "/idem", "NON_IDEMPOTENT_WRITE": "/charge"}
DEADLINE = 60.0  # seconds for a round's crashes, or its recovery, to happen
WORKER = {
    "WORKER_CONCURRENCY": "1",
    "WORKER_BATCH": "1",
    "WORKER_LEASE_SECONDS": "4",
    "WORKER_RENEW_SECONDS": "1",
    "WORKER_POLL_MS": "100",
}

SUCCEEDED_ONCE = ("SUCCEEDED", None, 1)  # status, error code, provider calls
RETRIED = ("SUCCEEDED", None, 2)
UNCERTAIN = ("RECONCILIATION_REQUIRED", "UNCERTAIN_WRITE", 1)
# (point, effect) -> (status, error code, provider calls (or the counts allowed), target
# checkpoint attempt, attempts).
EXPECTED = {
    faultpoints.CLAIM_COMMITTED: {e: (*SUCCEEDED_ONCE, 1, 2) for e in EFFECTS},
    faultpoints.CHECKPOINT_STARTED: {
        # Every start, a read's included, commits before its call: the process died before the
        # provider was reached, and the next holder calls it once, as attempt 2.
        "READ_ONLY": (*SUCCEEDED_ONCE, 2, 2),
        "IDEMPOTENT_WRITE": (*SUCCEEDED_ONCE, 2, 2),
        "NON_IDEMPOTENT_WRITE": ("RECONCILIATION_REQUIRED", "UNCERTAIN_WRITE", 0, 1, 2),
    },
    IN_CALL: {
        "READ_ONLY": (*RETRIED, 2, 2),
        "IDEMPOTENT_WRITE": (*RETRIED, 2, 2),
        "NON_IDEMPOTENT_WRITE": (*UNCERTAIN, 1, 2),
    },
    faultpoints.CHECKPOINT_SUCCEEDING: {
        # A read found RUNNING is retried within max_attempts, as an idempotent write is.
        "READ_ONLY": (*RETRIED, 2, 2),
        "IDEMPOTENT_WRITE": (*RETRIED, 2, 2),
        "NON_IDEMPOTENT_WRITE": (*UNCERTAIN, 1, 2),
    },
    faultpoints.CHECKPOINT_SUCCEEDED: {e: (*SUCCEEDED_ONCE, 1, 2) for e in EFFECTS},
    faultpoints.FINAL_UNCOMMITTED: {e: (*SUCCEEDED_ONCE, 1, 2) for e in EFFECTS},
    faultpoints.FINAL_COMMITTED: {e: (*SUCCEEDED_ONCE, 1, 1) for e in EFFECTS},
}


@pytest.fixture
def provider():
    with JsonProvider() as double:
        yield double


@pytest.fixture
def integrations(tmp_path, provider) -> str:
    path = tmp_path / "integrations.toml"
    path.write_text(
        "".join(
            f'[contracts."crash.{name}@1"]\n'
            f'effect = "{effect}"\n'
            "max_attempts = 3\n"
            "timeout_seconds = 2\n"
            f'[routes."crash.{name}@1"]\n'
            'adapter = "http.json"\n'
            f'url = "{provider.url(route)}"\n'
            'method = "POST"\n\n'
            for effect, route in EFFECTS.items()
            for name in [route.strip("/")]
        )
    )
    return str(path)


def _flows(conn) -> dict[str, int]:
    return {
        effect: create_flow(
            conn,
            flow_definition(
                [
                    action("target", f"crash.{route.strip('/')}", input={"n": {"from": "/data/n"}}),
                    action("tail", "NO_OP"),
                ],
                key=f"crash-{route.strip('/')}",
                updates=[{"path": "/out", "from": "/actions/target"}],
            ),
        )
        for effect, route in EFFECTS.items()
    }


@pytest.mark.parametrize("point", list(EXPECTED))
def test_crash_point__recovery_by_another_process_follows_spec(
    point, process_env, runtime_conn, provider, integrations, tmp_path
):
    flows = _flows(runtime_conn)
    env = {**process_env, "INTEGRATIONS_FILE": integrations}
    doomed_env = {
        **env,
        "DJANGO_SETTINGS_MODULE": "orquestador.settings_test",
        "TEST_SETTINGS_ROLE": "runtime",
    }
    if point == IN_CALL:
        for route in EFFECTS.values():
            provider.plan(route, slow(30))  # held until the worker is killed
    else:
        doomed_env |= {faultpoints.POINT_ENV: point, faultpoints.ACTION_ENV: "target"}
        # A slot is free once its last call has answered (docs/adr/0014), before a save or
        # final point kills the process: a worker that got there before another had claimed
        # could take a second execution and die holding it. Each first call held for a second lets
        # all three be claimed first, one per worker.
        for route in EFFECTS.values():
            provider.plan(route, slow(1))

    doomed = [WorkerProcess(doomed_env, tmp_path / f"doomed-{n}.log", **WORKER) for n in range(3)]
    try:
        for worker in doomed:
            worker.wait_for_event("worker started", timeout=DEADLINE)
        with runtime_conn.transaction():  # one commit, one wake-up: each worker claims one
            accepted = {
                effect: enqueue(runtime_conn, flow_id, data={"n": 7})
                for effect, flow_id in flows.items()
            }
        if point == IN_CALL:
            for route in EFFECTS.values():
                provider.wait_for_calls(1, route, timeout=DEADLINE)
            # Every target's RUNNING checkpoint committed before its call.
            wait_until(
                lambda: all(
                    "target" in checkpoint_rows(runtime_conn, a.execution_id)
                    for a in accepted.values()
                ),
                timeout=DEADLINE,
                what="every target's RUNNING checkpoint",
            )
            for worker in doomed:
                os.kill(worker.pid, signal.SIGKILL)
        for worker in doomed:
            assert worker.wait(DEADLINE) == -signal.SIGKILL, worker.output()
            if point != IN_CALL:
                assert worker.wait_for_event("fault point reached")["point"] == point
        # Each execution was run once, by a doomed worker, and crashed there.
        for item in accepted.values():
            assert execution_row(runtime_conn, item.execution_id)["attempts"] == 1
    finally:
        for worker in doomed:
            worker.close()

    with WorkerProcess(env, tmp_path / "recovery.log", **WORKER):

        def settled():
            rows = [execution_row(runtime_conn, a.execution_id) for a in accepted.values()]
            return all(row["status"] in ("SUCCEEDED", "RECONCILIATION_REQUIRED") for row in rows)

        wait_until(settled, timeout=DEADLINE, what="recovery of every execution")

    for effect, item in accepted.items():
        status, code, calls, target_attempt, attempts = EXPECTED[point][effect]
        cell = f"{point} with {effect}"
        execution = execution_row(runtime_conn, item.execution_id)
        assert (execution["status"], execution["error_code"]) == (status, code), cell
        assert execution["attempts"] == attempts, cell
        assert provider.calls(EFFECTS[effect]) in (
            calls if isinstance(calls, tuple) else (calls,)
        ), cell
        keys = {r.headers["idempotency-key"] for r in provider.requests(EFFECTS[effect])}
        assert keys <= {f"{item.execution_id}:target"}, cell  # one key, on every attempt
        checkpoints = checkpoint_rows(runtime_conn, item.execution_id)
        assert checkpoints["target"]["attempt"] == target_attempt, cell
        request = request_row(runtime_conn, item.request_id)
        completed = [t for t, _ in audit_events(runtime_conn, item.request_id)].count(
            "TRANSITION_COMPLETED"
        )
        if status == "SUCCEEDED":
            assert (request["state"], request["blocked_by_id"]) == ("DONE", None), cell
            assert request["data"]["out"] == provider.effects(EFFECTS[effect])[0].response, cell
            assert completed == 1, cell
        else:
            assert checkpoints["target"]["status"] == "RUNNING", cell
            assert (request["state"], request["blocked_by_id"]) == ("DRAFT", item.execution_id)
            assert completed == 0, cell
