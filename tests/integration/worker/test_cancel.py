"""Durable cancellation: a fenced write in the database that never needs the worker; then the
worker holding a RUNNING execution is told, and stops it."""

import dataclasses
import io

import pytest
from django.core.management import CommandError, call_command

from executions.queue.cancel import execution_cancel
from executions.queue.leases import ExecutionSuperseded
from executions.worker.metrics import LEASE_LOSSES
from orquestador import errors
from orquestador.errors import CodedError
from tests.integration.actions.conftest import catalog_registry
from tests.support.providers import JsonProvider, slow
from tests.support.worker import (
    DEFAULT_TIMEOUT,
    FAST,
    GateAdapter,
    ScriptedAdapter,
    SimulatedCrash,
    action,
    audit_events,
    binding,
    checkpoint_rows,
    claim,
    enqueue,
    execution_row,
    ok,
    registry,
    request_row,
    run_claim,
    running_scheduler,
    runtime_for,
    start_checkpoint,
    wait_until,
)

pytestmark = pytest.mark.django_db(transaction=True)


def test_cancel__a_pending_execution_ends_cancelled_and_releases_its_request(conn, make_flow):
    accepted = enqueue(conn, make_flow([action("a", "NO_OP")]))

    result = execution_cancel(execution_id=accepted.execution_id, actor="ops", reason="duplicate")

    assert (result.status, result.fencing_token) == ("CANCELLED", 1)
    execution = execution_row(conn, accepted.execution_id)
    assert (execution["status"], execution["fencing_token"]) == ("CANCELLED", 1)
    assert execution["finished_at"] is not None
    request = request_row(conn, accepted.request_id)
    assert (request["blocked_by_id"], request["version"], request["state"]) == (None, 3, "DRAFT")
    assert audit_events(conn, accepted.request_id)[-1] == (
        "EXECUTION_CANCELLED",
        {"reason": "duplicate", "previousStatus": "PENDING", "status": "CANCELLED"},
    )
    assert claim(conn, "worker-a") == []  # nothing left to claim


def test_cancel__fences_out_the_holder_of_a_running_execution(conn, make_flow):
    accepted = enqueue(conn, make_flow([action("a", "A")]))
    (found,) = claim(conn, "worker-a", lease_seconds=30)

    assert execution_cancel(execution_id=accepted.execution_id, actor="ops", reason="x").status == (
        "CANCELLED"
    )

    with pytest.raises(ExecutionSuperseded):
        start_checkpoint(
            conn=conn,
            fence=found.fence,
            action_id="a",
            sequence=0,
            capability="A",
            capability_version=1,
            effect="READ_ONLY",
            input_hash="0" * 64,
            previous_attempt=0,
        )
    assert execution_row(conn, accepted.execution_id)["fencing_token"] == found.fence.token + 1


def test_cancel__with_an_uncertain_write_goes_to_reconciliation(conn, make_flow, runtime_dsn):
    accepted = enqueue(conn, make_flow([action("charge", "W")]))
    crashing = ScriptedAdapter(script=[SimulatedCrash()])
    with runtime_for(
        runtime_dsn, registry(binding("W", crashing, effect="NON_IDEMPOTENT_WRITE"))
    ) as runtime:
        (found,) = claim(conn, "worker-a", lease_seconds=30)
        with pytest.raises(SimulatedCrash):
            run_claim(runtime, found)

    result = execution_cancel(execution_id=accepted.execution_id, actor="ops", reason="stop")

    assert result.status == "RECONCILIATION_REQUIRED"
    execution = execution_row(conn, accepted.execution_id)
    assert (execution["status"], execution["error_code"]) == (
        "RECONCILIATION_REQUIRED",
        errors.UNCERTAIN_WRITE,
    )
    assert execution["lease_owner"] is None
    assert request_row(conn, accepted.request_id)["blocked_by_id"] == accepted.execution_id
    assert [t for t, _ in audit_events(conn, accepted.request_id)][-2:] == [
        "EXECUTION_CANCELLED",
        "RECONCILIATION_REQUIRED",
    ]
    assert audit_events(conn, accepted.request_id)[-1][1] == {
        "actionId": "charge",
        "errorCode": errors.UNCERTAIN_WRITE,
    }


def test_cancel__after_a_successful_write_goes_to_reconciliation(conn, make_flow, runtime_dsn):
    accepted = enqueue(conn, make_flow([action("charge", "W"), action("ship", "S")]))
    reg = registry(
        binding("W", ScriptedAdapter(default=ok({"id": "c"})), effect="NON_IDEMPOTENT_WRITE"),
        binding("S", ScriptedAdapter(script=[SimulatedCrash()])),
    )
    with runtime_for(runtime_dsn, reg) as runtime:
        (found,) = claim(conn, "worker-a", lease_seconds=30)
        with pytest.raises(SimulatedCrash):
            run_claim(runtime, found)

    result = execution_cancel(execution_id=accepted.execution_id, actor="ops", reason="stop")

    assert result.status == "RECONCILIATION_REQUIRED"
    assert execution_row(conn, accepted.execution_id)["error_code"] == (
        errors.CANCELLED_AFTER_WRITE
    )
    assert request_row(conn, accepted.request_id)["blocked_by_id"] == accepted.execution_id


def test_cancel__refuses_an_execution_that_already_ended(conn, make_flow):
    accepted = enqueue(conn, make_flow([action("a", "NO_OP")]))
    execution_cancel(execution_id=accepted.execution_id, actor="ops", reason="once")
    with pytest.raises(CodedError) as refused:
        execution_cancel(execution_id=accepted.execution_id, actor="ops", reason="twice")
    assert refused.value.code == errors.NOT_CANCELLABLE
    assert [t for t, _ in audit_events(conn, accepted.request_id)].count("EXECUTION_CANCELLED") == 1


def test_cancel__needs_a_reason_and_a_real_execution(conn, make_flow):
    accepted = enqueue(conn, make_flow([action("a", "NO_OP")]))
    with pytest.raises(CodedError) as blank:
        execution_cancel(execution_id=accepted.execution_id, actor="ops", reason="  ")
    assert blank.value.code == errors.REASON_REQUIRED
    with pytest.raises(CodedError) as missing:
        execution_cancel(execution_id="not-a-uuid", actor="ops", reason="x")
    assert missing.value.code == errors.NOT_FOUND
    assert execution_row(conn, accepted.execution_id)["status"] == "PENDING"


def test_cancel__a_running_execution_with_its_write_in_flight_lands_in_reconciliation_once(
    conn, make_flow, runtime_dsn
):
    """The holder is inside a non-idempotent write when the cancellation comes: the execution
    goes to reconciliation, the write's late success is fenced out, and nothing repeats it."""
    accepted = enqueue(conn, make_flow([action("charge", "W"), action("ship", "S")]))
    charge = GateAdapter(ok({"id": "c-1"}), watch_cancel=False)
    ship = ScriptedAdapter()
    reg = registry(binding("W", charge, effect="NON_IDEMPOTENT_WRITE"), binding("S", ship))
    with running_scheduler(runtime_dsn, reg) as scheduler:
        assert charge.entered.wait(DEFAULT_TIMEOUT), "the write never started"

        result = execution_cancel(execution_id=accepted.execution_id, actor="ops", reason="stop")

        assert result.status == "RECONCILIATION_REQUIRED"
        charge.gate.set()  # the provider answers after all
        wait_until(lambda: scheduler.busy == 0, what="the holder to give up")
        assert claim(conn, "worker-b") == []  # reconciliation is not claimable work
        assert scheduler.claimed == 1

    assert len(charge.calls) == 1
    assert ship.calls == []
    execution = execution_row(conn, accepted.execution_id)
    assert (execution["status"], execution["error_code"]) == (
        "RECONCILIATION_REQUIRED",
        errors.UNCERTAIN_WRITE,
    )
    assert execution["fencing_token"] == result.fencing_token
    assert checkpoint_rows(conn, accepted.execution_id)["charge"]["status"] == "RUNNING"
    assert request_row(conn, accepted.request_id)["blocked_by_id"] == accepted.execution_id
    assert claim(conn, "worker-b") == []


def test_cancelexecution__cancels_and_prints_the_outcome(conn, make_flow):
    accepted = enqueue(conn, make_flow([action("a", "NO_OP")]))
    out = io.StringIO()

    call_command("cancelexecution", str(accepted.execution_id), reason="duplicate", stdout=out)

    assert out.getvalue().strip() == f"{accepted.execution_id} CANCELLED"
    assert execution_row(conn, accepted.execution_id)["status"] == "CANCELLED"
    assert request_row(conn, accepted.request_id)["blocked_by_id"] is None
    (event,) = conn.execute(
        "SELECT actor, payload FROM audit_event WHERE type = 'EXECUTION_CANCELLED'"
    ).fetchall()
    assert event[0].startswith("command:")
    assert event[1]["reason"] == "duplicate"


def test_cancelexecution__a_write_done_goes_to_reconciliation(conn, make_flow, runtime_dsn):
    accepted = enqueue(conn, make_flow([action("charge", "W"), action("ship", "S")]))
    reg = registry(
        binding("W", ScriptedAdapter(default=ok({"id": "c"})), effect="NON_IDEMPOTENT_WRITE"),
        binding("S", ScriptedAdapter(script=[SimulatedCrash()])),
    )
    with runtime_for(runtime_dsn, reg) as runtime:
        (found,) = claim(conn, "worker-a", lease_seconds=30)
        with pytest.raises(SimulatedCrash):
            run_claim(runtime, found)
    out = io.StringIO()

    call_command("cancelexecution", str(accepted.execution_id), reason="stop", stdout=out)

    assert out.getvalue().strip() == f"{accepted.execution_id} RECONCILIATION_REQUIRED"
    assert request_row(conn, accepted.request_id)["blocked_by_id"] == accepted.execution_id


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--reason", " "], "REASON_REQUIRED"),
        (["--reason", "x" * 2001], "REASON_REQUIRED"),
    ],
)
def test_cancelexecution__refuses_a_blank_or_overlong_reason(conn, make_flow, args, fragment):
    accepted = enqueue(conn, make_flow([action("a", "NO_OP")]))
    with pytest.raises(CommandError, match=fragment):
        call_command("cancelexecution", str(accepted.execution_id), *args)
    assert execution_row(conn, accepted.execution_id)["status"] == "PENDING"


def test_cancelexecution__refuses_an_unknown_or_ended_execution(conn, make_flow):
    accepted = enqueue(conn, make_flow([action("a", "NO_OP")]))
    call_command("cancelexecution", str(accepted.execution_id), reason="once", stdout=io.StringIO())
    with pytest.raises(CommandError, match="NOT_CANCELLABLE: the execution is already CANCELLED"):
        call_command("cancelexecution", str(accepted.execution_id), reason="twice")
    with pytest.raises(CommandError, match="NOT_FOUND"):
        call_command("cancelexecution", "00000000-0000-0000-0000-000000000000", reason="x")


def test_cancelexecution__needs_a_reason_argument():
    with pytest.raises(CommandError, match="--reason"):
        call_command("cancelexecution", "00000000-0000-0000-0000-000000000000")


# -- the holder is stopped: the worker learns of the cancellation on its listen connection ---
def slow_then_charge(provider):
    contract = {"timeout_seconds": 30, "max_attempts": 3}
    return catalog_registry(
        {
            "contracts": {
                "quote@1": {**contract, "effect": "READ_ONLY"},
                "charge@1": {**contract, "effect": "NON_IDEMPOTENT_WRITE"},
            },
            "routes": {
                "quote@1": {"adapter": "http.json", "url": provider.url("/quote")},
                "charge@1": {"adapter": "http.json", "url": provider.url("/charge")},
            },
        }
    )


@pytest.mark.parametrize("slots", [1, 2], ids=["every-slot-busy", "a-slot-free"])
def test_cancel__stops_the_worker_holding_a_running_execution_long_before_its_lease(
    conn, make_flow, runtime_dsn, slots
):
    """The cancellation runs on another connection (as the API, the admin and the command do);
    the worker holding the execution hears of it on its listen connection, whether its claim
    loop is idle or all its slots are busy, and stops the slot: the slow READ_ONLY call is
    abandoned and the write after it never starts. Renewals every 20 s of a 60 s lease could
    not have told it within the deadline below."""
    config = dataclasses.replace(
        FAST, lease_seconds=60, renew_seconds=20, concurrency=slots, batch=slots
    )
    with JsonProvider() as provider:
        provider.plan("/quote", slow(25))
        flow_id = make_flow([action("quote", "quote"), action("charge", "charge")])
        with running_scheduler(runtime_dsn, slow_then_charge(provider), config=config) as worker:
            accepted = enqueue(conn, flow_id)
            provider.wait_for_calls(1, "/quote")
            assert worker.busy == 1
            # A slow read's RUNNING checkpoint is written half a second into its call: let it
            # land first.
            wait_until(
                lambda: "quote" in checkpoint_rows(conn, accepted.execution_id),
                timeout=5,
                what="the quote's RUNNING checkpoint",
            )

            result = execution_cancel(
                execution_id=accepted.execution_id, actor="ops", reason="customer withdrew"
            )

            assert result.status == "CANCELLED"  # a read in flight is no write outstanding
            wait_until(lambda: worker.busy == 0, timeout=5, what="the worker to stop its slot")
            assert worker.metrics.value(LEASE_LOSSES) == 1  # the holder it stopped
        assert provider.requests("/charge") == []  # the later action never started
        assert len(provider.requests("/quote")) == 1  # and nothing was called twice
    execution = execution_row(conn, accepted.execution_id)
    assert (execution["status"], execution["fencing_token"]) == ("CANCELLED", 2)
    checkpoints = checkpoint_rows(conn, accepted.execution_id)
    assert list(checkpoints) == ["quote"]  # left as the holder started it; no charge
    assert checkpoints["quote"]["attempt"] == 1
    kinds = [kind for kind, _ in audit_events(conn, accepted.request_id)]
    assert kinds == ["TRANSITION_ACCEPTED", "EXECUTION_CANCELLED"]
