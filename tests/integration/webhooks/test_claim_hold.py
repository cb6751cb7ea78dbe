"""The claim's hold (`held_until`): in no index, so a claim rewrites no index entry (a HOT
update), and it keeps a delivery in flight from a second claim only until it passes or the
attempt's result ends it."""

import psycopg
import pytest
from psycopg.types.json import Jsonb

from executions import sql
from tests.support.worker import wait_until

from .conftest import end, subscribe

pytestmark = pytest.mark.django_db(transaction=True)

MAX_AGE_SECONDS = 3600.0


def claim(conn: psycopg.Connection, *, hold_seconds: float, limit: int = 50) -> list[tuple]:
    return conn.execute(
        sql.WEBHOOK_DELIVERIES_CLAIM, {"limit": limit, "hold_seconds": hold_seconds}
    ).fetchall()


def test_claim__rewrites_no_index_entry(runtime_conn, runtime_dsn, accepted):
    subscribe("https://hooks.example.com/a")
    for _ in range(20):
        end(runtime_conn, accepted(), "SUCCEEDED")
    with psycopg.connect(runtime_dsn) as conn:  # one transaction: its own statistics
        claimed = claim(conn, hold_seconds=15.0)
        updated, hot = conn.execute(
            "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_xact_user_tables"
            " WHERE relname = 'webhook_delivery'"
        ).fetchone()
        conn.commit()
    assert len(claimed) == 20
    assert (updated, hot) == (20, 20)


def test_claim__a_held_delivery_is_claimed_again_once_its_hold_passes(
    runtime_conn, runtime_dsn, accepted
):
    subscribe("https://hooks.example.com/a")
    end(runtime_conn, accepted(), "SUCCEEDED")
    with psycopg.connect(runtime_dsn, autocommit=True) as conn:
        ((first_id, first_token, first_attempts, *_),) = claim(conn, hold_seconds=0.5)
        assert claim(conn, hold_seconds=0.5) == []  # in flight: held
        (again,) = wait_until(lambda: claim(conn, hold_seconds=60.0), what="the hold to pass")
    assert again[:3] == (first_id, first_token + 1, first_attempts + 1)


def test_record__a_retry_due_before_the_hold_would_pass_is_claimed_then(
    runtime_conn, runtime_dsn, accepted
):
    subscribe("https://hooks.example.com/a")
    end(runtime_conn, accepted(), "SUCCEEDED")
    with psycopg.connect(runtime_dsn, autocommit=True) as conn:
        ((delivery_id, token, *_),) = claim(conn, hold_seconds=60.0)
        item = {
            "id": delivery_id,
            "token": token,
            "delivered": False,
            "code": 500,
            "error": "answered 500",
            "body": "",
            "delay": 0.0,
        }
        written = conn.execute(
            sql.WEBHOOK_DELIVERIES_RECORD,
            {"items": Jsonb([item]), "max_age_seconds": MAX_AGE_SECONDS},
        ).fetchall()
        assert written == [(delivery_id, "PENDING", False)]
        (again,) = claim(conn, hold_seconds=60.0)  # its result ended the hold
    assert again[:2] == (delivery_id, token + 1)
