"""WORKER_FAIRNESS=tenant with a real runworker: one tenant's backlog never holds another
tenant's request back for more than the claim that comes next.

Tenant A's backlog runs through a worker of four slots; tenant B's single request, accepted
while most of the backlog still waits, is claimed before all but at most one claim's worth of
A's executions that were waiting when it came. In queue order it would wait for all of them.
"""

import pytest

from tests.support.worker import (
    WorkerProcess,
    action,
    create_flow,
    enqueue,
    execution_row,
    flow_definition,
    wait_until,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.process]

TIMEOUT = 60.0  # seconds for the backlog to drain
SLOTS = 4
BACKLOG = 200
NAP_SECONDS = 0.05  # each execution's one action

# A's executions claimed after B was accepted and before B was.
PASSED_B = """
SELECT count(*) FILTER (WHERE a.started_at > b.created_at AND a.started_at < b.started_at),
       count(*) FILTER (WHERE a.started_at > b.started_at)
  FROM execution AS a, execution AS b
 WHERE a.scope = 'tenant-a' AND b.id = %s
"""


def test_tenant_fairness__a_new_tenant_is_claimed_ahead_of_a_backlog(
    process_env, runtime_conn, tmp_path
):
    flow = create_flow(
        runtime_conn,
        flow_definition([action("nap", "SIM_SLEEP", input={"seconds": NAP_SECONDS})], key="fair"),
    )
    backlog = [enqueue(runtime_conn, flow, scope="tenant-a").execution_id for _ in range(BACKLOG)]
    settings = {
        "WORKER_FAIRNESS": "tenant",
        "WORKER_CONCURRENCY": str(SLOTS),
        "WORKER_BATCH": str(SLOTS),
        "WORKER_LEASE_SECONDS": "10",
        "WORKER_RENEW_SECONDS": "2",
        "LOG_LEVEL": "WARNING",
    }
    with WorkerProcess(process_env, tmp_path / "worker.log", **settings) as worker:
        wait_until(
            lambda: runtime_conn.execute(
                "SELECT count(*) >= 20 FROM execution WHERE scope = 'tenant-a' "
                "AND status = 'SUCCEEDED'"
            ).fetchone()[0],
            timeout=TIMEOUT,
            what="the backlog to be under way",
        )
        late = enqueue(runtime_conn, flow, scope="tenant-b").execution_id
        wait_until(
            lambda: all(
                execution_row(runtime_conn, e)["status"] == "SUCCEEDED" for e in [late, *backlog]
            ),
            timeout=TIMEOUT,
            what="every execution to finish",
        )
        assert worker.process.poll() is None, worker.output()
    passed, after = runtime_conn.execute(PASSED_B, [late]).fetchone()
    assert passed <= SLOTS, passed  # at most the claim already under way
    assert after >= BACKLOG // 2, after  # most of the backlog was still waiting behind it
