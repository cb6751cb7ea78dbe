"""Automatic provider probes against a real provider on loopback: the schedule, the evidence
recorded by system:prober, automatic resolutions through the operators' fenced services, the
two-person rule, and that two probers, or a prober and an operator, never resolve a case twice."""

import threading

import pytest
import requests
from django.db import OperationalError, connection
from django.utils import timezone
from psycopg.pq import TransactionStatus

from actions.catalog import parse_catalog
from actions.registry import ADAPTERS, build_registry, use_registry
from executions.models import (
    ActionExecution,
    AuditEvent,
    AuditType,
    CheckpointStatus,
    Execution,
    ExecutionStatus,
)
from executions.worker.loops import worker_loops
from executions.worker.metrics import AUTO_RESOLUTIONS, PROBES, WorkerMetrics
from reconciliation import prober, probes, services
from reconciliation.models import CaseProbe
from tests.support.providers import JsonProvider
from tests.support.worker import registry, runtime_for

from .conftest import charge_catalog
from .factories import CheckpointFactory, reconciliation_case
from .worker import CHARGES, charged


def test_prober__registered_as_a_worker_loop():
    """runworker starts the loops the apps registered; reconciliation's ready() registers the
    prober, so the worker runs it without executions importing reconciliation."""
    assert worker_loops().count(prober.Prober) == 1


def test_probe_offsets__the_schedule_cut_and_compressed_to_the_window():
    assert probes.probe_offsets(900) == [1, 5, 30, 120, 600, 900]
    assert probes.probe_offsets(60) == [1, 5, 30, 60]
    assert probes.probe_offsets(10) == [1, 5, 10]
    assert probes.probe_offsets(5) == pytest.approx([5 / 3, 10 / 3, 5])


@pytest.fixture
def provider():
    with JsonProvider(respond=charged) as server:
        yield server


def _catalog(document):
    return parse_catalog(document, adapters=ADAPTERS, lease_seconds=60, environ={})


def _registry(provider, **options):
    document = charge_catalog(provider.url(CHARGES))
    document["contracts"]["payments.charge@1"].update(options)
    return use_registry(build_registry(_catalog(document)))


def _charge_applied(provider, case: Execution) -> None:
    """The provider applied the lost call: it has a charge under the case's external key."""
    requests.post(
        provider.url(CHARGES),
        json={"amount": 42},
        headers={"Idempotency-Key": f"{case.pk}:charge"},
        timeout=5,
    )


def _due_now() -> None:
    """Fast-forward: every unfinished probe is due."""
    CaseProbe.objects.filter(finished_at__isnull=True).update(next_probe_at=timezone.now())


def _by_prober(type_: str) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(type=type_, actor=probes.PROBER).order_by("id"))


@pytest.mark.django_db
def test_found__resolved_write_happened_by_the_prober(provider):
    case = reconciliation_case()
    _charge_applied(provider, case)
    with _registry(provider):
        assert probes.probes_run_once(owner="w1") == 1
    checkpoint = ActionExecution.objects.get(execution=case)
    assert checkpoint.status == CheckpointStatus.SUCCEEDED and checkpoint.output["status"] == "paid"
    assert Execution.objects.get(pk=case.pk).status == ExecutionStatus.PENDING
    (evidence,) = _by_prober(AuditType.RECONCILIATION_EVIDENCE)
    assert evidence.payload["happened"] is True and evidence.payload["probe"] == 1
    (resolved,) = _by_prober(AuditType.RECONCILIATION_RESOLVED)
    assert resolved.payload["resolution"] == "WRITE_HAPPENED"
    assert resolved.payload["evidence"]["lookup"]["auditEventId"] == evidence.pk
    assert CaseProbe.objects.get().outcome == "resolved-happened"


@pytest.mark.django_db
def test_not_found__records_and_waits_for_the_next_probe(provider):
    case = reconciliation_case()
    with _registry(provider):
        probes.probes_run_once(owner="w1")
    probe = CaseProbe.objects.get()
    assert (probe.probes, probe.finished_at, probe.lease_owner) == (1, None, None)
    assert (probe.next_probe_at - probe.opened_at).total_seconds() == pytest.approx(5)
    assert _by_prober(AuditType.RECONCILIATION_EVIDENCE)[0].payload["happened"] is False
    assert Execution.objects.get(pk=case.pk).status == ExecutionStatus.RECONCILIATION_REQUIRED
    assert _by_prober(AuditType.RECONCILIATION_RESOLVED) == []


@pytest.mark.django_db
def test_absent_on_every_probe__authoritative__one_replay(provider):
    case = reconciliation_case()
    options = {
        "auto_reconcile": "found-or-absent",
        "lookup_authoritative": True,
        "probe_window_seconds": 5,
    }
    with _registry(provider, **options):
        for number in (1, 2):
            probes.probes_run_once(owner="w1")
            assert Execution.objects.get(pk=case.pk).status == "RECONCILIATION_REQUIRED", number
            _due_now()
        probes.probes_run_once(owner="w1")  # the third, at the window's end
    checkpoint = ActionExecution.objects.get(execution=case)
    assert (checkpoint.status, checkpoint.error_code) == ("FAILED", "REPLAY_AUTHORIZED")
    (resolved,) = _by_prober(AuditType.RECONCILIATION_RESOLVED)
    assert resolved.payload["resolution"] == "WRITE_NOT_HAPPENED"
    assert len(_by_prober(AuditType.RECONCILIATION_EVIDENCE)) == 3


@pytest.mark.django_db
@pytest.mark.parametrize(
    "options",
    [
        {"auto_reconcile": "found-or-absent", "probe_window_seconds": 5},  # not authoritative
        {"auto_reconcile": "found", "lookup_authoritative": True, "probe_window_seconds": 5},
    ],
)
def test_absent__without_authority_to_replay__waits_for_a_person(provider, options):
    case = reconciliation_case()
    with _registry(provider, **options):
        for _ in range(3):
            probes.probes_run_once(owner="w1")
            _due_now()
    assert Execution.objects.get(pk=case.pk).status == ExecutionStatus.RECONCILIATION_REQUIRED
    assert CaseProbe.objects.get().outcome == "exhausted"
    assert len(_by_prober(AuditType.RECONCILIATION_EVIDENCE)) == 3


@pytest.mark.django_db
def test_two_person_rule__the_prober_never_replays(provider, settings):
    settings.RECONCILIATION_TWO_PERSON = True
    case = reconciliation_case()
    options = {
        "auto_reconcile": "found-or-absent",
        "lookup_authoritative": True,
        "probe_window_seconds": 5,
    }
    with _registry(provider, **options):
        for _ in range(3):
            probes.probes_run_once(owner="w1")
            _due_now()
    assert Execution.objects.get(pk=case.pk).status == ExecutionStatus.RECONCILIATION_REQUIRED
    assert _by_prober(AuditType.RECONCILIATION_RESOLVED) == []


@pytest.mark.django_db
def test_auto_reconcile_off__asks_nobody(provider):
    reconciliation_case()
    with _registry(provider, auto_reconcile="off"):
        probes.probes_run_once(owner="w1")
    assert provider.requests() == []
    assert CaseProbe.objects.get().outcome == "no-lookup"


@pytest.mark.django_db
def test_an_operator_who_resolved_first__the_probe_closes_without_writing(provider, operator):
    case = reconciliation_case()
    _charge_applied(provider, case)
    with _registry(provider):
        probes.probes_enlist()
        (claimed,) = probes.probes_claim(owner="w1")
        services.execution_abandon(execution_id=case.pk, reason="by hand", operator=operator)
        assert probes.probe_one(claimed, owner="w1", two_person=False) == "closed"
    assert [e.actor for e in AuditEvent.objects.filter(type="RECONCILIATION_RESOLVED")] == ["olga"]
    assert _by_prober(AuditType.RECONCILIATION_EVIDENCE) == []


@pytest.mark.django_db
def test_a_crash_between_the_answer_and_the_resolution__undoes_both(provider, monkeypatch):
    """A probe is never finished as resolved while its case stays open: the answer and the
    resolution commit together, so a lost connection between them leaves the probe to run again."""
    case = reconciliation_case()
    _charge_applied(provider, case)

    def connection_lost(**kwargs):
        raise OperationalError("server closed the connection unexpectedly")

    with _registry(provider):
        probes.probes_enlist()
        (claimed,) = probes.probes_claim(owner="w1")
        with monkeypatch.context() as patch:
            patch.setattr(services, "execution_resolve_write_happened", connection_lost)
            with pytest.raises(OperationalError):
                probes.probe_one(claimed, owner="w1", two_person=False)
        probe = CaseProbe.objects.get()
        assert (probe.finished_at, probe.outcome, probe.probes) == (None, "", 0)
        assert _by_prober(AuditType.RECONCILIATION_EVIDENCE) == []
        assert Execution.objects.get(pk=case.pk).status == "RECONCILIATION_REQUIRED"

        CaseProbe.objects.update(lease_expires_at=timezone.now())  # its probe lease ran out
        assert probes.probes_run_once(owner="w2") == 1
    assert Execution.objects.get(pk=case.pk).status == ExecutionStatus.PENDING
    assert CaseProbe.objects.get().outcome == "resolved-happened"
    assert len(_by_prober(AuditType.RECONCILIATION_RESOLVED)) == 1


@pytest.mark.django_db
def test_an_operator_who_resolves_during_the_lookup__the_answer_is_kept_unused(
    provider, operator, monkeypatch
):
    case = reconciliation_case()
    _charge_applied(provider, case)
    ask = probes.lookup_by_key

    def meanwhile_an_operator(*args):
        # As the prober asks (it read the case open before, and records the answer after): the
        # operator acts here, outside the lookup's event loop, on the test's connection.
        services.execution_abandon(execution_id=case.pk, reason="by hand", operator=operator)
        return ask(*args)

    monkeypatch.setattr(probes, "lookup_by_key", meanwhile_an_operator)
    with _registry(provider):
        probes.probes_enlist()
        (claimed,) = probes.probes_claim(owner="w1")
        assert probes.probe_one(claimed, owner="w1", two_person=False) == "refused"
    probe = CaseProbe.objects.get()
    assert probe.finished_at is not None and probe.outcome == "refused"
    assert _by_prober(AuditType.RECONCILIATION_EVIDENCE)[0].payload["happened"] is True
    assert [e.actor for e in AuditEvent.objects.filter(type="RECONCILIATION_RESOLVED")] == ["olga"]


@pytest.mark.django_db
def test_a_stale_prober__writes_nothing(provider):
    case = reconciliation_case()
    _charge_applied(provider, case)
    with _registry(provider):
        probes.probes_enlist()
        (stale,) = probes.probes_claim(owner="w1")
        CaseProbe.objects.update(lease_expires_at=timezone.now())  # its probe lease ran out
        (fresh,) = probes.probes_claim(owner="w2")
        assert fresh.token == stale.token + 1
        assert probes.probe_one(stale, owner="w1", two_person=False) == "superseded"
        assert Execution.objects.get(pk=case.pk).status == "RECONCILIATION_REQUIRED"
        assert probes.probe_one(fresh, owner="w2", two_person=False) == "resolved-happened"
    assert len(_by_prober(AuditType.RECONCILIATION_RESOLVED)) == 1


@pytest.mark.django_db(transaction=True)
def test_two_probers_at_once__one_probe_and_one_resolution(provider):
    case = reconciliation_case()
    _charge_applied(provider, case)
    barrier = threading.Barrier(2)
    ran: list[int] = []

    def prober(owner: str) -> None:
        from django.db import connection

        try:
            barrier.wait(timeout=10)
            ran.append(probes.probes_run_once(owner=owner))
        finally:
            connection.close()

    with _registry(provider):
        threads = [threading.Thread(target=prober, args=(f"w{n}",)) for n in (1, 2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)
    assert sorted(ran) == [0, 1]
    assert [r.method for r in provider.requests() if "/by-key/" in r.path] == ["GET"]
    assert len(_by_prober(AuditType.RECONCILIATION_RESOLVED)) == 1


@pytest.mark.django_db
def test_metrics__count_probes_by_outcome_and_automatic_resolutions(provider):
    metrics = WorkerMetrics()
    reconciliation_case()  # its lookup fails: nothing listens on the registry's port
    with use_registry(build_registry(_catalog(charge_catalog()))):
        assert probes.probes_run_once(owner="w1", metrics=metrics) == 1
    applied = reconciliation_case()
    _charge_applied(provider, applied)
    reconciliation_case()  # the provider has no such charge
    with _registry(provider):
        assert probes.probes_run_once(owner="w1", metrics=metrics) == 2
    assert [metrics.value(PROBES, outcome) for outcome in ("found", "not_found", "error")] == [
        1,
        1,
        1,
    ]
    assert metrics.value(AUTO_RESOLUTIONS, "WRITE_HAPPENED") == 1
    assert metrics.value(AUTO_RESOLUTIONS, "WRITE_NOT_HAPPENED") == 0
    text = metrics.text()
    assert 'orquestador_worker_probes_total{outcome="not_found"} 1' in text
    assert 'orquestador_worker_automatic_resolutions_total{resolution="WRITE_HAPPENED"} 1' in text
    assert "# TYPE orquestador_worker_probes_total counter" in text


@pytest.mark.django_db(transaction=True)
def test_probes_on_the_workers_shared_connections__nothing_of_their_own(provider, runtime_dsn):
    case = reconciliation_case()
    _charge_applied(provider, case)
    connection.close()
    with _registry(provider), runtime_for(runtime_dsn, registry()) as runtime:
        assert probes.probes_run_once(owner="w1", source=runtime.connection) == 1
        assert connection.connection is None  # Django opened no connection of its own
        with runtime.connection() as conn:  # lent and given back as it was
            assert conn.autocommit and conn.info.transaction_status == TransactionStatus.IDLE
            assert conn.execute("""SELECT '{"a": 1}'::jsonb""").fetchone()[0] == {"a": 1}
    assert Execution.objects.get(pk=case.pk).status == ExecutionStatus.PENDING
    (resolved,) = _by_prober(AuditType.RECONCILIATION_RESOLVED)
    assert resolved.payload["resolution"] == "WRITE_HAPPENED"
    checkpoint = ActionExecution.objects.get(execution=case)
    assert checkpoint.output == {"chargeId": checkpoint.output["chargeId"], "status": "paid"}


def _applied(provider, case: Execution, action_id: str) -> None:
    requests.post(
        provider.url(CHARGES),
        json={"amount": 42},
        headers={"Idempotency-Key": f"{case.pk}:{action_id}"},
        timeout=5,
    )


@pytest.mark.django_db
def test_every_uncertain_write_of_a_case__probed_and_settled(provider):
    case = reconciliation_case()
    CheckpointFactory(execution=case, action_id="refund", sequence=1, status="RUNNING")
    for action_id in ("charge", "refund"):
        _applied(provider, case, action_id)
    with _registry(provider):
        assert probes.probes_run_once(owner="w1") == 2  # both writes asked about at once
        # One resolution requeued the execution, so the other write's probe closed; the worker
        # meets that write still uncertain and sends the execution back to the desk.
        (first,) = _by_prober(AuditType.RECONCILIATION_RESOLVED)
        assert Execution.objects.get(pk=case.pk).status == ExecutionStatus.PENDING
        Execution.objects.filter(pk=case.pk).update(status=ExecutionStatus.RECONCILIATION_REQUIRED)
        assert probes.probes_run_once(owner="w1") == 1  # its probe opens again
    resolved = _by_prober(AuditType.RECONCILIATION_RESOLVED)
    assert resolved[0] == first and len(resolved) == 2
    assert {e.payload["actionId"] for e in resolved} == {"charge", "refund"}
    assert {e.payload["resolution"] for e in resolved} == {"WRITE_HAPPENED"}
    checkpoints = ActionExecution.objects.filter(execution=case)
    assert {(c.action_id, c.status) for c in checkpoints} == {
        ("charge", CheckpointStatus.SUCCEEDED),
        ("refund", CheckpointStatus.SUCCEEDED),
    }
    assert sorted(p.outcome for p in CaseProbe.objects.all()) == ["resolved-happened"] * 2


@pytest.mark.django_db
def test_a_case_whose_first_write_is_settled__its_next_uncertain_write_is_probed(provider):
    case = reconciliation_case(checkpoint_status=CheckpointStatus.SUCCEEDED)
    CheckpointFactory(execution=case, action_id="refund", sequence=1)
    _applied(provider, case, "refund")
    with _registry(provider):
        assert probes.probes_run_once(owner="w1") == 1
    (probe,) = CaseProbe.objects.all()
    assert (probe.action_id, probe.outcome) == ("refund", "resolved-happened")
    (resolved,) = _by_prober(AuditType.RECONCILIATION_RESOLVED)
    assert resolved.payload["actionId"] == "refund"
    assert ActionExecution.objects.get(execution=case, action_id="refund").status == "SUCCEEDED"


@pytest.mark.django_db
def test_found__an_uncertain_undo_is_settled_by_its_own_key_and_stays_compensating(provider):
    """A compensation step is probed like any write, by `executionId:actionId:compensate`; once
    settled the execution is requeued with its compensation cause, so a worker finishes the
    undos instead of running the actions again."""
    case = reconciliation_case(action_id="charge:compensate", sequence=3)
    Execution.objects.filter(pk=case.pk).update(compensation_cause="PERMANENT_FAILURE")
    requests.post(
        provider.url(CHARGES),
        json={"amount": 42},
        headers={"Idempotency-Key": f"{case.pk}:charge:compensate"},
        timeout=5,
    )
    with _registry(provider):
        assert probes.probes_run_once(owner="w1") == 1
    checkpoint = ActionExecution.objects.get(execution=case)
    assert (checkpoint.action_id, checkpoint.status) == ("charge:compensate", "SUCCEEDED")
    execution = Execution.objects.get(pk=case.pk)
    assert (execution.status, execution.compensation_cause) == ("PENDING", "PERMANENT_FAILURE")
    (resolved,) = _by_prober(AuditType.RECONCILIATION_RESOLVED)
    assert resolved.payload["actionId"] == "charge:compensate"


@pytest.mark.django_db
def test_a_replay_lost_between_two_probes__the_new_attempt_gets_a_probe_of_its_own(provider):
    """The earlier attempt's probe closes without asking: its answers (and its window) were about
    an attempt the provider was asked about before the replay was sent."""
    case = reconciliation_case()
    with _registry(provider):
        probes.probes_run_once(owner="w1")  # attempt 1: not found, the next probe in 5 s
        # Resolved, replayed and lost again before that next probe: attempt 2 is in doubt.
        ActionExecution.objects.filter(execution=case).update(attempt=2)
        _due_now()
        assert probes.probes_run_once(owner="w1") == 2
    probes_by_attempt = {p.key.rsplit(":", 1)[1]: p for p in CaseProbe.objects.all()}
    assert probes_by_attempt["1"].outcome == "closed"
    assert probes_by_attempt["1"].finished_at is not None
    assert (probes_by_attempt["2"].outcome, probes_by_attempt["2"].probes) == ("waiting", 1)
    asked = _by_prober(AuditType.RECONCILIATION_EVIDENCE)
    assert [(e.payload["attempt"], e.payload["probe"]) for e in asked] == [(1, 1), (2, 1)]
