"""Compensation against real PostgreSQL: a failed opted-in transition undoes its clean writes,
in reverse, each undo an action under the fence, and ends COMPENSATED with its request released;
anything uncertain goes to an operator instead (docs/flow-format.md#compensation)."""

import dataclasses

import pytest

from actions.base import LookupResult
from actions.registry import use_registry
from executions.queue.cancel import execution_cancel
from orquestador import errors
from tests.support.worker import (
    ScriptedAdapter,
    SimulatedCrash,
    action,
    audit_events,
    binding,
    checkpoint_rows,
    claim,
    create_flow,
    enqueue,
    execution_row,
    expire_lease,
    flow_definition,
    make_due,
    ok,
    permanent,
    registry,
    request_row,
    run_claim,
    run_next,
    runtime_for,
    transient,
    unknown,
)

pytestmark = pytest.mark.django_db(transaction=True)


class _LookingUp(ScriptedAdapter):
    """A scripted undo whose provider can be asked by key (what a NON_IDEMPOTENT_WRITE undo
    needs); the answer settles nothing."""

    async def lookup(self, external_key, binding):
        return LookupResult(happened=None, detail="not asked in this test")


def _with_lookup(bound):
    route = dataclasses.replace(bound.route, options={"lookup_url": "http://127.0.0.1:9/{key}"})
    return dataclasses.replace(bound, route=route)


def _undoable(action_id, capability, undo, *, input=None, undo_input=None):
    step = action(action_id, capability, input=input)
    step["compensate"] = {"capability": undo, "version": 1, "input": undo_input or {}}
    return step


def _shop(make_flow, *, on_failure="compensate", charge_undo=False, **kwargs):
    """reserve (undone by release, reading the reservation) then charge."""
    reserve = _undoable(
        "reserve",
        "RESERVE",
        "RELEASE",
        input={"sku": {"from": "/data/sku"}},
        undo_input={
            "reservationId": {"from": "/actions/reserve/reservationId"},
            "sku": {"from": "/data/sku"},
        },
    )
    charge = _undoable("charge", "CHARGE", "REFUND") if charge_undo else action("charge", "CHARGE")
    return make_flow([reserve, charge], on_failure=on_failure, **kwargs)


@pytest.fixture
def make_flow(conn):
    counter = iter(range(1, 1000))

    def make(actions, *, on_failure=None, **kwargs):
        kwargs.setdefault("version", next(counter))
        definition = flow_definition(actions, **kwargs)
        if on_failure is not None:
            definition["transitions"][0]["onFailure"] = on_failure
        return create_flow(conn, definition)

    return make


def _run(conn, runtime_dsn, *bindings, owner="worker-a"):
    with runtime_for(runtime_dsn, registry(*bindings)) as runtime:
        return run_next(conn, runtime, owner=owner)


def _types(conn, accepted):
    return [t for t, _ in audit_events(conn, accepted.request_id)]


def _released_unchanged(conn, accepted):
    request = request_row(conn, accepted.request_id)
    return (request["blocked_by_id"], request["state"], request["revision"]) == (None, "DRAFT", 2)


def test_compensation__a_refused_charge_releases_the_reservation_and_ends_compensated(
    conn, make_flow, runtime_dsn
):
    accepted = enqueue(conn, _shop(make_flow), data={"sku": "book"})
    reserve = ScriptedAdapter(default=ok({"reservationId": "res-1"}))
    charge = ScriptedAdapter(default=permanent("HTTP_402"))
    release = ScriptedAdapter(default=ok({"released": True}))

    result = _run(
        conn,
        runtime_dsn,
        binding("RESERVE", reserve, effect="IDEMPOTENT_WRITE"),
        binding("CHARGE", charge, effect="NON_IDEMPOTENT_WRITE"),
        binding("RELEASE", release, effect="IDEMPOTENT_WRITE"),
    )

    assert result.execution_status == "COMPENSATED"
    row = execution_row(conn, accepted.execution_id)
    assert (row["status"], row["error_code"], row["compensation_cause"]) == (
        "COMPENSATED",
        errors.PERMANENT_FAILURE,
        errors.PERMANENT_FAILURE,
    )
    assert row["finished_at"] is not None and row["lease_owner"] is None
    assert _released_unchanged(conn, accepted)
    (undo,) = release.calls
    assert undo.external_key == f"{accepted.execution_id}:reserve:compensate"
    assert undo.input == {"reservationId": "res-1", "sku": "book"}
    checkpoints = checkpoint_rows(conn, accepted.execution_id)
    assert list(checkpoints) == ["reserve", "charge", "reserve:compensate"]
    step = checkpoints["reserve:compensate"]
    assert (step["status"], step["effect"], step["sequence"], step["capability"]) == (
        "SUCCEEDED",
        "IDEMPOTENT_WRITE",
        3,
        "RELEASE",
    )
    assert checkpoints["charge"]["status"] == "FAILED"
    types = _types(conn, accepted)
    assert types[-2:] == ["COMPENSATION_STARTED", "EXECUTION_COMPENSATED"]
    assert "RECONCILIATION_REQUIRED" not in types and "EXECUTION_FAILED" not in types
    started = dict(audit_events(conn, accepted.request_id))["COMPENSATION_STARTED"]
    assert started["compensates"] == ["reserve"] and started["errorCode"] == "PERMANENT_FAILURE"


def test_compensation__the_execution_page_draws_the_undo_and_the_end(conn, make_flow, runtime_dsn):
    from django.contrib.auth.models import User
    from django.test import Client
    from django.urls import reverse
    from django.utils import timezone

    from executions.models import Execution
    from executions.pictures.timeline import execution_timeline

    accepted = enqueue(conn, _shop(make_flow), data={"sku": "book"})
    bindings = (
        binding("RESERVE", ScriptedAdapter(), effect="IDEMPOTENT_WRITE"),
        binding("CHARGE", ScriptedAdapter(default=permanent()), effect="NON_IDEMPOTENT_WRITE"),
        binding("RELEASE", ScriptedAdapter(), effect="IDEMPOTENT_WRITE"),
    )
    assert _run(conn, runtime_dsn, *bindings).execution_status == "COMPENSATED"
    execution = Execution.objects.select_related("flow").get(pk=accepted.execution_id)
    drawn = execution_timeline(execution, now=timezone.now())
    assert [lane.title for lane in drawn.lanes][-3:] == ["reserve", "charge", "reserve:compensate"]
    marks = [mark.kind for lane in drawn.lanes for mark in lane.marks]
    assert "compensating" in marks and "compensated" in marks
    assert not drawn.live
    client = Client()
    client.force_login(User.objects.create_superuser("root", password="pw-root"))
    page = client.get(reverse("admin:executions_execution_change", args=[execution.pk]))
    assert page.status_code == 200
    text = page.content.decode()
    assert "COMPENSATED" in text and "reserve:compensate" in text


def test_compensation__runs_the_undos_in_reverse_order_of_the_writes(conn, make_flow, runtime_dsn):
    flow_id = make_flow(
        [
            _undoable("first", "W1", "U1"),
            action("look", "READ"),
            _undoable("second", "W2", "U2"),
            action("fails", "BAD"),
        ],
        on_failure="compensate",
    )
    accepted = enqueue(conn, flow_id)
    order = []

    def undo(name):
        def answer(ctx):
            order.append(name)
            return ok({})

        return ScriptedAdapter(default=answer)

    result = _run(
        conn,
        runtime_dsn,
        binding("W1", ScriptedAdapter(), effect="IDEMPOTENT_WRITE"),
        binding("W2", ScriptedAdapter(), effect="NON_IDEMPOTENT_WRITE"),
        binding("READ", ScriptedAdapter()),
        binding("BAD", ScriptedAdapter(default=permanent())),
        binding("U1", undo("U1"), effect="IDEMPOTENT_WRITE"),
        binding("U2", undo("U2"), effect="IDEMPOTENT_WRITE"),
    )

    assert result.execution_status == "COMPENSATED"
    assert order == ["U2", "U1"]
    checkpoints = checkpoint_rows(conn, accepted.execution_id)
    assert [(k, v["sequence"]) for k, v in checkpoints.items()][-2:] == [
        ("second:compensate", 5),
        ("first:compensate", 7),
    ]


def test_compensation__a_decision_with_no_match_is_compensated_with_its_code(
    conn, make_flow, runtime_dsn
):
    flow_id = _shop(
        make_flow, rules=[{"id": "never", "when": False, "target": "DONE", "outcome": "OK"}]
    )
    accepted = enqueue(conn, flow_id, data={"sku": "book"})
    result = _run(
        conn,
        runtime_dsn,
        binding("RESERVE", ScriptedAdapter(), effect="IDEMPOTENT_WRITE"),
        binding("CHARGE", ScriptedAdapter(), effect="READ_ONLY"),
        binding("RELEASE", ScriptedAdapter(), effect="IDEMPOTENT_WRITE"),
    )
    assert result.execution_status == "COMPENSATED"
    assert execution_row(conn, accepted.execution_id)["error_code"] == errors.DECISION_NO_MATCH
    assert _released_unchanged(conn, accepted)


def test_compensation__a_transition_that_does_not_opt_in_goes_to_reconciliation(
    conn, make_flow, runtime_dsn
):
    accepted = enqueue(conn, _shop(make_flow, on_failure=None), data={"sku": "book"})
    release = ScriptedAdapter()
    result = _run(
        conn,
        runtime_dsn,
        binding("RESERVE", ScriptedAdapter(), effect="IDEMPOTENT_WRITE"),
        binding("CHARGE", ScriptedAdapter(default=permanent()), effect="NON_IDEMPOTENT_WRITE"),
        binding("RELEASE", release, effect="IDEMPOTENT_WRITE"),
    )
    assert result.execution_status == "RECONCILIATION_REQUIRED"
    assert release.calls == []
    assert execution_row(conn, accepted.execution_id)["compensation_cause"] is None


def test_compensation__an_uncertain_forward_write_goes_to_reconciliation_without_any_undo(
    conn, make_flow, runtime_dsn
):
    accepted = enqueue(conn, _shop(make_flow, charge_undo=True), data={"sku": "book"})
    release, refund = ScriptedAdapter(), ScriptedAdapter()
    result = _run(
        conn,
        runtime_dsn,
        binding("RESERVE", ScriptedAdapter(), effect="IDEMPOTENT_WRITE"),
        binding("CHARGE", ScriptedAdapter(default=unknown()), effect="NON_IDEMPOTENT_WRITE"),
        binding("RELEASE", release, effect="IDEMPOTENT_WRITE"),
        binding("REFUND", refund, effect="IDEMPOTENT_WRITE"),
    )
    assert result.execution_status == "RECONCILIATION_REQUIRED"
    assert release.calls == [] and refund.calls == []
    row = execution_row(conn, accepted.execution_id)
    assert (row["error_code"], row["compensation_cause"]) == (errors.UNCERTAIN_WRITE, None)
    assert request_row(conn, accepted.request_id)["blocked_by_id"] == accepted.execution_id


def test_compensation__a_write_with_no_undo_falls_back_to_reconciliation_saying_why(
    conn, make_flow, runtime_dsn
):
    flow_id = make_flow(
        [_undoable("reserve", "RESERVE", "RELEASE"), action("hold", "HOLD"), action("x", "BAD")],
        on_failure="compensate",
    )
    accepted = enqueue(conn, flow_id)
    release = ScriptedAdapter()
    result = _run(
        conn,
        runtime_dsn,
        binding("RESERVE", ScriptedAdapter(), effect="IDEMPOTENT_WRITE"),
        binding("HOLD", ScriptedAdapter(), effect="IDEMPOTENT_WRITE"),
        binding("BAD", ScriptedAdapter(default=permanent())),
        binding("RELEASE", release, effect="IDEMPOTENT_WRITE"),
    )
    assert result.execution_status == "RECONCILIATION_REQUIRED"
    assert release.calls == []
    row = execution_row(conn, accepted.execution_id)
    assert row["error_code"] == errors.PERMANENT_FAILURE
    assert (
        "not compensated: action 'hold' (IDEMPOTENT_WRITE) declares no compensation"
        in (row["error_detail"])
    )


def test_compensation__an_undo_refused_for_good_goes_to_reconciliation_with_both_codes(
    conn, make_flow, runtime_dsn
):
    accepted = enqueue(conn, _shop(make_flow), data={"sku": "book"})
    result = _run(
        conn,
        runtime_dsn,
        binding("RESERVE", ScriptedAdapter(), effect="IDEMPOTENT_WRITE"),
        binding("CHARGE", ScriptedAdapter(default=permanent()), effect="NON_IDEMPOTENT_WRITE"),
        binding(
            "RELEASE", ScriptedAdapter(default=permanent("HTTP_409")), effect="IDEMPOTENT_WRITE"
        ),
    )
    assert result.execution_status == "RECONCILIATION_REQUIRED"
    row = execution_row(conn, accepted.execution_id)
    assert (row["error_code"], row["compensation_cause"]) == (
        errors.COMPENSATION_FAILED,
        errors.PERMANENT_FAILURE,
    )
    step = checkpoint_rows(conn, accepted.execution_id)["reserve:compensate"]
    assert (step["status"], step["error_code"]) == ("FAILED", "HTTP_409")
    assert request_row(conn, accepted.request_id)["blocked_by_id"] == accepted.execution_id


def test_compensation__a_transient_undo_retries_with_the_same_key_then_compensates(
    conn, make_flow, runtime_dsn
):
    accepted = enqueue(conn, _shop(make_flow), data={"sku": "book"})
    release = ScriptedAdapter(script=[transient()], default=ok({}))
    bindings = (
        binding("RESERVE", ScriptedAdapter(), effect="IDEMPOTENT_WRITE"),
        binding("CHARGE", ScriptedAdapter(default=permanent()), effect="NON_IDEMPOTENT_WRITE"),
        binding("RELEASE", release, effect="IDEMPOTENT_WRITE"),
    )
    first = _run(conn, runtime_dsn, *bindings)
    assert first.execution_status == "RETRY_WAIT"
    assert execution_row(conn, accepted.execution_id)["compensation_cause"] == "PERMANENT_FAILURE"
    make_due(conn, [accepted.execution_id])

    second = _run(conn, runtime_dsn, *bindings)

    assert second.execution_status == "COMPENSATED"
    assert [c.external_key for c in release.calls] == [
        f"{accepted.execution_id}:reserve:compensate"
    ] * 2
    assert [c.attempt for c in release.calls] == [1, 2]
    assert execution_row(conn, accepted.execution_id)["error_code"] == errors.PERMANENT_FAILURE
    assert _types(conn, accepted).count("COMPENSATION_STARTED") == 1


def test_compensation__a_compensated_execution_keeps_the_failure_that_started_it(
    conn, make_flow, runtime_dsn
):
    """The release's dropped first call (retried with its key) leaves its error on its own
    checkpoint's history; the execution ends with the charge's refusal, code and detail."""
    from django.contrib.auth.models import User
    from django.test import Client
    from django.urls import reverse

    from actions.base import ActionResult, Outcome

    accepted = enqueue(conn, _shop(make_flow), data={"sku": "book"})
    refused = ActionResult(
        outcome=Outcome.PERMANENT,
        error_code="HTTP_402",
        error_detail="provider refused the call with HTTP 402",
    )
    dropped = ActionResult(
        outcome=Outcome.UNKNOWN,
        error_code="CONNECTION_LOST",
        error_detail="connection lost after sending; the write may have been applied",
    )
    release = ScriptedAdapter(script=[dropped], default=ok({}))
    bindings = (
        binding("RESERVE", ScriptedAdapter(), effect="IDEMPOTENT_WRITE"),
        binding("CHARGE", ScriptedAdapter(default=refused), effect="NON_IDEMPOTENT_WRITE"),
        binding("RELEASE", release, effect="IDEMPOTENT_WRITE"),
    )
    first = _run(conn, runtime_dsn, *bindings)
    assert first.execution_status == "RETRY_WAIT"  # the release's call was dropped: retried
    started = execution_row(conn, accepted.execution_id)
    assert "HTTP 402" in started["compensation_detail"]
    make_due(conn, [accepted.execution_id])

    assert _run(conn, runtime_dsn, *bindings).execution_status == "COMPENSATED"

    row = execution_row(conn, accepted.execution_id)
    assert row["error_code"] == row["compensation_cause"] == started["compensation_cause"]
    assert row["error_detail"] == started["compensation_detail"]
    assert "provider refused the call with HTTP 402" in row["error_detail"]
    assert "connection lost" not in row["error_detail"]
    assert len(release.calls) == 2
    # The execution's page says the same, with the undo's dropped attempt listed apart.
    client = Client()
    client.force_login(User.objects.create_superuser("root", password="pw-root"))
    page = client.get(reverse("admin:executions_execution_change", args=[accepted.execution_id]))
    text = page.content.decode()
    detail = text[text.index("field-error_detail") :]
    assert "provider refused the call with HTTP 402" in detail[: detail.index("</div>\n")]
    steps = text[text.index("field-compensation_errors") :]
    steps = steps[: steps.index("</div>\n")]
    assert "reserve:compensate attempt 1: UNKNOWN CONNECTION_LOST" in steps


@pytest.mark.parametrize(
    ("effect", "status", "calls"),
    [
        ("IDEMPOTENT_WRITE", "COMPENSATED", 2),  # retried with the same key
        ("NON_IDEMPOTENT_WRITE", "RECONCILIATION_REQUIRED", 1),  # never repeated blindly
    ],
)
def test_compensation__a_crash_during_an_undo_is_recovered_by_its_effect_class(
    conn, make_flow, runtime_dsn, effect, status, calls
):
    accepted = enqueue(conn, _shop(make_flow), data={"sku": "book"})
    release = _LookingUp(script=[SimulatedCrash()], default=ok({}))
    bindings = (
        binding("RESERVE", ScriptedAdapter(), effect="IDEMPOTENT_WRITE"),
        binding("CHARGE", ScriptedAdapter(default=permanent()), effect="NON_IDEMPOTENT_WRITE"),
        _with_lookup(binding("RELEASE", release, effect=effect)),
    )
    with runtime_for(runtime_dsn, registry(*bindings)) as runtime:
        (found,) = claim(conn, "doomed", lease_seconds=2.0)
        with pytest.raises(SimulatedCrash):
            run_claim(runtime, found)
    expire_lease(conn, accepted.execution_id)
    assert checkpoint_rows(conn, accepted.execution_id)["reserve:compensate"]["status"] == "RUNNING"

    result = _run(conn, runtime_dsn, *bindings, owner="rescuer")

    assert result.execution_status == status
    assert len(release.calls) == calls
    row = execution_row(conn, accepted.execution_id)
    assert row["compensation_cause"] == errors.PERMANENT_FAILURE
    if status == "RECONCILIATION_REQUIRED":
        assert row["error_code"] == errors.UNCERTAIN_WRITE
    else:
        assert _released_unchanged(conn, accepted)


def test_compensation__a_cancellation_after_clean_writes_requeues_it_to_compensate(
    conn, make_flow, runtime_dsn
):
    flow_id = make_flow(
        [
            _undoable("reserve", "RESERVE", "RELEASE"),
            {"id": "approval", "wait": {"event": "ok", "payloadSchema": {}, "timeoutSeconds": 60}},
        ],
        on_failure="compensate",
    )
    accepted = enqueue(conn, flow_id)
    release = ScriptedAdapter()
    bindings = (
        binding("RESERVE", ScriptedAdapter(), effect="IDEMPOTENT_WRITE"),
        binding("RELEASE", release, effect="IDEMPOTENT_WRITE"),
    )
    suspended = _run(conn, runtime_dsn, *bindings)
    assert suspended.execution_status == "SUSPENDED"

    with use_registry(registry(*bindings)):
        cancelled = execution_cancel(
            execution_id=accepted.execution_id, actor="alice", reason="changed my mind"
        )
    assert cancelled.status == "PENDING"
    assert execution_row(conn, accepted.execution_id)["compensation_cause"] == (
        errors.CANCELLED_AFTER_WRITE
    )

    result = _run(conn, runtime_dsn, *bindings, owner="worker-b")

    assert result.execution_status == "COMPENSATED"
    assert len(release.calls) == 1
    ended = execution_row(conn, accepted.execution_id)
    assert (ended["error_code"], ended["error_detail"]) == (
        errors.CANCELLED_AFTER_WRITE,
        "cancelled by alice: changed my mind",
    )
    assert _released_unchanged(conn, accepted)
    types = _types(conn, accepted)
    assert types.index("EXECUTION_CANCELLED") < types.index("EXECUTION_COMPENSATED")


def _operator(*codenames):
    from django.contrib.auth.models import Permission, User

    user = User.objects.create_user(username="olga", password="pw-olga", is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(codename__in=codenames))
    return User.objects.get(pk=user.pk)


def test_compensation__an_operator_compensates_a_case_whose_charge_never_happened(
    conn, make_flow, runtime_dsn
):
    from django.test import Client
    from django.urls import reverse

    from executions.models import AuditEvent

    accepted = enqueue(conn, _shop(make_flow, charge_undo=True), data={"sku": "book"})
    release, refund = ScriptedAdapter(), ScriptedAdapter()
    bindings = (
        binding(
            "RESERVE",
            ScriptedAdapter(default=ok({"reservationId": "r-9"})),
            effect="IDEMPOTENT_WRITE",
        ),
        binding("CHARGE", ScriptedAdapter(default=unknown()), effect="NON_IDEMPOTENT_WRITE"),
        binding("RELEASE", release, effect="IDEMPOTENT_WRITE"),
        binding("REFUND", refund, effect="IDEMPOTENT_WRITE"),
    )
    assert _run(conn, runtime_dsn, *bindings).execution_status == "RECONCILIATION_REQUIRED"
    uncertain = execution_row(conn, accepted.execution_id)["error_detail"]
    operator = _operator(
        "view_reconciliationcase", "view_execution", "view_request", "compensate_execution"
    )
    with use_registry(registry(*bindings)):
        client = Client()
        client.force_login(operator)
        page = client.get(
            reverse("admin:reconciliation_reconciliationcase_change", args=[accepted.execution_id])
        ).content.decode()
        assert 'id="resolve-compensate"' in page
        posted = client.post(
            reverse("admin:reconciliation_reconciliationcase_changelist"),
            {
                "action": "compensate_execution",
                "_selected_action": str(accepted.execution_id),
                "post": "yes",
                "reason": "the provider has no charge with this key",
            },
        )
        assert posted.status_code == 302, posted.content.decode()[:2000]
    resolved = AuditEvent.objects.get(
        execution_id=accepted.execution_id, type="RECONCILIATION_RESOLVED"
    )
    assert (resolved.actor, resolved.payload["resolution"]) == ("olga", "COMPENSATE")
    assert resolved.payload["evidence"]["compensates"] == ["reserve"]
    row = execution_row(conn, accepted.execution_id)
    assert (row["status"], row["compensation_cause"]) == ("PENDING", errors.UNCERTAIN_WRITE)
    charge = checkpoint_rows(conn, accepted.execution_id)["charge"]
    assert (charge["status"], charge["error_code"]) == ("FAILED", errors.RECORDED_NOT_HAPPENED)

    result = _run(conn, runtime_dsn, *bindings, owner="worker-b")

    assert result.execution_status == "COMPENSATED"
    assert [c.input for c in release.calls] == [{"reservationId": "r-9", "sku": "book"}]
    assert refund.calls == []  # the charge never happened: nothing to refund
    ended = execution_row(conn, accepted.execution_id)
    # The failure that started it, as the case showed it (the requeue cleared the error).
    assert (ended["error_code"], ended["error_detail"]) == (errors.UNCERTAIN_WRITE, uncertain)
    assert uncertain
    assert _released_unchanged(conn, accepted)


def test_compensation__the_resolution_is_refused_where_a_write_cannot_be_undone(conn, make_flow):
    from reconciliation.compensate import execution_compensate
    from reconciliation.services import ResolutionRefused

    flow_id = make_flow(
        [_undoable("reserve", "RESERVE", "RELEASE"), action("charge", "CHARGE")],
    )
    accepted = enqueue(conn, flow_id)
    bindings = (
        binding("RESERVE", ScriptedAdapter(), effect="IDEMPOTENT_WRITE"),
        binding("CHARGE", ScriptedAdapter(), effect="IDEMPOTENT_WRITE"),
        binding("RELEASE", ScriptedAdapter(), effect="IDEMPOTENT_WRITE"),
    )
    conn.execute(
        "UPDATE execution SET status = 'RECONCILIATION_REQUIRED', lease_owner = NULL, "
        "lease_expires_at = NULL, error_code = 'CANCELLED_AFTER_WRITE' WHERE id = %s",
        [accepted.execution_id],
    )
    conn.execute(
        "INSERT INTO action_execution (execution_id, action_id, sequence, capability, "
        "capability_version, effect, status, input_hash, external_key, attempt, fencing_token) "
        "VALUES (%s, 'charge', 1, 'CHARGE', 1, 'IDEMPOTENT_WRITE', 'SUCCEEDED', %s, %s, 1, 1)",
        [accepted.execution_id, "0" * 64, f"{accepted.execution_id}:charge"],
    )
    operator = _operator("compensate_execution")
    with use_registry(registry(*bindings)), pytest.raises(ResolutionRefused) as refused:
        execution_compensate(execution_id=accepted.execution_id, reason="undo", operator=operator)
    assert refused.value.code == errors.NOT_COMPENSABLE
    assert "'charge' (IDEMPOTENT_WRITE) declares no compensation" in refused.value.detail
    assert execution_row(conn, accepted.execution_id)["status"] == "RECONCILIATION_REQUIRED"


def test_compensation__a_non_idempotent_undo_without_a_lookup_falls_back_to_reconciliation(
    conn, make_flow, runtime_dsn
):
    accepted = enqueue(conn, _shop(make_flow), data={"sku": "book"})
    release = ScriptedAdapter()
    result = _run(
        conn,
        runtime_dsn,
        binding("RESERVE", ScriptedAdapter(), effect="IDEMPOTENT_WRITE"),
        binding("CHARGE", ScriptedAdapter(default=permanent()), effect="NON_IDEMPOTENT_WRITE"),
        binding("RELEASE", release, effect="NON_IDEMPOTENT_WRITE"),
    )
    assert result.execution_status == "RECONCILIATION_REQUIRED"
    assert release.calls == []
    assert "whose route has no lookup" in execution_row(conn, accepted.execution_id)["error_detail"]


def test_compensation__a_running_execution_cancelled_after_its_write_is_fenced_then_undone(
    conn, make_flow, runtime_dsn
):
    import threading

    from tests.support.worker import GateAdapter

    flow_id = make_flow(
        [_undoable("reserve", "RESERVE", "RELEASE"), action("look", "LOOK")],
        on_failure="compensate",
    )
    accepted = enqueue(conn, flow_id)
    look, release = GateAdapter(watch_cancel=False), ScriptedAdapter()
    bindings = (
        binding("RESERVE", ScriptedAdapter(), effect="IDEMPOTENT_WRITE"),
        binding("LOOK", look),
        binding("RELEASE", release, effect="IDEMPOTENT_WRITE"),
    )
    outcome = {}
    with runtime_for(runtime_dsn, registry(*bindings)) as runtime:
        (found,) = claim(conn, "first", lease_seconds=30)
        holder = threading.Thread(target=lambda: outcome.update(r=run_claim(runtime, found)))
        holder.start()
        assert look.entered.wait(15)  # the reservation is done; the read is in flight
        with use_registry(registry(*bindings)):
            cancelled = execution_cancel(
                execution_id=accepted.execution_id, actor="alice", reason="not now"
            )
        look.gate.set()
        holder.join(15)
    assert cancelled.status == "PENDING"
    assert outcome["r"].status == "superseded"  # its late answer is fenced out
    assert checkpoint_rows(conn, accepted.execution_id)["look"]["status"] == "RUNNING"

    result = _run(conn, runtime_dsn, *bindings, owner="second")

    assert result.execution_status == "COMPENSATED"
    assert len(release.calls) == 1 and len(look.calls) == 1  # the read is not run again
    assert execution_row(conn, accepted.execution_id)["error_code"] == errors.CANCELLED_AFTER_WRITE
    assert _released_unchanged(conn, accepted)
