"""The outbox: an event is written in the transaction of the status change it reports, for
every subscription of the execution's tenant asking for its type, with the execution's view."""

import json

import psycopg
import pytest

from executions import sql
from executions.api.serializers import ExecutionViewSerializer
from executions.models import ActionExecution, Execution
from executions.webhooks.services import webhook_ping
from executions.worker.database import WORKER_APPLICATION_NAME

from .conftest import deliveries, end, subscribe

pytestmark = pytest.mark.django_db(transaction=True)


def test_outbox__written_with_the_change_and_never_for_one_rolled_back(runtime_conn, accepted):
    hook = subscribe("https://hooks.example.com/a")
    rolled_back, committed = accepted(), accepted()
    with pytest.raises(RuntimeError), runtime_conn.transaction():
        end(runtime_conn, rolled_back, "FAILED")
        raise RuntimeError("the change rolls back")
    assert deliveries(runtime_conn, hook.id) == []
    end(runtime_conn, committed, "FAILED", error_code="PERMANENT_FAILURE")
    (delivery,) = deliveries(runtime_conn, hook.id)
    assert (delivery["type"], delivery["execution_id"], delivery["status"]) == (
        "execution.failed",
        committed,
        "PENDING",
    )


def test_outbox__event_data_is_the_execution_view(runtime_conn, accepted):
    subscribe("https://hooks.example.com/a")
    execution_id = accepted()
    runtime_conn.execute(
        "UPDATE execution SET status = 'SUCCEEDED', attempts = 1, finished_at = clock_timestamp(),"
        ' result = \'{"outcome": "OK", "targetState": "DONE"}\' WHERE id = %s',
        [execution_id],
    )
    (data,) = runtime_conn.execute(
        "SELECT data FROM webhook_event WHERE execution_id = %s", [execution_id]
    ).fetchone()
    view = json.loads(
        json.dumps(ExecutionViewSerializer(Execution.objects.get(id=execution_id)).data)
    )
    assert data == view
    assert data["outcome"] == "OK" and data["finishedAt"].endswith("Z")


def test_outbox__a_suspended_executions_data_is_its_view_with_what_it_waits_for(
    runtime_conn, accepted
):
    subscribe("https://hooks.example.com/a")
    execution_id = accepted()
    ActionExecution.objects.create(
        execution_id=execution_id,
        action_id="approval",
        sequence=0,
        capability="wait:approved",
        capability_version=1,
        effect="READ_ONLY",
        status="WAITING",
        input_hash="0" * 64,
        external_key=f"{execution_id}:approval",
        fencing_token=1,
    )
    runtime_conn.execute(
        "UPDATE execution SET status = 'SUSPENDED',"
        " next_attempt_at = clock_timestamp() + interval '1 hour' WHERE id = %s",
        [execution_id],
    )
    (data,) = runtime_conn.execute(
        "SELECT data FROM webhook_event WHERE execution_id = %s", [execution_id]
    ).fetchone()
    view = json.loads(
        json.dumps(ExecutionViewSerializer(Execution.objects.get(id=execution_id)).data)
    )
    assert data == view
    assert data["waitingFor"]["event"] == "approved" and data["waitingFor"]["deadline"]


def test_outbox__only_the_tenant_and_the_types_asked_for(runtime_conn, accepted):
    only_success = subscribe("https://hooks.example.com/s", ["execution.succeeded"])
    elsewhere = subscribe("https://hooks.example.com/g", ["execution.failed"], tenant="globex")
    end(runtime_conn, accepted(), "FAILED")  # acme, not asked for by acme's subscription
    end(runtime_conn, accepted(), "SUCCEEDED")
    end(runtime_conn, accepted(scope="globex"), "FAILED")
    assert [d["type"] for d in deliveries(runtime_conn, only_success.id)] == ["execution.succeeded"]
    assert [d["type"] for d in deliveries(runtime_conn, elsewhere.id)] == ["execution.failed"]


def test_outbox__every_reported_status_has_its_event_and_live_ones_none(runtime_conn, accepted):
    hook = subscribe(
        "https://hooks.example.com/all",
        [
            "execution.succeeded",
            "execution.failed",
            "execution.cancelled",
            "execution.reconciliation_required",
            "execution.suspended",
        ],
    )
    for status in ("RETRY_WAIT", "SUSPENDED", "RECONCILIATION_REQUIRED", "CANCELLED"):
        end(runtime_conn, accepted(), status)
    assert sorted(d["type"] for d in deliveries(runtime_conn, hook.id)) == [
        "execution.cancelled",
        "execution.reconciliation_required",
        "execution.suspended",
    ]


def test_outbox__without_subscriptions_writes_nothing(runtime_conn, accepted):
    end(runtime_conn, accepted(), "SUCCEEDED")
    assert runtime_conn.execute("SELECT count(*) FROM webhook_event").fetchone()[0] == 0


def test_outbox__other_writers_announce_it_once_per_transaction_a_runworker_not(
    runtime_conn, runtime_dsn, accepted
):
    hook = subscribe("https://hooks.example.com/a")
    ids = [accepted() for _ in range(4)]
    with (
        psycopg.connect(runtime_dsn, autocommit=True) as listener,
        psycopg.connect(
            runtime_dsn, autocommit=True, application_name=WORKER_APPLICATION_NAME
        ) as worker,
    ):
        listener.execute(sql.LISTEN_WEBHOOKS)
        end(worker, ids[0], "SUCCEEDED")  # a runworker's run: it wakes its own delivery loop
        with runtime_conn.transaction():  # the API's: many events, one announcement
            end(runtime_conn, ids[1], "FAILED")
            runtime_conn.execute(
                "UPDATE execution SET status = 'FAILED', finished_at = clock_timestamp()"
                " WHERE id = ANY(%s)",
                [ids[2:]],
            )
        # Delivered in commit order: one from the runworker's change would come first.
        heard = [(n.channel, n.payload) for n in listener.notifies(timeout=5.0, stop_after=1)]
        assert heard == [(sql.WEBHOOK_CHANNEL, "")]
        assert [n.channel for n in listener.notifies(timeout=0.2)] == []
    assert len(deliveries(runtime_conn, hook.id)) == 4


def test_ping__its_delivery_is_announced(runtime_dsn):
    hook = subscribe("https://hooks.example.com/a")
    with psycopg.connect(runtime_dsn, autocommit=True) as listener:
        listener.execute(sql.LISTEN_WEBHOOKS)
        webhook_ping(tenant="acme", webhook_id=str(hook.id))
        heard = [n.channel for n in listener.notifies(timeout=5.0, stop_after=1)]
    assert heard == [sql.WEBHOOK_CHANNEL]


def test_outbox__only_the_subscription_is_a_constraint(runtime_conn):
    """The event's execution and the delivery's event hold by construction (the trigger writes
    them together, purgehistory deletes them together): no check locks those rows at the commit
    of each finalising transaction. A subscription can be deleted while a delivery to it is
    written, so that reference stays checked."""
    references = runtime_conn.execute(
        "SELECT conrelid::regclass::text, confrelid::regclass::text FROM pg_constraint"
        " WHERE contype = 'f'"
        " AND conrelid IN ('webhook_event'::regclass, 'webhook_delivery'::regclass)"
    ).fetchall()
    assert references == [("webhook_delivery", "webhook_subscription")]
