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
that the request is released as it was (or still blocked, for an uncertain undo). The rounds
themselves: tests/support/crashpoints.py.
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

STEP = "target:compensate"
UNDOS = {
    "READ_ONLY": "/undo-read",
    "IDEMPOTENT_WRITE": "/undo-idem",
    "NON_IDEMPOTENT_WRITE": "/undo-charge",
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
        declared(
            f"undo.{route.strip('/')}",
            effect,
            provider.url(route),
            # Probes would settle an uncertain undo on their own: this matrix shows the cell itself.
            contract='auto_reconcile = "off"\n' if effect == "NON_IDEMPOTENT_WRITE" else "",
            route=f'lookup_url = "{provider.url(route)}/by-key/{{key}}"\n',
        )
        for effect, route in UNDOS.items()
    )
    path.write_text(declared("crash.hold", "IDEMPOTENT_WRITE", provider.url("/hold")) + undos)
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
    # A run's slot is free once its last call has answered (docs/adr/0014) and taken again when
    # the run goes on to compensate: a worker there before another had claimed could take a
    # second execution and die holding it. Each target call held for a second lets all three be
    # claimed first, one per worker.
    provider.plan("/hold", *[slow(1)] * len(UNDOS))
    accepted = crash_then_recover(
        point,
        step=STEP,
        routes=list(UNDOS.values()),
        flows=_flows(runtime_conn),
        env={**process_env, "INTEGRATIONS_FILE": integrations},
        conn=runtime_conn,
        provider=provider,
        logs=tmp_path,
        ends=("COMPENSATED", "RECONCILIATION_REQUIRED"),
    )

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
