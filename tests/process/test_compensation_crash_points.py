"""The crash-point matrix of compensation: a runworker dies by SIGKILL at each boundary of an
undo, for each effect class of the undo, and another process finishes it by the recovery rules
(docs/crash-points.md, "Compensation").

The flow: `target` (an idempotent write to the loopback provider, always accepted) declares the
undo under test; the decision matches nothing, so the transition fails (DECISION_NO_MATCH) after
its write and the holder compensates. Each round arms one point for the step
`target:compensate` in three doomed workers (one per effect class of the undo), or, for the call
itself, lets the provider hold the undo while the test kills them; a recovery worker then takes
each execution over once its lease expired. Every cell asserts the final status and code, the
undo's calls and key, its checkpoint's attempt, that the forward write ran exactly once, and
that the request is released as it was (or still blocked, for an uncertain undo).
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

IN_CALL = "adapter.in-call"  # not a hook: the provider holds the undo, the test kills the worker
STEP = "target:compensate"
UNDOS = {
    "READ_ONLY": "/undo-read",
    "IDEMPOTENT_WRITE": "/undo-idem",
    "NON_IDEMPOTENT_WRITE": "/undo-charge",
}
DEADLINE = 60.0  # seconds for a round's crashes, or its recovery, to happen
WORKER = {
    "WORKER_CONCURRENCY": "1",
    "WORKER_BATCH": "1",
    "WORKER_LEASE_SECONDS": "4",
    "WORKER_RENEW_SECONDS": "1",
    "WORKER_POLL_MS": "100",
}

DONE_ONCE = ("COMPENSATED", "DECISION_NO_MATCH", 1)  # status, error code, undo calls
REDONE = ("COMPENSATED", "DECISION_NO_MATCH", 2)  # the undo retried with the same key
UNCERTAIN = ("RECONCILIATION_REQUIRED", "UNCERTAIN_WRITE", 1)
# point -> effect of the undo -> (status, error code, undo calls, undo checkpoint attempt).
EXPECTED = {
    faultpoints.COMPENSATION_STARTED: {e: (*DONE_ONCE, 1) for e in UNDOS},
    faultpoints.CHECKPOINT_STARTED: {
        "READ_ONLY": (*DONE_ONCE, 2),
        "IDEMPOTENT_WRITE": (*DONE_ONCE, 2),
        # Never repeated, even an undo that was never sent: the worker cannot know.
        "NON_IDEMPOTENT_WRITE": ("RECONCILIATION_REQUIRED", "UNCERTAIN_WRITE", 0, 1),
    },
    IN_CALL: {
        "READ_ONLY": (*REDONE, 2),
        "IDEMPOTENT_WRITE": (*REDONE, 2),
        "NON_IDEMPOTENT_WRITE": (*UNCERTAIN, 1),
    },
    faultpoints.CHECKPOINT_SUCCEEDING: {
        "READ_ONLY": (*REDONE, 2),
        "IDEMPOTENT_WRITE": (*REDONE, 2),
        "NON_IDEMPOTENT_WRITE": (*UNCERTAIN, 1),
    },
    faultpoints.CHECKPOINT_SUCCEEDED: {e: (*DONE_ONCE, 1) for e in UNDOS},
    faultpoints.FINAL_UNCOMMITTED: {e: (*DONE_ONCE, 1) for e in UNDOS},
}


@pytest.fixture
def provider():
    with JsonProvider() as double:
        yield double


@pytest.fixture
def integrations(tmp_path, provider) -> str:
    path = tmp_path / "integrations.toml"
    undos = "".join(
        f'[contracts."undo.{route.strip("/")}@1"]\n'
        f'effect = "{effect}"\n'
        "max_attempts = 3\n"
        "timeout_seconds = 2\n"
        # Probes would settle an uncertain undo on their own: this matrix shows the cell itself.
        + ('auto_reconcile = "off"\n' if effect == "NON_IDEMPOTENT_WRITE" else "")
        + f'[routes."undo.{route.strip("/")}@1"]\n'
        'adapter = "http.json"\n'
        f'url = "{provider.url(route)}"\n'
        f'lookup_url = "{provider.url(route)}/by-key/{{key}}"\n'
        'method = "POST"\n\n'
        for effect, route in UNDOS.items()
    )
    path.write_text(
        '[contracts."crash.hold@1"]\neffect = "IDEMPOTENT_WRITE"\nmax_attempts = 3\n'
        'timeout_seconds = 2\n[routes."crash.hold@1"]\nadapter = "http.json"\n'
        f'url = "{provider.url("/hold")}"\nmethod = "POST"\n\n' + undos
    )
    return str(path)


def _flows(conn) -> dict[str, int]:
    flows = {}
    for effect, route in UNDOS.items():
        target = action("target", "crash.hold", input={"n": {"from": "/data/n"}})
        target["compensate"] = {
            "capability": f"undo.{route.strip('/')}",
            "version": 1,
            "input": {"held": {"from": "/actions/target"}},
        }
        definition = flow_definition(
            [target],
            key=f"undo-{route.strip('/')}",
            rules=[{"id": "never", "when": False, "target": "DONE", "outcome": "OK"}],
        )
        definition["transitions"][0]["onFailure"] = "compensate"
        flows[effect] = create_flow(conn, definition)
    return flows


@pytest.mark.parametrize("point", list(EXPECTED))
def test_compensation_crash_point__recovery_by_another_process_follows_the_table(
    point, process_env, runtime_conn, provider, integrations, tmp_path
):
    flows = _flows(runtime_conn)
    env = {**process_env, "INTEGRATIONS_FILE": integrations}
    doomed_env = {
        **env,
        "DJANGO_SETTINGS_MODULE": "orquestador.settings_test",
        "TEST_SETTINGS_ROLE": "runtime",
    }
    # A run's slot is free once its last call has answered (docs/adr/0014) and taken again when
    # the run goes on to compensate: a worker there before another had claimed could take a
    # second execution and die holding it. Each target call held for a second lets all three be
    # claimed first, one per worker.
    provider.plan("/hold", *[slow(1)] * len(UNDOS))
    if point == IN_CALL:
        for route in UNDOS.values():
            provider.plan(route, slow(30))  # held until the worker is killed
    else:
        doomed_env |= {faultpoints.POINT_ENV: point, faultpoints.ACTION_ENV: STEP}

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
            for route in UNDOS.values():
                provider.wait_for_calls(1, route, timeout=DEADLINE)
            wait_until(
                lambda: all(
                    STEP in checkpoint_rows(runtime_conn, a.execution_id) for a in accepted.values()
                ),
                timeout=DEADLINE,
                what="every undo's RUNNING checkpoint",
            )
            for worker in doomed:
                os.kill(worker.pid, signal.SIGKILL)
        for worker in doomed:
            assert worker.wait(DEADLINE) == -signal.SIGKILL, worker.output()
            if point != IN_CALL:
                assert worker.wait_for_event("fault point reached")["point"] == point
        for item in accepted.values():
            assert execution_row(runtime_conn, item.execution_id)["attempts"] == 1
    finally:
        for worker in doomed:
            worker.close()

    with WorkerProcess(env, tmp_path / "recovery.log", **WORKER):

        def settled():
            rows = [execution_row(runtime_conn, a.execution_id) for a in accepted.values()]
            return all(r["status"] in ("COMPENSATED", "RECONCILIATION_REQUIRED") for r in rows)

        wait_until(settled, timeout=DEADLINE, what="recovery of every execution")

    assert provider.calls("/hold") == 3  # each forward write ran once, never again
    for effect, item in accepted.items():
        status, code, calls, undo_attempt = EXPECTED[point][effect]
        cell = f"{point} with a {effect} undo"
        execution = execution_row(runtime_conn, item.execution_id)
        assert (execution["status"], execution["error_code"]) == (status, code), cell
        assert execution["compensation_cause"] == "DECISION_NO_MATCH", cell
        assert execution["attempts"] == 2, cell
        route = UNDOS[effect]
        assert provider.calls(route) == calls, cell
        keys = {r.headers["idempotency-key"] for r in provider.requests(route)}
        assert keys <= {f"{item.execution_id}:{STEP}"}, cell  # one key, on every attempt
        if effect != "READ_ONLY" and calls:
            assert len(provider.effects(route)) == 1, cell  # undone once, never twice
        checkpoints = checkpoint_rows(runtime_conn, item.execution_id)
        assert checkpoints[STEP]["attempt"] == undo_attempt, cell
        assert checkpoints["target"]["status"] == "SUCCEEDED", cell
        request = request_row(runtime_conn, item.request_id)
        types = [t for t, _ in audit_events(runtime_conn, item.request_id)]
        assert types.count("COMPENSATION_STARTED") == 1, cell
        if status == "COMPENSATED":
            assert checkpoints[STEP]["status"] == "SUCCEEDED", cell
            assert (request["state"], request["blocked_by_id"], request["revision"]) == (
                "DRAFT",
                None,
                2,
            ), cell
            assert types.count("EXECUTION_COMPENSATED") == 1, cell
        else:
            assert checkpoints[STEP]["status"] == "RUNNING", cell
            assert (request["state"], request["blocked_by_id"]) == ("DRAFT", item.execution_id)
            assert "EXECUTION_COMPENSATED" not in types, cell
