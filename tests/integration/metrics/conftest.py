"""Fixtures of the metrics tests: a runtime-role connection and a flow factory."""

import pytest

from tests.support.worker import action, create_flow, enqueue, flow_definition


@pytest.fixture
def conn(runtime_conn):
    """A runtime-role connection (autocommit), the role the web and worker processes run as."""
    return runtime_conn


@pytest.fixture
def make_flow(conn):
    """Publish a one-transition flow running these actions; return its id."""
    counter = iter(range(1, 1000))

    def make(actions, **kwargs):
        kwargs.setdefault("version", next(counter))
        return create_flow(conn, flow_definition(actions, **kwargs))

    return make


def set_due(conn, accepted, *, status: str, seconds: float) -> None:
    """Put an execution in `status`, due `seconds` from now by the database clock (negative:
    overdue). A RUNNING one gets a lease that ends then, as a claim would leave it."""
    lease = status == "RUNNING"
    conn.execute(
        "UPDATE execution AS e SET status = %(status)s, next_attempt_at = t.at, "
        "lease_expires_at = CASE WHEN %(lease)s THEN t.at END, "
        "lease_owner = CASE WHEN %(lease)s THEN 'host-x:4242:abcd1234' END "
        "FROM (SELECT clock_timestamp() + make_interval(secs => %(seconds)s) AS at) AS t "
        "WHERE e.id = %(id)s",
        {"status": status, "seconds": seconds, "lease": lease, "id": accepted.execution_id},
    )


@pytest.fixture
def shaped_queue(conn, make_flow):
    """Six accepted executions, one of each shape the metrics tell apart:
    PENDING 90 s overdue; RETRY_WAIT due in an hour; RETRY_WAIT 5 s overdue; RUNNING with a
    live lease; RUNNING whose lease expired 30 s ago; RECONCILIATION_REQUIRED, an hour old."""
    flow_id = make_flow([action("a", "NO_OP")])
    made = {
        name: enqueue(conn, flow_id)
        for name in ("pending", "later", "retry", "held", "expired", "operator")
    }
    set_due(conn, made["pending"], status="PENDING", seconds=-90)
    set_due(conn, made["later"], status="RETRY_WAIT", seconds=3600)
    set_due(conn, made["retry"], status="RETRY_WAIT", seconds=-5)
    set_due(conn, made["held"], status="RUNNING", seconds=3600)
    set_due(conn, made["expired"], status="RUNNING", seconds=-30)
    conn.execute(
        "UPDATE execution SET status = 'RECONCILIATION_REQUIRED', "
        "created_at = clock_timestamp() - interval '1 hour' WHERE id = %s",
        [made["operator"].execution_id],
    )
    return made
