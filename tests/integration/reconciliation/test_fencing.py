"""A resolution is fenced: it races real worker holders (real threads, a barrier, the worker's
own fenced writes on runtime-role connections) and leaves every earlier holder locked out."""

import threading
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from django.db import connection

from executions.models import (
    ActionExecution,
    AuditEvent,
    AuditType,
    CheckpointStatus,
    Effect,
    Execution,
    ExecutionStatus,
    Request,
)
from executions.queue.claims import executions_claim
from executions.queue.finalize import execution_fail
from executions.queue.leases import ExecutionSuperseded, Fence, leases_renew
from executions.queue.steps import run_sync
from orquestador import errors
from reconciliation import services
from tests.support.worker import expire_lease, save_checkpoint, start_checkpoint

from .factories import ExecutionFactory, RequestFactory

pytestmark = pytest.mark.django_db(transaction=True)

DEADLINE = 15.0  # seconds, for any wait on a condition
OUTPUT = {"chargeId": "ch_1", "status": "paid"}


def _pending_case() -> Execution:
    request = RequestFactory()
    execution = ExecutionFactory(
        request=request, status=ExecutionStatus.PENDING, fencing_token=0, attempts=0
    )
    Request.objects.filter(pk=request.pk).update(blocked_by=execution)
    return execution


def _stale_holder_and_case(conn_a: psycopg.Connection, conn_b: psycopg.Connection) -> Fence:
    """Worker A claims and starts a non-idempotent write, then loses its lease; worker B
    reclaims, finds the write uncertain and hands the execution to an operator. Returns A's
    fence, which A still believes in."""
    execution = _pending_case()
    (claim_a,) = run_sync(conn_a, executions_claim(owner="worker-a", limit=1, lease_seconds=0.5))
    fence_a = claim_a.fence
    start_checkpoint(
        conn=conn_a,
        fence=fence_a,
        action_id="charge",
        sequence=0,
        capability="payments.charge",
        capability_version=1,
        effect=Effect.NON_IDEMPOTENT_WRITE,
        input_hash="0" * 64,
        previous_attempt=0,
    )
    expire_lease(conn_b, execution.pk)
    (claim_b,) = run_sync(conn_b, executions_claim(owner="worker-b", limit=1, lease_seconds=60))
    assert claim_b.fence.token == fence_a.token + 1
    status = run_sync(
        conn_b,
        execution_fail(
            fence=claim_b.fence,
            error_code=errors.UNCERTAIN_WRITE,
            error_detail="a non-idempotent write was left RUNNING",
            settlement=None,
            reconcile=True,
            actor="worker-b",
            payload={},
        ),
    )
    assert status == ExecutionStatus.RECONCILIATION_REQUIRED
    return fence_a


def _race(*steps: Callable[[], Any]) -> list[Any]:
    """Run each step on its own thread, released together by a barrier; results or exceptions."""
    barrier = threading.Barrier(len(steps))
    results: list[Any] = [None] * len(steps)

    def run(index: int, step: Callable[[], Any]) -> None:
        try:
            barrier.wait(timeout=DEADLINE)
            results[index] = step()
        except BaseException as exc:
            results[index] = exc
        finally:
            connection.close()  # this thread's Django connection

    threads = [threading.Thread(target=run, args=(i, s)) for i, s in enumerate(steps)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(DEADLINE)
        assert not thread.is_alive(), "a racing step did not finish"
    return results


RESOLUTIONS = {
    "happened": lambda execution_id, user: services.execution_resolve_write_happened(
        execution_id=execution_id, action_id="charge", output=OUTPUT, reason="r", operator=user
    ),
    # The fencing is under test, not the evidence: the operator confirms replaying without it.
    "not_happened": lambda execution_id, user: services.execution_resolve_write_not_happened(
        execution_id=execution_id, action_id="charge", reason="r", operator=user, confirm_risk=True
    ),
    "abandon": lambda execution_id, user: services.execution_abandon(
        execution_id=execution_id, reason="r", operator=user
    ),
}


@pytest.mark.parametrize("resolution", RESOLUTIONS)
def test_resolution_racing_a_stale_worker__fences_the_worker_out(
    operator, charge_registry, runtime_dsn, resolution
):
    with (
        psycopg.connect(runtime_dsn, autocommit=True) as conn_a,
        psycopg.connect(runtime_dsn, autocommit=True) as conn_b,
    ):
        fence_a = _stale_holder_and_case(conn_a, conn_b)
        execution_id = fence_a.execution_id
        token_in_reconciliation = Execution.objects.get(pk=execution_id).fencing_token

        # The provider answers worker A late; A saves its output as the operator resolves.
        late_save, resolved = _race(
            lambda: save_checkpoint(
                conn=conn_a, fence=fence_a, action_id="charge", attempt=1, output={"late": True}
            ),
            lambda: RESOLUTIONS[resolution](execution_id, operator),
        )

        assert isinstance(late_save, ExecutionSuperseded), late_save
        assert isinstance(resolved, services.Resolved), resolved
        execution = Execution.objects.get(pk=execution_id)
        assert execution.fencing_token == token_in_reconciliation + 1 == resolved.fencing_token
        checkpoint = ActionExecution.objects.get(execution_id=execution_id)
        assert checkpoint.output != {"late": True}
        expected = {
            "happened": CheckpointStatus.SUCCEEDED,
            "not_happened": CheckpointStatus.FAILED,
            "abandon": CheckpointStatus.RUNNING,
        }[resolution]
        assert checkpoint.status == expected

        # A's every later write still matches nothing: renewal, save, start.
        assert (
            run_sync(conn_a, leases_renew(owner="worker-a", held=[fence_a], lease_seconds=60))
            == set()
        )
        with pytest.raises(ExecutionSuperseded):
            save_checkpoint(
                conn=conn_a, fence=fence_a, action_id="charge", attempt=1, output={"late": True}
            )
        if resolution == "abandon":
            assert execution.status == ExecutionStatus.FAILED
            return

        # Requeued: the next claim runs it under a newer token still; A stays locked out even
        # now that the execution is RUNNING again.
        assert execution.status == ExecutionStatus.PENDING
        (claim_c,) = run_sync(conn_b, executions_claim(owner="worker-c", limit=1, lease_seconds=60))
        assert claim_c.fence.token == resolved.fencing_token + 1
        with pytest.raises(ExecutionSuperseded):
            save_checkpoint(
                conn=conn_a, fence=fence_a, action_id="charge", attempt=1, output={"late": True}
            )
        assert (
            run_sync(conn_a, leases_renew(owner="worker-a", held=[fence_a], lease_seconds=60))
            == set()
        )
        fence_c = claim_c.fence
        assert run_sync(
            conn_b, leases_renew(owner="worker-c", held=[fence_c], lease_seconds=60)
        ) == {(execution_id, claim_c.fence.token)}


def test_two_operators_racing__exactly_one_resolution_lands(
    operator, make_user, charge_registry, runtime_dsn
):
    second = make_user("otto", "resolve_write_not_happened", "abandon_execution")
    with (
        psycopg.connect(runtime_dsn, autocommit=True) as conn_a,
        psycopg.connect(runtime_dsn, autocommit=True) as conn_b,
    ):
        fence_a = _stale_holder_and_case(conn_a, conn_b)
    execution_id = fence_a.execution_id

    results = _race(
        lambda: RESOLUTIONS["not_happened"](execution_id, operator),
        lambda: RESOLUTIONS["abandon"](execution_id, second),
    )

    landed = [r for r in results if isinstance(r, services.Resolved)]
    refused = [r for r in results if isinstance(r, services.ResolutionRefused)]
    assert len(landed) == 1 and len(refused) == 1, results
    assert refused[0].code == errors.NOT_IN_RECONCILIATION
    events = AuditEvent.objects.filter(
        execution_id=execution_id, type=AuditType.RECONCILIATION_RESOLVED
    )
    assert [e.payload["resolution"] for e in events] == [landed[0].resolution.value]
