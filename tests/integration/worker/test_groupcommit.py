"""Group commit of the hot-path writes: merged across runs, fenced and failing item by item."""

import psycopg
import pytest

from executions.queue.checkpoints import StartItem
from executions.queue.finalize import FinalizeItem
from executions.worker.groupcommit import GroupWrites
from executions.worker.loopthread import LoopThread
from tests.support.worker import (
    action,
    checkpoint_rows,
    claim,
    enqueue,
    execution_row,
    request_row,
    wait_until,
)

pytestmark = pytest.mark.django_db(transaction=True)

FAIL_POISONED = """
CREATE FUNCTION test_fail_poisoned() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.payload ? 'poison' THEN
        RAISE EXCEPTION 'poisoned completion';
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER test_fail_poisoned BEFORE INSERT ON audit_event
    FOR EACH ROW EXECUTE FUNCTION test_fail_poisoned();
"""


@pytest.fixture
def loop():
    running = LoopThread(name="test-groupcommit")
    yield running
    running.stop()


def _submit_all(loop, runtime_dsn, submit, items):
    """Submit each item from its own task and connection, on `loop`; return the tasks' futures
    and the results in item order."""
    results: list = [None] * len(items)
    errors: list = [None] * len(items)

    async def one(index):
        own = await psycopg.AsyncConnection.connect(runtime_dsn, autocommit=True)
        async with own:
            try:
                results[index] = await submit(own, items[index])
            except Exception as exc:  # reported to the test below
                errors[index] = exc

    return [loop.submit(one(i)) for i in range(len(items))], results, errors


def _claimed_starts(conn, make_flow, n):
    """`n` executions accepted and claimed, in acceptance order, and the start of each one's
    action: (execution ids, claims, start items)."""
    flow_id = make_flow([action("a", "NO_OP")])
    ids = [enqueue(conn, flow_id).execution_id for _ in range(n)]
    claims = sorted(
        claim(conn, "w", limit=n, lease_seconds=30), key=lambda c: ids.index(c.execution_id)
    )
    items = [StartItem(c.fence, "a", 0, "NO_OP", 1, "READ_ONLY", "0" * 64, 0) for c in claims]
    return ids, claims, items


def _hold_first_then_release(runtime_dsn, group, first_id, followers, start):
    """Block the first batch on a row lock until every follower has queued behind it."""
    with psycopg.connect(runtime_dsn) as locker:
        locker.execute("SELECT 1 FROM execution WHERE id = %s FOR UPDATE", [first_id])
        runs = start()
        wait_until(lambda: len(group._queue) == followers, what="the followers to queue up")
        locker.rollback()
    for run in runs:
        run.result(15)


def test_group_commit__merges_concurrent_starts_and_fences_each_item(
    conn, make_flow, runtime_dsn, loop
):
    ids, claims, items = _claimed_starts(conn, make_flow, 6)
    stale = claims[3]
    conn.execute(
        "UPDATE execution SET fencing_token = fencing_token + 1 WHERE id = %s", [stale.execution_id]
    )
    writes = GroupWrites(actor="t")
    state = {}

    def start():
        threads, results, errors = _submit_all(loop, runtime_dsn, writes.starts.submit, items[:1])
        state["first"] = (threads, results, errors)
        wait_until(lambda: writes.starts._leading, what="the first leader")
        more, results2, errors2 = _submit_all(loop, runtime_dsn, writes.starts.submit, items[1:])
        state["rest"] = (results2, errors2)
        return threads + more

    _hold_first_then_release(runtime_dsn, writes.starts, ids[0], 5, start)

    results = state["first"][1] + state["rest"][0]
    assert state["first"][2] + state["rest"][1] == [None] * 6
    assert results == [1, 1, 1, None, 1, 1]  # the superseded holder alone got nothing
    assert (writes.starts.batches, writes.starts.items) == (2, 6)  # one statement for five
    assert "a" not in checkpoint_rows(conn, stale.execution_id)
    assert checkpoint_rows(conn, ids[5])["a"]["status"] == "RUNNING"


def test_group_commit__a_failing_item_fails_alone(
    conn, make_flow, runtime_dsn, migration_dsn, loop
):
    flow_id = make_flow([])
    accepted = [enqueue(conn, flow_id) for _ in range(4)]
    ids = [a.execution_id for a in accepted]
    claims = sorted(
        claim(conn, "w", limit=4, lease_seconds=30), key=lambda c: ids.index(c.execution_id)
    )
    writes = GroupWrites(actor="t")
    items = [
        FinalizeItem(
            fence=c.fence,
            from_state="DRAFT",
            accepted_revision=2,
            request_version=2,
            action_ids=[],
            data={"n": index},
            target_state="DONE",
            result={"outcome": "OK", "targetState": "DONE"},
            payload={"poison": True} if index == 2 else {"transitionId": "go"},
        )
        for index, c in enumerate(claims)
    ]
    state = {}

    def start():
        threads, results, errors = _submit_all(loop, runtime_dsn, writes.finals.submit, items[:1])
        state["first"] = (results, errors)
        wait_until(lambda: writes.finals._leading, what="the first leader")
        more, results2, errors2 = _submit_all(loop, runtime_dsn, writes.finals.submit, items[1:])
        state["rest"] = (results2, errors2)
        return threads + more

    with psycopg.connect(migration_dsn, autocommit=True) as owner:
        owner.execute(FAIL_POISONED)
        try:
            _hold_first_then_release(runtime_dsn, writes.finals, ids[0], 3, start)
        finally:
            owner.execute("DROP TRIGGER test_fail_poisoned ON audit_event")
            owner.execute("DROP FUNCTION test_fail_poisoned()")

    results = state["first"][0] + state["rest"][0]
    errors = state["first"][1] + state["rest"][1]
    assert results == [3, 3, None, 3]
    assert [e is not None for e in errors] == [False, False, True, False]
    assert "poisoned completion" in str(errors[2])
    assert [execution_row(conn, i)["status"] for i in ids] == [
        "SUCCEEDED",
        "SUCCEEDED",
        "RUNNING",  # rolled back alone, left for recovery by lease
        "SUCCEEDED",
    ]
    assert request_row(conn, accepted[2].request_id)["data"] == {}
    assert request_row(conn, accepted[3].request_id)["data"] == {"n": 3}


def test_group_commit__a_run_cancelled_while_it_waits_strands_nobody(
    conn, make_flow, runtime_dsn, loop
):
    # A stuck run's task is cancelled while its start waits behind a batch in flight. The lead
    # passes on all the same: the runs behind it get their answers, none waits forever.
    ids, _, items = _claimed_starts(conn, make_flow, 3)
    writes = GroupWrites(actor="t")
    with psycopg.connect(runtime_dsn) as locker:
        locker.execute("SELECT 1 FROM execution WHERE id = %s FOR UPDATE", [ids[0]])
        first, results, errors = _submit_all(loop, runtime_dsn, writes.starts.submit, items[:1])
        wait_until(lambda: writes.starts._leading, what="the first leader")
        rest, results2, errors2 = _submit_all(loop, runtime_dsn, writes.starts.submit, items[1:])
        wait_until(lambda: len(writes.starts._queue) == 2, what="both followers to queue up")
        rest[0].cancel()  # the run whose item would lead the next batch is gone
        locker.rollback()
    first[0].result(15)
    rest[1].result(15)  # answered: the lead passed on without the cancelled run
    assert results + results2[1:] == [1, 1] and errors + errors2[1:] == [None, None]
    assert rest[0].cancelled()
    # A queued item is written whatever became of its run (its later writes are fenced).
    assert all(checkpoint_rows(conn, i)["a"]["status"] == "RUNNING" for i in ids)
    wait_until(lambda: not writes.starts._leading, what="the lead to end")


def test_group_commit__an_urgent_write_goes_alone_beside_a_batch_in_flight(
    conn, make_flow, runtime_dsn, loop
):
    # Under WORKER_FAIRNESS=tenant a newcomer's run is urgent (slots.Slots.urgent): its
    # start is written at once on the other connection, not behind the batch in flight nor in
    # the next one with the runs queued behind that batch.
    ids, _, items = _claimed_starts(conn, make_flow, 3)
    writes = GroupWrites(actor="t", connections=2)
    with psycopg.connect(runtime_dsn) as locker:
        locker.execute("SELECT 1 FROM execution WHERE id = %s FOR UPDATE", [ids[0]])
        first, results, errors = _submit_all(loop, runtime_dsn, writes.starts.submit, items[:1])
        wait_until(lambda: writes.starts._leading, what="the first leader")
        queued, results2, errors2 = _submit_all(loop, runtime_dsn, writes.starts.submit, items[1:2])
        wait_until(lambda: len(writes.starts._queue) == 1, what="a run queued behind it")
        urgent, results3, errors3 = _submit_all(
            loop, runtime_dsn, writes.urgent.starts.submit, items[2:]
        )
        urgent[0].result(15)  # written while the batch ahead is still held
        assert (results3, errors3) == ([1], [None])
        assert checkpoint_rows(conn, ids[2])["a"]["status"] == "RUNNING"
        assert "a" not in checkpoint_rows(conn, ids[0])
        assert "a" not in checkpoint_rows(conn, ids[1])
        locker.rollback()
    first[0].result(15)
    queued[0].result(15)
    assert (results + results2, errors + errors2) == ([1, 1], [None, None])
    assert (writes.starts.batches, writes.urgent.starts.batches) == (2, 1)
