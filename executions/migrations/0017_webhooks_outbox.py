"""Completion webhooks: subscriptions, the outbox and its deliveries, and the trigger that writes
the outbox in the transaction of each status change a webhook reports (docs/adr/0017)."""

import uuid

import django.db.models.deletion
import django.db.models.functions.datetime
from django.db import migrations, models

# How a moment looks in the execution view (DRF's ISO 8601: UTC as Z, microseconds only when
# there are some), so an event's `data` reads exactly as GET /api/v1/executions/{id} does.
VIEW_TIME = """
CREATE FUNCTION webhook_time(t timestamptz) RETURNS text LANGUAGE sql STABLE AS $$
SELECT CASE
           WHEN t IS NULL THEN NULL
           WHEN mod(date_part('microseconds', t)::bigint, 1000000) = 0
           THEN to_char(t AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"')
           ELSE to_char(t AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')
       END
$$;
"""

# The execution view (executions/api/serializers.py, ExecutionViewSerializer) of one row, as the
# event's `data`; tests/integration/webhooks/test_outbox.py holds the two to the same answer.
EXECUTION_VIEW = """
CREATE FUNCTION webhook_execution_view(e execution) RETURNS jsonb LANGUAGE sql STABLE AS $$
SELECT jsonb_build_object(
           'id', e.id,
           'requestId', e.request_id,
           'transitionId', e.transition_id,
           'status', e.status,
           'outcome', e.result -> 'outcome',
           'targetState', e.result -> 'targetState',
           'errorCode', e.error_code,
           'attempts', e.attempts,
           'createdAt', webhook_time(e.created_at),
           'finishedAt', webhook_time(e.finished_at)
       ) || CASE WHEN e.status <> 'SUSPENDED' THEN '{}'::jsonb ELSE COALESCE((
           SELECT jsonb_build_object('waitingFor', jsonb_build_object(
                      'actionId', c.action_id,
                      'event', CASE WHEN c.status = 'WAITING'
                                    THEN substr(c.capability, length('wait:') + 1)
                                    ELSE 'callback' END,
                      'deadline', webhook_time(e.next_attempt_at)))
             FROM action_execution AS c
            WHERE c.execution_id = e.id AND c.status IN ('WAITING', 'ACCEPTED')
            ORDER BY c.sequence
            LIMIT 1
       ), '{}'::jsonb) END
$$;
"""

# The one place every reported state change writes its event: an execution whose status changes
# to anything but live work (PENDING, RUNNING, RETRY_WAIT) gets the event
# `execution.<status in lower case>` for every subscription of its tenant that asks for it, in the
# same transaction, whichever statement made the change (the worker's finalisation and failures,
# a cancellation, a wait, an operator's resolution). No subscription asking: one index probe.
OUTBOX_WRITE = """
CREATE FUNCTION webhook_outbox_write() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    kind text := 'execution.' || lower(NEW.status);
    event uuid;
BEGIN
    IF NOT EXISTS (
        SELECT 1 FROM webhook_subscription AS s WHERE s.tenant = NEW.scope AND s.events ? kind
    ) THEN
        RETURN NULL;
    END IF;
    INSERT INTO webhook_event (id, tenant, execution_id, type, data, created_at)
    VALUES (gen_random_uuid(), NEW.scope, NEW.id, kind, webhook_execution_view(NEW),
            clock_timestamp())
    RETURNING id INTO event;
    INSERT INTO webhook_delivery (event_id, subscription_id, execution_id, status, attempts,
                                  claim_token, next_attempt_at, retry_from, created_at)
    SELECT event, s.id, NEW.id, 'PENDING', 0, 0, clock_timestamp(), clock_timestamp(),
           clock_timestamp()
      FROM webhook_subscription AS s
     WHERE s.tenant = NEW.scope AND s.events ? kind
     ORDER BY s.id;
    RETURN NULL;
END
$$;
CREATE TRIGGER webhook_outbox_write AFTER UPDATE OF status ON execution
    FOR EACH ROW
    WHEN (OLD.status IS DISTINCT FROM NEW.status
          AND NEW.status NOT IN ('PENDING', 'RUNNING', 'RETRY_WAIT'))
    EXECUTE FUNCTION webhook_outbox_write();
"""
UNDO = """
DROP TRIGGER webhook_outbox_write ON execution;
DROP FUNCTION webhook_outbox_write();
DROP FUNCTION webhook_execution_view(execution);
DROP FUNCTION webhook_time(timestamptz);
"""


class Migration(migrations.Migration):
    dependencies = [
        ("executions", "0016_fairness_claim_indexes"),
    ]

    operations = [
        migrations.CreateModel(
            name="WebhookEvent",
            fields=[
                (
                    "id",
                    models.UUIDField(
                        default=uuid.uuid4, editable=False, primary_key=True, serialize=False
                    ),
                ),
                ("tenant", models.CharField(max_length=255)),
                (
                    "type",
                    models.CharField(
                        choices=[
                            ("execution.succeeded", "Succeeded"),
                            ("execution.failed", "Failed"),
                            ("execution.cancelled", "Cancelled"),
                            ("execution.compensated", "Compensated"),
                            ("execution.reconciliation_required", "Reconciliation Required"),
                            ("execution.suspended", "Suspended"),
                            ("webhook.ping", "Ping"),
                        ],
                        max_length=64,
                    ),
                ),
                ("data", models.JSONField()),
                (
                    "created_at",
                    models.DateTimeField(db_default=django.db.models.functions.datetime.Now()),
                ),
                (
                    "execution",
                    models.ForeignKey(
                        blank=True,
                        db_index=False,
                        null=True,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="executions.execution",
                    ),
                ),
            ],
            options={
                "db_table": "webhook_event",
            },
        ),
        migrations.CreateModel(
            name="WebhookSubscription",
            fields=[
                (
                    "id",
                    models.UUIDField(
                        default=uuid.uuid4, editable=False, primary_key=True, serialize=False
                    ),
                ),
                ("tenant", models.CharField(max_length=255)),
                ("url", models.CharField(max_length=2048)),
                (
                    "events",
                    models.JSONField(help_text="Event types sent to this URL (a JSON array)."),
                ),
                ("description", models.CharField(blank=True, default="", max_length=500)),
                ("secret", models.CharField(editable=False, max_length=100)),
                (
                    "previous_secret",
                    models.CharField(blank=True, editable=False, max_length=100, null=True),
                ),
                (
                    "previous_secret_expires_at",
                    models.DateTimeField(blank=True, editable=False, null=True),
                ),
                ("consecutive_failures", models.IntegerField(db_default=0, editable=False)),
                (
                    "created_at",
                    models.DateTimeField(
                        db_default=django.db.models.functions.datetime.Now(), editable=False
                    ),
                ),
            ],
            options={
                "db_table": "webhook_subscription",
                "indexes": [
                    models.Index(fields=["tenant", "created_at"], name="webhook_sub_tenant_idx")
                ],
            },
        ),
        migrations.CreateModel(
            name="WebhookDelivery",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                ("execution_id", models.UUIDField(blank=True, editable=False, null=True)),
                (
                    "status",
                    models.CharField(
                        choices=[
                            ("PENDING", "Pending"),
                            ("DELIVERED", "Delivered"),
                            ("FAILED", "Failed"),
                        ],
                        db_default="PENDING",
                        max_length=16,
                    ),
                ),
                ("attempts", models.IntegerField(db_default=0)),
                ("claim_token", models.BigIntegerField(db_default=0)),
                (
                    "next_attempt_at",
                    models.DateTimeField(db_default=django.db.models.functions.datetime.Now()),
                ),
                (
                    "retry_from",
                    models.DateTimeField(db_default=django.db.models.functions.datetime.Now()),
                ),
                ("last_attempt_at", models.DateTimeField(blank=True, null=True)),
                ("last_response_code", models.IntegerField(blank=True, null=True)),
                ("last_error", models.CharField(blank=True, max_length=500, null=True)),
                ("last_response_body", models.CharField(blank=True, max_length=1024, null=True)),
                ("delivered_at", models.DateTimeField(blank=True, null=True)),
                (
                    "created_at",
                    models.DateTimeField(db_default=django.db.models.functions.datetime.Now()),
                ),
                (
                    "event",
                    models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="deliveries",
                        to="executions.webhookevent",
                    ),
                ),
                (
                    "subscription",
                    models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="deliveries",
                        to="executions.webhooksubscription",
                    ),
                ),
            ],
            options={
                "verbose_name_plural": "webhook deliveries",
                "db_table": "webhook_delivery",
                "permissions": [("redeliver_webhookdelivery", "Can redeliver a webhook delivery")],
            },
        ),
        migrations.AddIndex(
            model_name="webhookevent",
            index=models.Index(fields=["execution", "created_at"], name="webhook_event_exec_idx"),
        ),
        migrations.AddIndex(
            model_name="webhookdelivery",
            index=models.Index(
                condition=models.Q(("status", "PENDING")),
                fields=["next_attempt_at", "id"],
                name="webhook_delivery_due_idx",
            ),
        ),
        migrations.AddIndex(
            model_name="webhookdelivery",
            index=models.Index(
                condition=models.Q(("status", "PENDING")),
                fields=["subscription", "execution_id", "id"],
                name="webhook_delivery_order_idx",
            ),
        ),
        migrations.AddIndex(
            model_name="webhookdelivery",
            index=models.Index(fields=["event"], name="webhook_delivery_event_idx"),
        ),
        migrations.AddIndex(
            model_name="webhookdelivery",
            index=models.Index(fields=["subscription", "-id"], name="webhook_delivery_sub_idx"),
        ),
        migrations.AddConstraint(
            model_name="webhookdelivery",
            constraint=models.CheckConstraint(
                condition=models.Q(("status__in", ["PENDING", "DELIVERED", "FAILED"])),
                name="webhook_delivery_status_valid",
            ),
        ),
        migrations.RunSQL(VIEW_TIME + EXECUTION_VIEW + OUTBOX_WRITE, reverse_sql=UNDO),
    ]
