"""The resolutions and the evidence service against real PostgreSQL: what each writes, what each
refuses, and that a refusal writes nothing."""

import psycopg
import pytest
from django.core.exceptions import PermissionDenied

from executions.models import (
    ActionExecution,
    AuditEvent,
    AuditType,
    CheckpointStatus,
    Execution,
    ExecutionStatus,
    Request,
)
from executions.queue import operatorwrites
from orquestador import errors
from reconciliation import services
from tests.support.providers import JsonProvider, drop

from .conftest import charge_catalog
from .factories import CheckpointFactory, audit, lookup, reconciliation_case, row

pytestmark = pytest.mark.django_db

OUTPUT = {"chargeId": "ch_1", "status": "paid"}


def _resolved(execution: Execution) -> AuditEvent:
    return AuditEvent.objects.get(execution=execution, type=AuditType.RECONCILIATION_RESOLVED)


def test_write_happened__records_output_and_requeues_under_a_new_token(operator, charge_registry):
    case = reconciliation_case(fencing_token=3, lease_owner="worker-a")

    resolved = services.execution_resolve_write_happened(
        execution_id=case.pk,
        action_id="charge",
        output=OUTPUT,
        reason="  Provider dashboard shows ch_1 paid.  ",
        operator=operator,
    )

    case.refresh_from_db()
    assert (case.status, case.fencing_token, resolved.fencing_token) == ("PENDING", 4, 4)
    assert case.lease_owner is None and case.lease_expires_at is None
    assert case.error_code is None and case.error_detail is None and case.finished_at is None
    checkpoint = ActionExecution.objects.get(execution=case)
    assert checkpoint.status == CheckpointStatus.SUCCEEDED
    assert checkpoint.output == OUTPUT
    assert checkpoint.fencing_token == 4 and checkpoint.finished_at is not None
    assert Request.objects.get(pk=case.request_id).blocked_by_id == case.pk  # still held
    event = _resolved(case)
    assert event.actor == "olga"
    assert event.payload["resolution"] == "WRITE_HAPPENED"
    assert event.payload["actionId"] == "charge"
    assert event.payload["reason"] == "Provider dashboard shows ch_1 paid."
    assert event.payload["operator"] == "olga"
    evidence = event.payload["evidence"]
    assert evidence["recordedOutput"] == OUTPUT
    assert evidence["checkpoint"]["status"] == "UNKNOWN"  # as it was before the resolution
    assert evidence["checkpoint"]["externalKey"] == f"{case.pk}:charge"
    assert evidence["lookup"] is None


def test_write_not_happened__authorises_one_replay_and_requeues(operator, charge_registry):
    case = reconciliation_case(checkpoint_status=CheckpointStatus.RUNNING, fencing_token=7)
    lookup(case, happened=False)

    services.execution_resolve_write_not_happened(
        execution_id=case.pk,
        action_id="charge",
        reason="No charge at the provider.",
        operator=operator,
    )

    case.refresh_from_db()
    assert (case.status, case.fencing_token) == ("PENDING", 8)
    checkpoint = ActionExecution.objects.get(execution=case)
    assert checkpoint.status == CheckpointStatus.FAILED
    assert checkpoint.error_code == errors.REPLAY_AUTHORIZED
    assert checkpoint.output is None
    assert checkpoint.external_key == f"{case.pk}:charge"  # the replay keeps the key
    assert _resolved(case).payload["resolution"] == "WRITE_NOT_HAPPENED"


def test_abandon__fails_the_execution_and_releases_the_request_as_it_was(operator):
    case = reconciliation_case(fencing_token=5)
    request_before = Request.objects.get(pk=case.request_id)

    services.execution_abandon(execution_id=case.pk, reason="Customer withdrew.", operator=operator)

    case.refresh_from_db()
    assert (case.status, case.fencing_token) == ("FAILED", 6)
    assert case.error_code == errors.RECONCILIATION_ABANDONED
    assert "UNCERTAIN_WRITE" in case.error_detail
    assert case.finished_at is not None
    request = Request.objects.get(pk=case.request_id)
    assert request.blocked_by_id is None
    assert request.version == request_before.version + 1
    assert request.updated_at > request_before.updated_at
    assert (request.state, request.revision, request.data) == (
        request_before.state,
        request_before.revision,
        request_before.data,
    )
    assert ActionExecution.objects.get(execution=case).status == CheckpointStatus.UNKNOWN
    payload = _resolved(case).payload
    assert payload["resolution"] == "ABANDONED" and payload["actionId"] == "charge"
    assert payload["evidence"]["previousErrorCode"] == "UNCERTAIN_WRITE"
    assert [c["actionId"] for c in payload["evidence"]["uncertain"]] == ["charge"]


@pytest.mark.parametrize(
    "resolve",
    [
        lambda case, user: services.execution_resolve_write_happened(
            execution_id=case.pk, action_id="charge", output=OUTPUT, reason="r", operator=user
        ),
        lambda case, user: services.execution_resolve_write_not_happened(
            execution_id=case.pk, action_id="charge", reason="r", operator=user
        ),
        lambda case, user: services.execution_abandon(
            execution_id=case.pk, reason="r", operator=user
        ),
    ],
    ids=["happened", "not_happened", "abandon"],
)
def test_resolution__without_its_permission__writes_nothing(viewer, charge_registry, resolve):
    case = reconciliation_case()
    before = row(case.pk)
    with pytest.raises(PermissionDenied):
        resolve(case, viewer)
    assert row(case.pk) == before


def test_resolution__needs_exactly_its_own_permission(make_user, charge_registry):
    case = reconciliation_case()
    only_abandon = make_user("ann", "abandon_execution")
    with pytest.raises(PermissionDenied):
        services.execution_resolve_write_not_happened(
            execution_id=case.pk, action_id="charge", reason="r", operator=only_abandon
        )
    services.execution_abandon(execution_id=case.pk, reason="r", operator=only_abandon)
    assert Execution.objects.get(pk=case.pk).status == ExecutionStatus.FAILED


@pytest.mark.parametrize("reason", ["", "   \n\t", "x" * (services.MAX_REASON_CHARS + 1)])
def test_resolution__refuses_a_blank_or_overlong_reason(operator, reason):
    case = reconciliation_case()
    before = row(case.pk)
    with pytest.raises(services.ResolutionRefused) as refused:
        services.execution_abandon(execution_id=case.pk, reason=reason, operator=operator)
    assert refused.value.code == errors.REASON_REQUIRED
    assert row(case.pk) == before


def test_resolution__twice__the_second_finds_nothing_to_resolve(operator, charge_registry):
    case = reconciliation_case()
    lookup(case, happened=False)
    services.execution_resolve_write_not_happened(
        execution_id=case.pk, action_id="charge", reason="first", operator=operator
    )
    before = row(case.pk)
    with pytest.raises(services.ResolutionRefused) as refused:
        services.execution_abandon(execution_id=case.pk, reason="second", operator=operator)
    assert refused.value.code == errors.NOT_IN_RECONCILIATION
    assert "already resolved" in refused.value.detail
    assert row(case.pk) == before


@pytest.mark.parametrize(
    "output",
    [
        {"chargeId": "ch_1"},
        {"chargeId": 1, "status": "paid"},
        {"status": "refunded", "chargeId": "c"},
    ],
)
def test_write_happened__refuses_an_output_the_schema_rejects(operator, charge_registry, output):
    case = reconciliation_case()
    before = row(case.pk)
    with pytest.raises(services.ResolutionRefused) as refused:
        services.execution_resolve_write_happened(
            execution_id=case.pk, action_id="charge", output=output, reason="r", operator=operator
        )
    assert refused.value.code == errors.OUTPUT_INVALID
    assert row(case.pk) == before


def test_write_happened__refuses_when_the_capability_is_no_longer_configured(operator):
    case = reconciliation_case()  # no registry fixture: the default catalog is empty
    before = row(case.pk)
    with pytest.raises(services.ResolutionRefused) as refused:
        services.execution_resolve_write_happened(
            execution_id=case.pk, action_id="charge", output=OUTPUT, reason="r", operator=operator
        )
    assert refused.value.code == errors.INTEGRATION_UNAVAILABLE
    assert "no longer configured" in refused.value.detail
    assert row(case.pk) == before


def test_settling_a_write__refuses_an_action_that_is_not_uncertain(operator, charge_registry):
    case = reconciliation_case()
    CheckpointFactory(
        execution=case, action_id="lookup", sequence=1, status=CheckpointStatus.SUCCEEDED
    )
    before = row(case.pk)
    for action_id in ("lookup", "missing"):
        with pytest.raises(services.ResolutionRefused) as refused:
            services.execution_resolve_write_not_happened(
                execution_id=case.pk, action_id=action_id, reason="r", operator=operator
            )
        assert refused.value.code == errors.NO_UNCERTAIN_CHECKPOINT
    assert row(case.pk) == before


def test_resolution__a_step_that_fails_rolls_everything_back(
    operator, charge_registry, monkeypatch
):
    case = reconciliation_case()
    before = row(case.pk)

    def broken_audit(*args, **kwargs):
        raise RuntimeError("audit insert failed")

    # The audit append is the last step of the write: the settle and requeue before it roll back.
    monkeypatch.setattr(operatorwrites, "audit_append", broken_audit)
    with pytest.raises(RuntimeError):
        services.execution_resolve_write_happened(
            execution_id=case.pk, action_id="charge", output=OUTPUT, reason="r", operator=operator
        )
    assert row(case.pk) == before


@pytest.mark.django_db(transaction=True)
def test_requeue__notifies_idle_workers_after_commit(operator, charge_registry, runtime_dsn):
    from executions.sql import NOTIFY_CHANNEL

    case = reconciliation_case()
    lookup(case, happened=False)
    with psycopg.connect(runtime_dsn, autocommit=True) as listener:
        listener.execute(f"LISTEN {NOTIFY_CHANNEL}")
        services.execution_resolve_write_not_happened(
            execution_id=case.pk, action_id="charge", reason="r", operator=operator
        )
        notices = listener.notifies(timeout=10, stop_after=1)
        payloads = [n.payload for n in notices]
    assert payloads == [str(case.pk)]


def test_lookup__records_the_providers_answer_as_evidence(operator):
    with JsonProvider() as provider:
        base = provider.url("/charges")
        from actions.catalog import parse_catalog
        from actions.registry import ADAPTERS, build_registry, use_registry

        catalog = parse_catalog(
            charge_catalog(base), adapters=ADAPTERS, lease_seconds=60, environ={}
        )
        with use_registry(build_registry(catalog)):
            case = reconciliation_case()
            key = f"{case.pk}:charge"
            # The write reached the provider and was applied; the worker never heard back.
            provider.plan("/charges", drop(apply=True))
            _post(base, key)

            event = services.checkpoint_record_lookup(
                execution_id=case.pk, action_id="charge", operator=operator
            )

            fresh = reconciliation_case()
            missing = services.checkpoint_record_lookup(
                execution_id=fresh.pk, action_id="charge", operator=operator
            )
    assert event.type == AuditType.RECONCILIATION_EVIDENCE and event.actor == "olga"
    assert event.payload["happened"] is True
    assert event.payload["externalKey"] == key
    assert event.payload["output"] is not None
    assert missing.payload["happened"] is False and missing.payload["output"] is None
    # Evidence changes nothing else.
    assert Execution.objects.get(pk=case.pk).status == ExecutionStatus.RECONCILIATION_REQUIRED
    assert ActionExecution.objects.get(execution=case).status == CheckpointStatus.UNKNOWN


def test_lookup__without_permission_asks_nobody(viewer, charge_registry):
    case = reconciliation_case()
    with pytest.raises(PermissionDenied):
        services.checkpoint_record_lookup(execution_id=case.pk, action_id="charge", operator=viewer)
    assert not AuditEvent.objects.filter(type=AuditType.RECONCILIATION_EVIDENCE).exists()


def _post(base: str, key: str) -> None:
    """The worker's lost call: sent, applied by the provider, connection dropped."""
    import requests

    try:
        requests.post(base, json={"amount": 42}, headers={"Idempotency-Key": key}, timeout=5)
    except requests.ConnectionError:
        pass


def test_lookup__where_the_capability_has_no_route__says_so_and_records_nothing(operator):
    case = reconciliation_case()  # the default catalog is empty
    with pytest.raises(services.ResolutionRefused) as refused:
        services.checkpoint_record_lookup(
            execution_id=case.pk, action_id="charge", operator=operator
        )
    assert refused.value.code == errors.INTEGRATION_UNAVAILABLE
    assert "has no provider lookup" in refused.value.detail
    assert not AuditEvent.objects.filter(type=AuditType.RECONCILIATION_EVIDENCE).exists()


# --- Evidence about the attempt in doubt ------------------------------------------------------


def _after_a_lost_replay() -> Execution:
    """The case as a lost replay leaves it: the provider said "not found" about attempt 1, the
    replay (attempt 2) was sent and its answer lost too, so attempt 2 is in doubt."""
    case = reconciliation_case(attempt=2)
    lookup(case, happened=False, attempt=1)
    return case


def test_replay__with_evidence_only_about_an_earlier_attempt__is_refused(operator, charge_registry):
    case = _after_a_lost_replay()
    before = row(case.pk)

    with pytest.raises(services.ResolutionRefused) as refused:
        services.execution_resolve_write_not_happened(
            execution_id=case.pk, action_id="charge", reason="It said not found.", operator=operator
        )

    assert refused.value.code == errors.RISK_NOT_CONFIRMED
    assert refused.value.detail.startswith("Without evidence: No answer from the provider about")
    assert "a second charge" in refused.value.detail
    assert row(case.pk) == before


def test_replay__with_no_lookup_at_all__is_refused_unless_the_risk_is_confirmed(
    operator, charge_registry
):
    case = reconciliation_case()
    before = row(case.pk)
    with pytest.raises(services.ResolutionRefused) as refused:
        services.execution_resolve_write_not_happened(
            execution_id=case.pk, action_id="charge", reason="r", operator=operator
        )
    assert refused.value.code == errors.RISK_NOT_CONFIRMED
    assert row(case.pk) == before

    services.execution_resolve_write_not_happened(
        execution_id=case.pk,
        action_id="charge",
        reason="The provider's support confirmed by phone that no charge exists.",
        operator=operator,
        confirm_risk=True,
    )
    assert ActionExecution.objects.get(execution=case).error_code == errors.REPLAY_AUTHORIZED
    assert _resolved(case).payload["evidence"]["lookup"] is None


@pytest.mark.parametrize("answer", [None, True], ids=["settled-nothing", "happened"])
def test_replay__against_or_without_an_answer_about_this_attempt__is_refused(
    operator, charge_registry, answer
):
    case = _after_a_lost_replay()
    lookup(case, happened=answer, attempt=2)
    before = row(case.pk)
    with pytest.raises(services.ResolutionRefused) as refused:
        services.execution_resolve_write_not_happened(
            execution_id=case.pk, action_id="charge", reason="r", operator=operator
        )
    assert refused.value.code == errors.RISK_NOT_CONFIRMED
    assert row(case.pk) == before


def test_replay__after_not_found_about_this_attempt__applies_with_that_evidence(
    operator, charge_registry
):
    case = _after_a_lost_replay()
    asked = lookup(case, happened=False, attempt=2)

    services.execution_resolve_write_not_happened(
        execution_id=case.pk, action_id="charge", reason="Not found again.", operator=operator
    )

    evidence = _resolved(case).payload["evidence"]
    assert evidence["lookup"]["auditEventId"] == asked.pk and evidence["lookup"]["attempt"] == 2
    assert evidence["checkpoint"]["attempt"] == 2


def test_write_happened__against_not_found_about_this_attempt__is_refused_unless_confirmed(
    operator, charge_registry
):
    case = _after_a_lost_replay()
    # The "not found" was about attempt 1: recording attempt 2 as done goes against nothing.
    services.execution_resolve_write_happened(
        execution_id=case.pk, action_id="charge", output=OUTPUT, reason="r", operator=operator
    )
    other = reconciliation_case()
    lookup(other, happened=False)
    before = row(other.pk)
    with pytest.raises(services.ResolutionRefused) as refused:
        services.execution_resolve_write_happened(
            execution_id=other.pk, action_id="charge", output=OUTPUT, reason="r", operator=operator
        )
    assert refused.value.code == errors.RISK_NOT_CONFIRMED
    assert refused.value.detail.startswith("Against the evidence: The provider said this write")
    assert row(other.pk) == before


def test_a_lookup_recorded_before_lookups_named_their_attempt__counts_for_attempt_1_only(
    operator, charge_registry
):
    first, later = reconciliation_case(), reconciliation_case(attempt=2)
    for case in (first, later):
        audit(
            case.request,
            case,
            AuditType.RECONCILIATION_EVIDENCE,
            actionId="charge",
            happened=False,
            operator="olga",
        )
    services.execution_resolve_write_not_happened(
        execution_id=first.pk, action_id="charge", reason="r", operator=operator
    )
    with pytest.raises(services.ResolutionRefused) as refused:
        services.execution_resolve_write_not_happened(
            execution_id=later.pk, action_id="charge", reason="r", operator=operator
        )
    assert refused.value.code == errors.RISK_NOT_CONFIRMED


def test_lookup__records_the_attempt_it_asked_about(operator):
    with JsonProvider() as provider:
        from actions.catalog import parse_catalog
        from actions.registry import ADAPTERS, build_registry, use_registry

        catalog = parse_catalog(
            charge_catalog(provider.url("/charges")),
            adapters=ADAPTERS,
            lease_seconds=60,
            environ={},
        )
        with use_registry(build_registry(catalog)):
            case = _after_a_lost_replay()
            event = services.checkpoint_record_lookup(
                execution_id=case.pk, action_id="charge", operator=operator
            )
    assert event.payload["attempt"] == 2 and event.payload["happened"] is False
    # Now there is an answer about attempt 2, the replay follows the evidence.
    services.execution_resolve_write_not_happened(
        execution_id=case.pk, action_id="charge", reason="Not found.", operator=operator
    )
    assert _resolved(case).payload["evidence"]["lookup"]["auditEventId"] == event.pk
