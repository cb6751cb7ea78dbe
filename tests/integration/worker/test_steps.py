"""Plans (executions/queue/steps.py): one definition of a protocol statement, run alike on a
synchronous and an asynchronous connection, atomic when the plan says so."""

import asyncio

import psycopg
import pytest

from executions.queue.leases import ExecutionSuperseded
from executions.queue.steps import Plan, Query, run_async, run_sync
from executions.queue.waits import wait_reach
from tests.support.worker import action, claim, enqueue, execution_row

pytestmark = pytest.mark.django_db(transaction=True)

APPROVAL = {
    "id": "w",
    "wait": {"event": "approval", "payloadSchema": {"type": "object"}, "timeoutSeconds": 60},
}


def _failing_after_a_write(execution_id):
    """An atomic plan that writes, then refuses (as a fenced write matching nothing does)."""

    def steps():
        yield Query(
            "UPDATE execution SET error_detail = 'written' WHERE id = %s",
            [execution_id],
            fetch="none",
        )
        raise ExecutionSuperseded(execution_id, step="test")

    return Plan(steps(), atomic=True)


def test_plan__atomic_rolls_its_writes_back_on_either_connection(conn, make_flow, runtime_dsn):
    accepted = enqueue(conn, make_flow([action("a", "NO_OP")]))
    with pytest.raises(ExecutionSuperseded):
        run_sync(conn, _failing_after_a_write(accepted.execution_id))

    async def on_async():
        aconn = await psycopg.AsyncConnection.connect(runtime_dsn, autocommit=True)
        async with aconn:
            await run_async(aconn, _failing_after_a_write(accepted.execution_id))

    with pytest.raises(ExecutionSuperseded):
        asyncio.run(on_async())
    assert execution_row(conn, accepted.execution_id)["error_detail"] is None


def test_plan__the_same_protocol_function_answers_alike_on_both(conn, make_flow, runtime_dsn):
    flow = make_flow([APPROVAL])
    first, second = enqueue(conn, flow), enqueue(conn, flow)
    found = {c.execution_id: c for c in claim(conn, "w", limit=2, lease_seconds=30)}

    def reach(execution_id):
        fence = found[execution_id].fence
        return wait_reach(fence=fence, action=APPROVAL, sequence=0, payload={}, tenant="acme")

    by_sync = run_sync(conn, reach(first.execution_id))

    async def on_async():
        aconn = await psycopg.AsyncConnection.connect(runtime_dsn, autocommit=True)
        async with aconn:
            return await run_async(aconn, reach(second.execution_id))

    by_async = asyncio.run(on_async())
    assert by_sync.output is None and by_async.output is None
    assert by_sync.deadline is not None and by_async.deadline is not None
    for accepted in (first, second):
        row = execution_row(conn, accepted.execution_id)
        assert (row["status"], row["lease_owner"]) == ("SUSPENDED", None)
