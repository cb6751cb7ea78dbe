"""The claim statement against real PostgreSQL: SKIP LOCKED, order, due work, the lease clock."""

import datetime
import threading

import psycopg
import pytest

from executions import sql
from tests.support.worker import (
    action,
    audit_events,
    claim,
    enqueue,
    execution_row,
    expire_lease,
)

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def flow_id(make_flow):
    return make_flow([action("a", "NO_OP")])


def test_claim__concurrent_claimers_never_share_an_execution(conn, flow_id, runtime_dsn):
    accepted = {enqueue(conn, flow_id, notify=False).execution_id for _ in range(60)}
    claimers = 6
    barrier = threading.Barrier(claimers)
    taken: list[list] = [[] for _ in range(claimers)]
    failures: list[BaseException] = []

    def claimer(index: int) -> None:
        try:
            with psycopg.connect(runtime_dsn, autocommit=True) as own:
                barrier.wait(timeout=10)
                while found := claim(own, f"claimer-{index}", limit=3):
                    taken[index].extend(c.execution_id for c in found)
        except BaseException as exc:  # reported below, in the test's thread
            failures.append(exc)

    threads = [threading.Thread(target=claimer, args=(i,)) for i in range(claimers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert not failures
    everything = [eid for ids in taken for eid in ids]
    assert len(everything) == len(set(everything)) == 60  # nobody shared, nothing was lost
    assert set(everything) == accepted
    assert sum(1 for ids in taken if ids) > 1  # the claimers really did run side by side
    tokens = conn.execute(
        "SELECT DISTINCT fencing_token, attempts FROM execution WHERE id = ANY(%s)",
        [list(accepted)],
    ).fetchall()
    assert tokens == [(1, 1)]


def test_claim__skip_locked_passes_a_locked_row(conn, flow_id, runtime_dsn):
    first = enqueue(conn, flow_id).execution_id
    second = enqueue(conn, flow_id).execution_id
    with psycopg.connect(runtime_dsn) as locker:  # holds its transaction open
        locker.execute("SELECT 1 FROM execution WHERE id = %s FOR UPDATE", [first])
        conn.execute("SET statement_timeout = '5s'")  # a claim that waited would fail here
        found = claim(conn, "worker-a", limit=2)
        assert [c.execution_id for c in found] == [second]
        locker.rollback()
    found = claim(conn, "worker-a", limit=2)
    assert [c.execution_id for c in found] == [first]


def test_claim__takes_the_oldest_due_first_and_no_more_than_the_limit(conn, flow_id):
    ids = [enqueue(conn, flow_id).execution_id for _ in range(3)]
    found = claim(conn, "worker-a", limit=2)
    assert [c.execution_id for c in found] == ids[:2]
    assert execution_row(conn, ids[2])["status"] == "PENDING"


def test_claim__sets_lease_from_the_database_clock_and_bumps_attempts_and_token(conn, flow_id):
    accepted = enqueue(conn, flow_id)
    before = conn.execute("SELECT clock_timestamp()").fetchone()[0]
    (found,) = claim(conn, "worker-a", lease_seconds=30)
    after = conn.execute("SELECT clock_timestamp()").fetchone()[0]

    row = execution_row(conn, accepted.execution_id)
    assert row["status"] == "RUNNING"
    assert (row["attempts"], row["fencing_token"]) == (1, 1) == (found.attempts, found.fence.token)
    assert row["lease_owner"] == "worker-a"
    assert row["next_attempt_at"] == row["lease_expires_at"]
    lease = row["lease_expires_at"]
    assert before.timestamp() + 30 <= lease.timestamp() <= after.timestamp() + 30
    assert before <= row["started_at"] <= after
    assert (found.fence.request_id, found.transition_id) == (accepted.request_id, "go")


def test_claim__takes_due_retries_and_expired_leases_but_nothing_else(conn, flow_id):
    # Two executions claimed by another worker; only the second one's lease runs out.
    held = enqueue(conn, flow_id).execution_id
    expired = enqueue(conn, flow_id).execution_id
    assert [c.execution_id for c in claim(conn, "other", lease_seconds=60)] == [held]
    assert [c.execution_id for c in claim(conn, "other", lease_seconds=0.2)] == [expired]
    later = enqueue(conn, flow_id).execution_id
    due = enqueue(conn, flow_id).execution_id
    ended = [enqueue(conn, flow_id).execution_id for _ in range(4)]
    conn.execute(
        "UPDATE execution SET status = 'RETRY_WAIT', "
        "next_attempt_at = clock_timestamp() + interval '1 hour' WHERE id = %s",
        [later],
    )
    conn.execute(
        "UPDATE execution SET status = 'RETRY_WAIT', "
        "next_attempt_at = clock_timestamp() - interval '1 second' WHERE id = %s",
        [due],
    )
    for eid, status in zip(
        ended, ("SUCCEEDED", "FAILED", "CANCELLED", "RECONCILIATION_REQUIRED"), strict=True
    ):
        conn.execute(
            "UPDATE execution SET status = %s, finished_at = now() WHERE id = %s", [status, eid]
        )
    expire_lease(conn, expired)

    found = {c.execution_id: c for c in claim(conn, "worker-a", limit=10)}
    assert set(found) == {due, expired}
    assert (found[expired].fence.token, found[expired].attempts) == (2, 2)  # a takeover fences
    assert execution_row(conn, expired)["lease_owner"] == "worker-a"
    assert execution_row(conn, held)["lease_owner"] == "other"
    assert execution_row(conn, later)["status"] == "RETRY_WAIT"


def test_claim__reads_the_partial_claim_index(conn, flow_id):
    for _ in range(3):
        enqueue(conn, flow_id)
    with conn.transaction():
        # As the claiming connection plans it (sql.WORKER_SCANS, sql.CLAIM_SESSION): with sorts
        # allowed, statistics left by earlier tests could make a sort look cheaper.
        conn.execute("SET LOCAL enable_seqscan = off")
        conn.execute("SET LOCAL enable_sort = off")
        plan = conn.execute(
            "EXPLAIN " + sql.CLAIM_EXECUTIONS,
            {"owner": "x", "limit": 10, "lease_seconds": 60, "outage": False},
        ).fetchall()
    text = "\n".join(row[0] for row in plan)
    assert "execution_claim_idx" in text
    assert "Sort" not in text  # the index already gives claim order


def test_claim__takes_a_suspended_execution_only_once_its_deadline_passed(conn, flow_id):
    waiting = enqueue(conn, flow_id).execution_id
    timed_out = enqueue(conn, flow_id).execution_id
    conn.execute(
        "UPDATE execution SET status = 'SUSPENDED', next_attempt_at = clock_timestamp() + "
        "CASE WHEN id = %s THEN interval '1 hour' ELSE interval '-1 second' END "
        "WHERE id IN (%s, %s)",
        [waiting, waiting, timed_out],
    )

    found = claim(conn, "worker-a", limit=5)

    assert [c.execution_id for c in found] == [timed_out]
    assert (found[0].fence.token, found[0].attempts) == (1, 1)
    assert execution_row(conn, waiting)["status"] == "SUSPENDED"


def test_checkpoint_statuses__include_waiting_and_accepted(conn, flow_id):
    accepted = enqueue(conn, flow_id).execution_id
    for sequence, status in enumerate(("WAITING", "ACCEPTED")):
        conn.execute(
            "INSERT INTO action_execution (execution_id, action_id, sequence, capability, "
            "capability_version, effect, status, input_hash, external_key, fencing_token) "
            "VALUES (%s, %s, %s, 'c', 1, 'READ_ONLY', %s, 'h', 'k', 1)",
            [accepted, f"a{sequence}", sequence, status],
        )
    with pytest.raises(psycopg.errors.CheckViolation):
        conn.execute(
            "INSERT INTO action_execution (execution_id, action_id, sequence, capability, "
            "capability_version, effect, status, input_hash, external_key, fencing_token) "
            "VALUES (%s, 'x', 9, 'c', 1, 'READ_ONLY', 'SLEEPING', 'h', 'k', 1)",
            [accepted],
        )


def test_claim__a_takeover_of_an_expired_lease_is_audited_and_an_ordinary_claim_is_not(
    conn, flow_id
):
    taken = enqueue(conn, flow_id)
    (first,) = claim(conn, "worker-old", limit=1, lease_seconds=0.2)
    fresh = enqueue(conn, flow_id)
    expire_lease(conn, taken.execution_id)
    expired_at = execution_row(conn, taken.execution_id)["lease_expires_at"]

    found = {c.execution_id: c for c in claim(conn, "worker-new", limit=10)}

    assert found[taken.execution_id].taken_over
    assert not found[fresh.execution_id].taken_over
    assert "LEASE_TAKEN_OVER" not in [t for t, _ in audit_events(conn, fresh.request_id)]
    (event,) = [p for t, p in audit_events(conn, taken.request_id) if t == "LEASE_TAKEN_OVER"]
    assert event["previousOwner"] == "worker-old"
    assert event["previousToken"] == first.fence.token == 1
    assert event["newOwner"] == "worker-new"
    assert event["newToken"] == found[taken.execution_id].fence.token == 2
    assert event["attempt"] == 2
    assert datetime.datetime.fromisoformat(event["leaseExpiredAt"]) == expired_at
    (actor,) = conn.execute(
        "SELECT actor FROM audit_event WHERE type = 'LEASE_TAKEN_OVER' AND execution_id = %s",
        [taken.execution_id],
    ).fetchone()
    assert actor == "system:worker"
