"""Each resolution end to end: a real runworker process loses a non-idempotent write at a
loopback provider, an operator resolves the case, and the worker (still running) finishes it."""

import pytest
from django.test import Client
from django.urls import reverse

from executions.models import ActionExecution, AuditEvent, AuditType, CheckpointStatus
from orquestador import errors
from reconciliation import services
from tests.support.providers import JsonProvider, drop
from tests.support.worker import wait_until

from .worker import (
    CHARGES,
    accept_charge,
    charged,
    registry_from,
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
    with registry_from(catalog), runworker(process_env, catalog, log) as worker:
        wait_for_reconciliation(execution, worker, log)
        assert provider.effects(CHARGES) == []
        asked = services.checkpoint_record_lookup(
            execution_id=execution.pk, action_id="charge", operator=operator
        )
        assert asked.payload["happened"] is False

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


def test_a_lost_replay__is_not_replayed_again_on_the_answer_about_the_first_attempt(
    operator, provider, catalog, process_env, tmp_path
):
    # The charge is dropped before the provider applies it; the replay is applied, then dropped.
    provider.plan(CHARGES, drop(apply=False), drop(apply=True))
    execution = accept_charge()
    log = tmp_path / "worker.log"
    client = Client()
    client.force_login(operator)
    case_url = reverse("admin:reconciliation_reconciliationcase_change", args=[execution.pk])
    with registry_from(catalog), runworker(process_env, catalog, log) as worker:
        wait_for_reconciliation(execution, worker, log)
        first = services.checkpoint_record_lookup(
            execution_id=execution.pk, action_id="charge", operator=operator
        )
        assert (first.payload["happened"], first.payload["attempt"]) == (False, 1)
        services.execution_resolve_write_not_happened(
            execution_id=execution.pk,
            action_id="charge",
            reason="The provider has no charge with this key.",
            operator=operator,
        )
        # The replay's answer is lost too: the case is back, its write at attempt 2.
        assert wait_for_finish(execution, worker, log) == "RECONCILIATION_REQUIRED"
        assert ActionExecution.objects.get(execution=execution).attempt == 2
        assert len(provider.effects(CHARGES)) == 1  # the replay went through

        page = client.get(case_url).content.decode()
        assert "not asked yet about attempt 2</span>" in page
        assert "— suggested" not in page
        with pytest.raises(services.ResolutionRefused) as refused:
            services.execution_resolve_write_not_happened(
                execution_id=execution.pk,
                action_id="charge",
                reason="The provider said it has no charge.",
                operator=operator,
            )
        assert refused.value.code == errors.RISK_NOT_CONFIRMED

        # Asked about attempt 2, the provider has the charge: recorded, never sent a third time.
        second = services.checkpoint_record_lookup(
            execution_id=execution.pk, action_id="charge", operator=operator
        )
        assert (second.payload["happened"], second.payload["attempt"]) == (True, 2)
        assert "The write happened: record" in client.get(case_url).content.decode()
        services.execution_resolve_write_happened(
            execution_id=execution.pk,
            action_id="charge",
            output=second.payload["output"],
            reason="The provider's lookup for attempt 2 shows the charge.",
            operator=operator,
        )
        assert wait_for_finish(execution, worker, log) == "SUCCEEDED", log.read_text()

    key = f"{execution.pk}:charge"
    assert _keys(provider) == [key, key]  # the lost call and the one replay, nothing more
    assert len(provider.effects(CHARGES)) == 1
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
