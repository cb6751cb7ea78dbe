"""Two delivery loops writing results for the same subscriptions lock them in one order, so
they cannot deadlock (WEBHOOK_DELIVERIES_RECORD; issue: "deadlock detected" between two
workers' cycles).

Before, the statement locked the subscriptions it counts in the order a scan met their row
versions: a version moved by an update made since one statement's snapshot, not since the
other's, is met first by one and last by the other. The test makes that happen on purpose, on
real connections, each step waiting on the server's own account of who waits for whom.
"""

import threading
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

from executions import sql
from tests.support.worker import wait_until

from .conftest import subscribe

pytestmark = pytest.mark.django_db(transaction=True)


def deliveries_for(owner: psycopg.Connection, subscription_ids: list[Any]) -> list[int]:
    """One delivery per subscription, claimed (token 1, held), in their order; its ids."""
    ids = []
    for subscription_id in subscription_ids:
        (event_id,) = owner.execute(
            "INSERT INTO webhook_event (id, tenant, type, data)"
            " VALUES (gen_random_uuid(), 'acme', 'webhook.ping', '{}') RETURNING id"
        ).fetchone()
        (delivery_id,) = owner.execute(
            "INSERT INTO webhook_delivery (event_id, subscription_id, claim_token, attempts,"
            " held_until) VALUES (%s, %s, 1, 1, clock_timestamp() + interval '1 hour')"
            " RETURNING id",
            [event_id, subscription_id],
        ).fetchone()
        ids.append(delivery_id)
    return ids


def failed(ids: list[int]) -> dict[str, Any]:
    items = [
        {"id": i, "token": 1, "delivered": False, "code": 500, "error": "answered 500"}
        | {"body": "", "delay": 60.0}
        for i in sorted(ids)
    ]
    return {"items": Jsonb(items), "max_age_seconds": 3600.0}


class Recording(threading.Thread):
    """WEBHOOK_DELIVERIES_RECORD on a connection of its own, in a thread: its backend's pid,
    and what it returned or raised."""

    def __init__(self, dsn: str, params: dict[str, Any]) -> None:
        super().__init__(daemon=True)
        self.conn = psycopg.connect(dsn, autocommit=True)
        self.pid = self.conn.info.backend_pid
        self.params = params
        self.rows: list[Any] | None = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.rows = self.conn.execute(sql.WEBHOOK_DELIVERIES_RECORD, self.params).fetchall()
        except BaseException as exc:
            self.error = exc
        finally:
            self.conn.close()


def blockers(conn: psycopg.Connection, pid: int) -> set[int]:
    return set(conn.execute("SELECT pg_blocking_pids(%s)", [pid]).fetchone()[0])


def test_two_records_for_the_same_subscriptions_never_deadlock(
    runtime_conn, runtime_dsn, migration_dsn
):
    # Three subscriptions, named in the order of their rows in the heap.
    for n in range(3):
        subscribe(f"https://hooks.example.com/{n}")
    first, second, third = (
        row[0] for row in runtime_conn.execute("SELECT id FROM webhook_subscription ORDER BY ctid")
    )
    with psycopg.connect(migration_dsn, autocommit=True) as owner:
        mine = deliveries_for(owner, [first, second, third])
        theirs = deliveries_for(owner, [first, second, third])

    # Each holds row locks in an open transaction.
    gate = psycopg.connect(runtime_dsn)
    holder = psycopg.connect(runtime_dsn)
    one = Recording(runtime_dsn, failed(mine))
    other = Recording(runtime_dsn, failed(theirs))
    try:
        # `one` takes its snapshot, then waits for a delivery of its own that `gate` locked.
        gate.execute("SELECT 1 FROM webhook_delivery WHERE id = %s FOR UPDATE", [mine[0]])
        one.start()
        wait_until(lambda: blockers(runtime_conn, one.pid) == {gate.info.backend_pid})
        # Since that snapshot the first subscription's row moved (a new version, after the
        # third's); `holder` locks the third.
        runtime_conn.execute(
            "UPDATE webhook_subscription SET consecutive_failures = 1 WHERE id = %s", [first]
        )
        holder.execute("SELECT 1 FROM webhook_subscription WHERE id = %s FOR UPDATE", [third])
        # `other`, on a newer snapshot, waits for the third (before, holding the second).
        other.start()
        wait_until(lambda: blockers(runtime_conn, other.pid) == {holder.info.backend_pid})
        # `one` goes on, to wait in turn (before: holding the first, for the second).
        gate.commit()
        wait_until(lambda: blockers(runtime_conn, one.pid) - {gate.info.backend_pid})
        holder.commit()  # before: `other` takes the third, then waits for the first
        one.join(15)
        other.join(15)
    finally:
        gate.close()
        holder.close()

    assert not one.is_alive() and not other.is_alive()
    assert one.error is None and other.error is None, (one.error, other.error)
    assert len(one.rows or []) == 3 and len(other.rows or []) == 3
    counts = runtime_conn.execute(
        "SELECT consecutive_failures FROM webhook_subscription WHERE id = ANY(%s)",
        [[first, second, third]],
    ).fetchall()
    assert sorted(c[0] for c in counts) == [2, 2, 3]  # each counted twice; the first was at 1
