"""Fixtures for the webhook tests: a flow, accepted executions, subscriptions, and how a status
change is made (any committed UPDATE of the status is one: the trigger writes the outbox)."""

import uuid
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from executions.webhooks.models import WebhookSubscription
from executions.webhooks.signing import secret_new
from tests.support.worker import create_flow, enqueue, flow_definition


@pytest.fixture
def flow_id(runtime_conn: psycopg.Connection) -> int:
    return create_flow(runtime_conn, flow_definition([], key=f"hooks-{uuid.uuid4().hex[:8]}"))


@pytest.fixture
def accepted(runtime_conn: psycopg.Connection, flow_id: int) -> Callable[..., uuid.UUID]:
    def make(scope: str = "acme") -> uuid.UUID:
        return enqueue(runtime_conn, flow_id, scope=scope, notify=False).execution_id

    return make


def end(conn: psycopg.Connection, execution_id: uuid.UUID, status: str, **fields: Any) -> None:
    """Change the execution's status (and finish it, for a final one), committed."""
    final = status in ("SUCCEEDED", "FAILED", "CANCELLED")
    conn.execute(
        "UPDATE execution SET status = %s, error_code = %s,"
        " finished_at = CASE WHEN %s THEN clock_timestamp() END WHERE id = %s",
        [status, fields.get("error_code"), final, execution_id],
    )


def subscribe(url: str, events: list[str] | None = None, tenant: str = "acme"):
    return WebhookSubscription.objects.create(
        tenant=tenant,
        url=url,
        events=events or ["execution.succeeded", "execution.failed", "execution.suspended"],
        secret=secret_new(),
    )


def deliveries(conn: psycopg.Connection, subscription_id: Any) -> list[dict[str, Any]]:
    with conn.cursor(row_factory=psycopg.rows.dict_row) as cur:
        return cur.execute(
            "SELECT d.*, e.type FROM webhook_delivery AS d JOIN webhook_event AS e"
            " ON e.id = d.event_id WHERE d.subscription_id = %s ORDER BY d.id",
            [subscription_id],
        ).fetchall()
