"""purgehistory takes an execution's webhook events and deliveries with it once every delivery
is settled, and leaves an execution alone while one of its deliveries is still on its way."""

import pytest

from executions.queue.history import history_purge

from .conftest import deliveries, end, subscribe

pytestmark = pytest.mark.django_db(transaction=True)


def test_purge__removes_settled_deliveries_and_keeps_pending_ones(runtime_conn, accepted):
    hook = subscribe("https://hooks.example.com/a", ["execution.failed"])
    settled, pending = accepted(), accepted()
    for execution_id in (settled, pending):
        end(runtime_conn, execution_id, "FAILED")
    runtime_conn.execute(
        "UPDATE execution SET finished_at = now() - interval '40 days' WHERE id = ANY(%s)",
        [[settled, pending]],
    )
    runtime_conn.execute(
        "UPDATE webhook_delivery SET status = 'DELIVERED' WHERE execution_id = %s", [settled]
    )
    result = history_purge(older_than_days=30, pause_seconds=0)
    assert result.executions == 1
    assert [d["execution_id"] for d in deliveries(runtime_conn, hook.id)] == [pending]
    left = runtime_conn.execute("SELECT execution_id FROM webhook_event").fetchall()
    assert left == [(pending,)]
    purged = runtime_conn.execute("SELECT id FROM execution WHERE purged_at IS NOT NULL").fetchall()
    assert purged == [(settled,)]
