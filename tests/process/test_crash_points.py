"""The crash-point matrix: a runworker dies by SIGKILL at each persistence boundary, for each
effect class, and another process recovers the execution by the rules of
docs/worker-protocol.md#recovery.

Each round arms one point (executions/queue/faultpoints.py, reachable only under settings_test.py)
in three doomed workers of one slot each, enqueues three executions (one per effect class: the first
action `target` calls the loopback provider through http.json, a NO_OP follows), and waits until
each doomed worker has killed itself at that point. The point "in the adapter call" needs no hook:
the provider holds the call and the test SIGKILLs the workers. A recovery worker then takes every
execution over after its lease expires. For every cell the test asserts the final status, the error
code, the attempts, the target checkpoint's attempt, the provider's call count and the audit trail
(the rounds themselves: tests/support/crashpoints.py). docs/crash-points.md is the same table in
words.
"""

import pytest

from executions.queue import faultpoints
from tests.support.crashpoints import IN_CALL, crash_then_recover, declared
from tests.support.providers import JsonProvider, slow
from tests.support.worker import (
    action,
    audit_events,
    checkpoint_rows,
    create_flow,
    execution_row,
    flow_definition,
    request_row,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.process]

EFFECTS = {"READ_ONLY": "/read", "IDEMPOTENT_WRITE": "/idem", "NON_IDEMPOTENT_WRITE": "/charge"}

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
            declared(f"crash.{route.strip('/')}", effect, provider.url(route))
            for effect, route in EFFECTS.items()
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
    if point != IN_CALL:
        # A slot is free once its last call has answered (docs/adr/0014), before a save or
        # final point kills the process: a worker that got there before another had claimed
        # could take a second execution and die holding it. Each first call held for a second lets
        # all three be claimed first, one per worker.
        for route in EFFECTS.values():
            provider.plan(route, slow(1))
    accepted = crash_then_recover(
        point,
        step="target",
        routes=list(EFFECTS.values()),
        flows=_flows(runtime_conn),
        env={**process_env, "INTEGRATIONS_FILE": integrations},
        conn=runtime_conn,
        provider=provider,
        logs=tmp_path,
        ends=("SUCCEEDED", "RECONCILIATION_REQUIRED"),
    )

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
