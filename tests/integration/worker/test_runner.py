"""One execution run end to end against real PostgreSQL: actions, checkpoints, finalisation."""

import pytest

from tests.support.worker import (
    ScriptedAdapter,
    action,
    audit_events,
    binding,
    checkpoint_rows,
    enqueue,
    execution_row,
    registry,
    request_row,
    run_next,
    runtime_for,
)

pytestmark = pytest.mark.django_db(transaction=True)


def test_run__one_no_op_action_completes_and_releases_the_request(conn, make_flow, runtime_dsn):
    flow_id = make_flow([action("check", "NO_OP", input={"x": {"from": "/data/x"}})])
    accepted = enqueue(conn, flow_id, data={"x": 1})
    with runtime_for(runtime_dsn, registry()) as runtime:
        result = run_next(conn, runtime)

    assert result.status == "completed"
    execution = execution_row(conn, accepted.execution_id)
    assert execution["status"] == "SUCCEEDED"
    assert execution["result"] == {"outcome": "OK", "targetState": "DONE"}
    assert execution["lease_owner"] is None and execution["finished_at"] is not None
    request = request_row(conn, accepted.request_id)
    assert request["state"] == "DONE"
    assert request["data"] == {"x": 1, "done": True}
    assert (request["revision"], request["version"], request["blocked_by_id"]) == (3, 3, None)
    checkpoint = checkpoint_rows(conn, accepted.execution_id)["check"]
    assert checkpoint["status"] == "SUCCEEDED"
    assert checkpoint["external_key"] == f"{accepted.execution_id}:check"
    assert checkpoint["attempt"] == 1 and checkpoint["effect"] == "READ_ONLY"
    assert audit_events(conn, accepted.request_id)[-1] == (
        "TRANSITION_COMPLETED",
        {"transitionId": "go", "actionIds": ["check"], "hitPolicy": "FIRST", "ruleIds": ["always"]},
    )


def test_run__later_actions_see_earlier_outputs(conn, make_flow, runtime_dsn):
    first = ScriptedAdapter(default=__import__("tests.support.worker").support.worker.ok({"n": 41}))
    second = ScriptedAdapter()
    flow_id = make_flow(
        [
            action("a", "A"),
            action("b", "B", input={"n": {"from": "/actions/a/n"}}),
        ]
    )
    accepted = enqueue(conn, flow_id)
    with runtime_for(runtime_dsn, registry(binding("A", first), binding("B", second))) as rt:
        assert run_next(conn, rt).status == "completed"
    assert second.calls[0].input == {"n": 41}
    assert execution_row(conn, accepted.execution_id)["status"] == "SUCCEEDED"
