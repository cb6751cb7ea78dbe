"""Lease renewal against real PostgreSQL: exact holder only, batched, never reviving."""

import dataclasses

import pytest

from executions.queue.leases import Fence, leases_renew
from executions.queue.steps import run_sync
from tests.support.worker import action, claim, enqueue, execution_row, expire_lease

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def flow_id(make_flow):
    return make_flow([action("a", "NO_OP")])


def _lease(conn, execution_id):
    return execution_row(conn, execution_id)["lease_expires_at"]


def test_renew__extends_a_held_lease_from_the_database_clock(conn, flow_id):
    accepted = enqueue(conn, flow_id)
    (found,) = claim(conn, "worker-a", lease_seconds=2)
    before = _lease(conn, accepted.execution_id)

    renewed = run_sync(conn, leases_renew(owner="worker-a", held=[found.fence], lease_seconds=30))

    assert renewed == {(accepted.execution_id, 1)}
    row = execution_row(conn, accepted.execution_id)
    assert row["lease_expires_at"].timestamp() >= before.timestamp() + 27
    assert row["next_attempt_at"] == row["lease_expires_at"]  # one index for leases and work


@pytest.mark.parametrize("wrong", ["token", "owner", "request_id", "execution_id"])
def test_renew__needs_the_exact_holder(conn, flow_id, wrong):
    accepted = enqueue(conn, flow_id)
    other = enqueue(conn, flow_id)
    (found,) = claim(conn, "worker-a")
    fence = found.fence
    bad = {
        "token": dataclasses.replace(fence, token=fence.token + 1),
        "owner": dataclasses.replace(fence, owner="worker-b"),
        "request_id": dataclasses.replace(fence, request_id=other.request_id),
        "execution_id": dataclasses.replace(fence, execution_id=other.execution_id),
    }[wrong]
    before = _lease(conn, accepted.execution_id)

    assert run_sync(conn, leases_renew(owner=bad.owner, held=[bad], lease_seconds=30)) == set()
    assert _lease(conn, accepted.execution_id) == before


def test_renew__an_expired_lease_does_not_revive(conn, flow_id):
    accepted = enqueue(conn, flow_id)
    (found,) = claim(conn, "worker-a", lease_seconds=0.2)
    expire_lease(conn, accepted.execution_id)
    before = _lease(conn, accepted.execution_id)

    renewed = run_sync(conn, leases_renew(owner="worker-a", held=[found.fence], lease_seconds=30))

    assert renewed == set()
    row = execution_row(conn, accepted.execution_id)
    assert (row["status"], row["lease_expires_at"], row["lease_valid"]) == (
        "RUNNING",
        before,
        False,
    )
    # The only way back is a claim, which takes a new token.
    (again,) = claim(conn, "worker-a")
    assert again.fence.token == found.fence.token + 1


def test_renew__batches_every_held_lease_and_reports_the_lost_ones(conn, flow_id):
    ids = [enqueue(conn, flow_id).execution_id for _ in range(3)]
    found = claim(conn, "worker-a", limit=3, lease_seconds=5)
    fences = [c.fence for c in found]
    # Someone else took the second one (a cancellation or a reclaim bumps its token).
    conn.execute("UPDATE execution SET fencing_token = fencing_token + 1 WHERE id = %s", [ids[1]])

    renewed = run_sync(conn, leases_renew(owner="worker-a", held=fences, lease_seconds=30))

    assert renewed == {(ids[0], 1), (ids[2], 1)}


def test_renew__of_nothing_sends_nothing(conn):
    assert run_sync(conn, leases_renew(owner="worker-a", held=[], lease_seconds=30)) == set()


def test_fence__carries_the_four_holder_coordinates(conn, flow_id):
    accepted = enqueue(conn, flow_id)
    (found,) = claim(conn, "worker-a")
    assert found.fence == Fence(accepted.execution_id, accepted.request_id, 1, "worker-a")
