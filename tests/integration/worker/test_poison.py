"""The poison cap: the claim counts consecutive takeovers without progress, and the settlement
that replaces a run once they pass WORKER_MAX_RECLAIMS (docs/worker-protocol.md#poison-cap,
RECLAIMS_EXHAUSTED)."""

import asyncio
import time

import psycopg
import pytest

from executions.queue.checkpoints import (
    StartItem,
    SucceedItem,
    checkpoints_start,
    checkpoints_succeed,
)
from executions.queue.claims import executions_claim
from executions.queue.finalize import execution_exhaust_reclaims
from executions.queue.steps import run_sync
from executions.worker.metrics import RECLAIMS_EXHAUSTED
from executions.worker.writeretry import fenced_write
from orquestador.workerconfig import WorkerConfig
from tests.support.worker import (
    action,
    audit_events,
    claim,
    enqueue,
    execution_row,
    expire_lease,
    registry,
    request_row,
    running_scheduler,
    wait_until,
)

pytestmark = pytest.mark.django_db(transaction=True)

LEASE = 0.3  # seconds: each takeover waits for one lease to expire
CAP = 5


@pytest.fixture
def flow_id(make_flow):
    return make_flow([action("a", "NO_OP")])


def _takeover(conn, execution_id, owner="w", **kwargs):
    expire_lease(conn, execution_id)
    found = run_sync(conn, executions_claim(owner=owner, limit=1, lease_seconds=LEASE, **kwargs))
    assert [c.execution_id for c in found] == [execution_id]
    return found[0]


def _succeed_a(conn, found, effect="READ_ONLY"):
    fence = found.fence
    start = StartItem(fence, "a", 0, "NO_OP", 1, effect, "0" * 64, previous_attempt=0)
    attempt = run_sync(conn, checkpoints_start(items=[start]))[fence.execution_id]
    saved = run_sync(
        conn, checkpoints_succeed(items=[SucceedItem(fence, "a", attempt, {}, effect)])
    )
    assert saved == {fence.execution_id}


def test_claim__counts_consecutive_takeovers_and_marks_the_one_past_the_cap(conn, flow_id):
    accepted = enqueue(conn, flow_id, notify=False)
    first = claim(conn, "w", lease_seconds=LEASE)[0]
    assert (first.reclaims, first.poisoned(CAP)) == (0, False)
    counts = [_takeover(conn, accepted.execution_id).reclaims for _ in range(CAP + 1)]
    assert counts == [1, 2, 3, 4, 5, 6]
    row = execution_row(conn, accepted.execution_id)
    assert (row["reclaims"], row["attempts"]) == (6, 7)
    assert row["claimed_at"] is not None


def test_claim__a_checkpoint_that_progressed_starts_the_count_again(conn, flow_id):
    accepted = enqueue(conn, flow_id, notify=False)
    claim(conn, "w", lease_seconds=LEASE)
    assert _takeover(conn, accepted.execution_id).reclaims == 1
    found = _takeover(conn, accepted.execution_id)
    assert found.reclaims == 2
    _succeed_a(conn, found)  # progress under this holder
    assert _takeover(conn, accepted.execution_id).reclaims == 0
    assert _takeover(conn, accepted.execution_id).reclaims == 1  # none since: counting again


def test_claim__takeovers_after_a_database_outage_do_not_count(conn, flow_id):
    accepted = enqueue(conn, flow_id, notify=False)
    claim(conn, "w", lease_seconds=LEASE)
    assert _takeover(conn, accepted.execution_id).reclaims == 1
    assert _takeover(conn, accepted.execution_id, outage=True).reclaims == 1
    assert _takeover(conn, accepted.execution_id).reclaims == 2


def test_exhaust_reclaims__fails_and_releases_when_no_write_is_outstanding(conn, flow_id):
    accepted = enqueue(conn, flow_id, notify=False)
    found = claim(conn, "w", lease_seconds=60)[0]
    status = run_sync(conn, execution_exhaust_reclaims(fence=found.fence, reclaims=6, actor="w"))
    assert status == "FAILED"
    row = execution_row(conn, accepted.execution_id)
    assert (row["status"], row["error_code"]) == ("FAILED", "RECLAIMS_EXHAUSTED")
    assert "6 times" in row["error_detail"]
    assert request_row(conn, accepted.request_id)["blocked_by_id"] is None
    events = audit_events(conn, accepted.request_id)
    assert events[-1][0] == "EXECUTION_FAILED"
    assert events[-1][1]["errorCode"] == "RECLAIMS_EXHAUSTED"
    assert events[-1][1]["reclaims"] == 6


def test_exhaust_reclaims__reconciliation_when_a_write_succeeded(conn, flow_id):
    accepted = enqueue(conn, flow_id, notify=False)
    found = claim(conn, "w", lease_seconds=60)[0]
    _succeed_a(conn, found, effect="IDEMPOTENT_WRITE")
    status = run_sync(conn, execution_exhaust_reclaims(fence=found.fence, reclaims=6, actor="w"))
    assert status == "RECONCILIATION_REQUIRED"
    row = execution_row(conn, accepted.execution_id)
    assert (row["status"], row["error_code"]) == ("RECONCILIATION_REQUIRED", "RECLAIMS_EXHAUSTED")
    assert request_row(conn, accepted.request_id)["blocked_by_id"] == accepted.execution_id
    assert audit_events(conn, accepted.request_id)[-1][0] == "RECONCILIATION_REQUIRED"


# ------------------------------------------------------------------------------
# A fenced write that fails with a database error
# ------------------------------------------------------------------------------
def _raising(conn, times: int, sqlstate: str = "40001"):
    """A write that fails with a real server error `times` times, then returns 'written'."""
    tries = []

    async def write():
        tries.append(1)
        if len(tries) <= times:
            conn.execute(
                f"DO $$ BEGIN RAISE EXCEPTION 'refused' USING ERRCODE = '{sqlstate}'; END $$"
            )
        return "written"

    return write, tries


def test_fenced_write__retries_a_database_error_with_backoff_and_logs_the_statement(conn, caplog):
    write, tries = _raising(conn, 2)
    with caplog.at_level("WARNING", logger="executions.worker"):
        result = asyncio.run(
            fenced_write(
                "EXECUTION_FINALIZE", write, budget_seconds=5, log_extra={"execution_id": "e1"}
            )
        )
    assert (result, len(tries)) == ("written", 3)
    logged = [r for r in caplog.records if r.getMessage().startswith("fenced write failed")]
    assert [(r.statement, r.sqlstate, r.execution_id) for r in logged] == [
        ("EXECUTION_FINALIZE", "40001", "e1"),
        ("EXECUTION_FINALIZE", "40001", "e1"),
    ]


def test_fenced_write__gives_the_lease_up_once_the_budget_is_spent(conn, caplog):
    write, tries = _raising(conn, 1000, sqlstate="P0001")
    started = time.monotonic()
    with (
        caplog.at_level("WARNING", logger="executions.worker"),
        pytest.raises(psycopg.errors.RaiseException),
    ):
        asyncio.run(fenced_write("CHECKPOINT_SUCCEED", write, budget_seconds=0.5, log_extra={}))
    assert time.monotonic() - started < 2.5
    assert len(tries) >= 2
    assert caplog.records[-1].getMessage() == "fenced write failed; giving the lease up"


# ------------------------------------------------------------------------------
# End to end: a final statement that always fails
# ------------------------------------------------------------------------------
POISON_CONFIG = WorkerConfig(
    concurrency=1,
    batch=1,
    poll_ms=50,
    lease_seconds=1.0,
    renew_seconds=0.4,
    drain_seconds=1.0,
    retry_base_seconds=0.01,
    retry_max_seconds=0.05,
    max_reclaims=2,
)


@pytest.fixture
def refuse_state_change(migration_dsn):
    """A trigger (the schema owner's) that refuses to move one request out of its state, so its
    execution's final statement fails every time, while a release (same state) goes through."""
    with psycopg.connect(migration_dsn, autocommit=True) as owner:
        owner.execute(
            "CREATE TABLE poison_target (id uuid PRIMARY KEY);"
            "CREATE FUNCTION poison_refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            "IF NEW.state <> OLD.state AND EXISTS (SELECT 1 FROM poison_target WHERE id = NEW.id)"
            " THEN RAISE EXCEPTION 'refused by test' USING ERRCODE = 'P0001'; END IF; "
            "RETURN NEW; END $$;"
            "CREATE TRIGGER poison_refuse BEFORE UPDATE ON request "
            "FOR EACH ROW EXECUTE FUNCTION poison_refuse();"
            "GRANT SELECT ON poison_target TO PUBLIC"
        )
        try:
            yield lambda request_id: owner.execute(
                "INSERT INTO poison_target VALUES (%s)", [request_id]
            )
        finally:
            owner.execute(
                "DROP TRIGGER poison_refuse ON request; DROP FUNCTION poison_refuse();"
                "DROP TABLE poison_target"
            )


def test_scheduler__settles_a_poison_execution_once_past_the_cap(
    conn, runtime_dsn, make_flow, refuse_state_change, caplog
):
    accepted = enqueue(conn, make_flow([action("a", "NO_OP")]), notify=False)
    refuse_state_change(accepted.request_id)
    with (
        caplog.at_level("INFO", logger="executions.worker"),
        running_scheduler(runtime_dsn, registry(), config=POISON_CONFIG) as scheduler,
    ):
        # The settle commits before the worker counts it: wait for both, not the row alone.
        wait_until(
            lambda: (
                execution_row(conn, accepted.execution_id)["status"] == "FAILED"
                and scheduler.metrics.value(RECLAIMS_EXHAUSTED) >= 1
            ),
            timeout=30,
            what="the poison cap to settle the execution",
        )
        assert scheduler.metrics.value(RECLAIMS_EXHAUSTED) == 1
    row = execution_row(conn, accepted.execution_id)
    assert (row["error_code"], row["reclaims"]) == ("RECLAIMS_EXHAUSTED", 3)
    # First claim (the checkpoint progresses), a takeover that sees that progress, then three
    # without: the third is past the cap of two and settles instead of running.
    assert row["attempts"] == 5
    assert request_row(conn, accepted.request_id)["blocked_by_id"] is None
    failed = [r for r in caplog.records if r.getMessage().startswith("fenced write failed")]
    assert failed and all(r.statement == "EXECUTION_FINALIZE" for r in failed)
    assert any(r.getMessage() == "poison execution settled" for r in caplog.records)
