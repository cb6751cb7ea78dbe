"""Each resolution end to end: a real runworker process loses a non-idempotent write at a
loopback provider, an operator resolves the case, and the worker (still running) finishes it."""

import pytest

from executions.models import ActionExecution, AuditEvent, AuditType, CheckpointStatus
from reconciliation import services
from tests.support.providers import JsonProvider, drop
from tests.support.worker import wait_until

from .worker import (
    CHARGES,
    accept_charge,
    charged,
    request_of,
    runworker,
    status_of,
    wait_for_finish,
    wait_for_reconciliation,
    write_catalog,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.process]


@pytest.fixture
def provider():
    with JsonProvider(respond=charged) as double:
        yield double


@pytest.fixture
def catalog(tmp_path, provider):
    return write_catalog(tmp_path, provider)


def _keys(provider: JsonProvider) -> list[str | None]:
    return [r.headers.get("idempotency-key") for r in provider.requests(CHARGES)]


def test_write_happened__the_worker_finishes_without_calling_the_provider_again(
    operator, provider, catalog, process_env, tmp_path, charge_registry
):
    # The provider applies the charge, then drops the connection: the worker cannot know.
    provider.plan(CHARGES, drop(apply=True))
    execution = accept_charge()
    log = tmp_path / "worker.log"
    with runworker(process_env, catalog, log) as worker:
        wait_for_reconciliation(execution, worker, log)
        assert len(provider.effects(CHARGES)) == 1 and provider.calls(CHARGES) == 1

        services.execution_resolve_write_happened(
            execution_id=execution.pk,
            action_id="charge",
            output={"chargeId": "ch_1", "status": "paid"},
            reason="The provider's dashboard shows ch_1 paid for this key.",
            operator=operator,
        )
        assert wait_for_finish(execution, worker, log) == "SUCCEEDED", log.read_text()

    assert provider.calls(CHARGES) == 1  # never called again
    request = request_of(execution)
    assert request.state == "CHARGED" and request.blocked_by_id is None
    assert request.data["charge"] == {"chargeId": "ch_1", "status": "paid"}
    types = list(
        AuditEvent.objects.filter(execution=execution).order_by("id").values_list("type", flat=True)
    )
    assert types[-3:] == [
        AuditType.RECONCILIATION_REQUIRED,
        AuditType.RECONCILIATION_RESOLVED,
        AuditType.TRANSITION_COMPLETED,
    ]


def test_write_not_happened__replayed_once_with_the_same_key(
    operator, provider, catalog, process_env, tmp_path
):
    # The connection drops before the provider applies anything.
    provider.plan(CHARGES, drop(apply=False))
    execution = accept_charge()
    log = tmp_path / "worker.log"
    with runworker(process_env, catalog, log) as worker:
        wait_for_reconciliation(execution, worker, log)
        assert provider.effects(CHARGES) == []

        services.execution_resolve_write_not_happened(
            execution_id=execution.pk,
            action_id="charge",
            reason="The provider has no charge with this key.",
            operator=operator,
        )
        assert wait_for_finish(execution, worker, log) == "SUCCEEDED", log.read_text()

    key = f"{execution.pk}:charge"
    assert _keys(provider) == [key, key]  # the lost call and exactly one replay, same key
    assert len(provider.effects(CHARGES)) == 1
    checkpoint = ActionExecution.objects.get(execution=execution)
    assert checkpoint.status == CheckpointStatus.SUCCEEDED and checkpoint.attempt == 2
    assert request_of(execution).state == "CHARGED"


def test_abandon__fails_and_releases_the_request_and_the_worker_leaves_it(
    operator, provider, catalog, process_env, tmp_path
):
    provider.plan(CHARGES, drop(apply=True))
    execution = accept_charge()
    log = tmp_path / "worker.log"
    with runworker(process_env, catalog, log) as worker:
        wait_for_reconciliation(execution, worker, log)
        before = request_of(execution)

        services.execution_abandon(
            execution_id=execution.pk, reason="Refunded by hand; order closed.", operator=operator
        )
        # The worker keeps running; an abandoned execution is nothing it may claim.
        assert worker.poll() is None

    assert status_of(execution.pk) == "FAILED"
    request = request_of(execution)
    assert request.blocked_by_id is None
    assert (request.state, request.revision, request.data) == (
        before.state,
        before.revision,
        before.data,
    )
    assert provider.calls(CHARGES) == 1


def test_prober__settles_an_applied_write_with_nobody_paged(provider, process_env, tmp_path):
    # The provider applies the charge and drops the connection; runworker's prober asks it by
    # key, finds the charge and resolves the case itself; the worker finishes without a repeat.
    catalog = write_catalog(tmp_path, provider, auto_reconcile="found")
    provider.plan(CHARGES, drop(apply=True))
    execution = accept_charge()
    log = tmp_path / "worker.log"
    with runworker(process_env, catalog, log):
        wait_until(
            lambda: status_of(execution.pk) == "SUCCEEDED",
            timeout=60,
            what=f"the prober to settle the case and the worker to finish it:\n{log}",
        )
    assert provider.calls(CHARGES) == 1  # the charge was never sent again
    resolved = AuditEvent.objects.get(execution=execution, type=AuditType.RECONCILIATION_RESOLVED)
    assert (resolved.actor, resolved.payload["resolution"]) == ("system:prober", "WRITE_HAPPENED")
    assert request_of(execution).state == "CHARGED"
