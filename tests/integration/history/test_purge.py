"""purgehistory: old final executions lose their checkpoints, attempt history and payloads,
nothing else does."""

import threading
import uuid

import psycopg
import pytest
from django.db import connection
from psycopg.types.json import Jsonb

from executions.models import EventStatus
from executions.queue.history import history_purge
from tests.support.worker import (
    action,
    audit_events,
    checkpoint_rows,
    claim,
    create_flow,
    enqueue,
    execution_row,
    flow_definition,
    start_checkpoint,
)

pytestmark = pytest.mark.django_db(transaction=True)

EVENT_STATUS = EventStatus.values[0]
OLD, RECENT = 40, 5  # days ago; the purge below takes what finished more than 30 days ago


@pytest.fixture
def flow(runtime_conn) -> int:
    return create_flow(runtime_conn, flow_definition([action("a", "A"), action("b", "B")]))


def finished(conn: psycopg.Connection, flow: int, status: str, days_ago: int) -> uuid.UUID:
    """An execution that ran both actions (the first on its second attempt) and ended `status`
    `days_ago` days ago."""
    accepted = enqueue(conn, flow, notify=False)
    conn.execute(
        "INSERT INTO action_attempt (execution_id, action_id, attempt, status, error_code, "
        "fencing_token, started_at, finished_at) VALUES (%s, 'a', 1, 'FAILED', 'HTTP_503', 1, "
        "now(), now())",
        [accepted.execution_id],
    )
    for sequence, action_id in enumerate(("a", "b")):
        conn.execute(
            "INSERT INTO action_execution (execution_id, action_id, sequence, capability, "
            "capability_version, effect, status, input_hash, external_key, attempt, "
            "fencing_token, output, error_detail, finished_at) VALUES (%s, %s, %s, 'A', 1, "
            "'READ_ONLY', 'SUCCEEDED', %s, %s, 1, 1, %s, 'provider said something', now())",
            [
                accepted.execution_id,
                action_id,
                sequence,
                "0" * 64,
                f"{accepted.execution_id}:{action_id}",
                Jsonb({"secret": "output"}),
            ],
        )
    conn.execute(
        "UPDATE execution SET status = %s, attempts = 1, fencing_token = 1, "
        "result = %s, error_code = %s, error_detail = 'detail with a provider secret', "
        "finished_at = now() - make_interval(days => %s) WHERE id = %s",
        [
            status,
            Jsonb({"outcome": "OK", "targetState": "DONE"}),
            None if status == "SUCCEEDED" else "PERMANENT_FAILURE",
            days_ago,
            accepted.execution_id,
        ],
    )
    if status != "RECONCILIATION_REQUIRED":
        conn.execute("UPDATE request SET blocked_by_id = NULL WHERE id = %s", [accepted.request_id])
    return accepted.execution_id


def events_of(conn: psycopg.Connection, execution_id: uuid.UUID) -> int:
    return conn.execute(
        "SELECT count(*) FROM execution_event WHERE execution_id = %s", [execution_id]
    ).fetchone()[0]


def attempts_of(conn: psycopg.Connection, execution_id: uuid.UUID) -> int:
    return conn.execute(
        "SELECT count(*) FROM action_attempt WHERE execution_id = %s", [execution_id]
    ).fetchone()[0]


def audit_count(conn: psycopg.Connection) -> int:
    return conn.execute("SELECT count(*) FROM audit_event").fetchone()[0]


def test_purge__removes_checkpoints_and_payloads_of_old_final_executions_only(runtime_conn, flow):
    conn = runtime_conn
    purged = [finished(conn, flow, s, OLD) for s in ("SUCCEEDED", "FAILED", "CANCELLED")]
    recent = finished(conn, flow, "SUCCEEDED", RECENT)
    waiting = finished(conn, flow, "RECONCILIATION_REQUIRED", OLD)
    pending = enqueue(conn, flow, notify=False).execution_id
    running = enqueue(conn, flow, notify=False)
    (held,) = claim(conn, "worker-a", lease_seconds=30)
    assert held.execution_id in (pending, running.execution_id)
    conn.execute(
        "INSERT INTO execution_event (execution_id, event_id, event, action_id, payload, "
        "fingerprint, status, actor) VALUES (%s, 'ev-1', 'signed', 'a', '{}', %s, %s, 'alice'), "
        "(%s, 'ev-1', 'signed', 'a', '{}', %s, %s, 'alice')",
        [purged[0], "0" * 64, EVENT_STATUS, waiting, "0" * 64, EVENT_STATUS],
    )
    audit_before = audit_count(conn)
    kept = {eid: execution_row(conn, eid) for eid in (recent, waiting)}

    batches = []
    result = history_purge(
        older_than_days=30, batch=2, pause_seconds=0, on_batch=lambda r: batches.append(r.batches)
    )

    assert (result.executions, result.checkpoints, result.events, result.batches) == (3, 6, 1, 2)
    assert result.attempts == 3
    assert events_of(conn, purged[0]) == 0
    assert events_of(conn, waiting) == 1
    assert batches == [1, 2]
    for execution_id in purged:
        row = execution_row(conn, execution_id)
        assert checkpoint_rows(conn, execution_id) == {}
        assert attempts_of(conn, execution_id) == 0
        assert row["purged_at"] is not None
        assert (row["error_detail"], row["actor_snapshot"]) == (None, {})
        # What the execution view shows stays.
        assert row["result"] == {"outcome": "OK", "targetState": "DONE"}
        assert row["status"] in ("SUCCEEDED", "FAILED", "CANCELLED")
    for execution_id, before in kept.items():
        assert execution_row(conn, execution_id) == {
            **before,
            "lease_valid": execution_row(conn, execution_id)["lease_valid"],
        }
        assert set(checkpoint_rows(conn, execution_id)) == {"a", "b"}
        assert attempts_of(conn, execution_id) == 1
    assert audit_count(conn) == audit_before
    assert audit_events(conn, running.request_id)[0][0] == "TRANSITION_ACCEPTED"
    # Live work is untouched: the holder's fenced write still lands.
    start_checkpoint(conn=conn, fence=held.fence)
    assert execution_row(conn, held.execution_id)["purged_at"] is None

    again = history_purge(older_than_days=30, pause_seconds=0)
    assert (again.executions, again.checkpoints, again.batches) == (0, 0, 0)


def test_purge__never_waits_on_a_row_another_transaction_holds(runtime_conn, runtime_dsn, flow):
    conn = runtime_conn
    locked, free = (finished(conn, flow, "SUCCEEDED", OLD) for _ in range(2))
    holder = psycopg.connect(runtime_dsn)
    try:
        holder.execute("SELECT 1 FROM execution WHERE id = %s FOR UPDATE", [locked])
        done = threading.Event()
        outcome = {}

        def purge() -> None:
            try:
                outcome["result"] = history_purge(older_than_days=30, pause_seconds=0)
                done.set()
            finally:
                connection.close()  # this thread's own Django connection

        thread = threading.Thread(target=purge, daemon=True)
        thread.start()
        assert done.wait(10), "the purge waited on a locked row"
        thread.join(10)
        assert outcome["result"].executions == 1
        assert execution_row(conn, free)["purged_at"] is not None
        assert checkpoint_rows(conn, locked) != {}
    finally:
        holder.rollback()
        holder.close()

    assert history_purge(older_than_days=30, pause_seconds=0).executions == 1
    assert checkpoint_rows(conn, locked) == {}


@pytest.mark.parametrize(("days", "batch"), [(0, 10), (-1, 10), (30, 0), (30, 10_001)])
def test_purge__refuses_bad_bounds(days, batch):
    with pytest.raises(ValueError, match=r"older_than_days|batch"):
        history_purge(older_than_days=days, batch=batch)
