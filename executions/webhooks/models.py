"""The webhook tables: subscriptions, the outbox of events, and one delivery per event and
subscription (docs/adr/0020-webhooks-from-an-outbox.md).

Invariants kept by the database itself: an event is written by the trigger
`webhook_outbox_write` (migration 0017) in the transaction that changes an execution's status to
one a webhook reports, so none exists for a change that rolled back and none is missing for one
that committed; a delivery is PENDING until a 2xx (DELIVERED) or until its retries outlive
WEBHOOK_MAX_AGE_HOURS (FAILED), and is never removed while PENDING; deleting a subscription or an
event deletes its deliveries.
"""

import uuid

from django.db import models
from django.db.models import Q
from django.db.models.functions import Now

from ..models import Execution

MAX_URL_CHARS = 2048  # characters of a subscription's URL
MAX_DESCRIPTION_CHARS = 500  # characters of a subscription's description
MAX_BODY_KEPT = 1024  # characters of a receiver's answer kept on a delivery (the admin shows it)
MAX_ERROR_CHARS = 500  # characters of a delivery's last error


class EventType(models.TextChoices):
    SUCCEEDED = "execution.succeeded"
    FAILED = "execution.failed"
    CANCELLED = "execution.cancelled"
    COMPENSATED = "execution.compensated"
    RECONCILIATION_REQUIRED = "execution.reconciliation_required"
    SUSPENDED = "execution.suspended"
    PING = "webhook.ping"


# What a subscription may ask for: every event but the ping, which goes to whoever asks for one.
SUBSCRIBABLE = tuple(t for t in EventType if t != EventType.PING)


class DeliveryStatus(models.TextChoices):
    PENDING = "PENDING"  # due, in flight, or waiting for its next attempt
    DELIVERED = "DELIVERED"  # a 2xx answered
    FAILED = "FAILED"  # still refused after WEBHOOK_MAX_AGE_HOURS: given up, shown, never dropped


class WebhookSubscription(models.Model):
    """A tenant's receiver: where its events go, signed with its secret (and, for a while after
    a rotation, the previous one too)."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.CharField(max_length=255)
    url = models.CharField(max_length=MAX_URL_CHARS)
    events = models.JSONField(help_text="Event types sent to this URL (a JSON array).")
    description = models.CharField(max_length=MAX_DESCRIPTION_CHARS, blank=True, default="")
    secret = models.CharField(max_length=100, editable=False)
    previous_secret = models.CharField(  # noqa: DJ001  # null: no rotation in progress
        max_length=100, null=True, blank=True, editable=False
    )
    previous_secret_expires_at = models.DateTimeField(null=True, blank=True, editable=False)
    # Failed attempts since the last delivered one: `failing` from WEBHOOK_FAILING_AFTER on.
    consecutive_failures = models.IntegerField(db_default=0, editable=False)
    created_at = models.DateTimeField(db_default=Now(), editable=False)

    class Meta:
        db_table = "webhook_subscription"
        indexes = [models.Index(fields=["tenant", "created_at"], name="webhook_sub_tenant_idx")]

    def __str__(self) -> str:
        return f"{self.tenant}: {self.url}"


class WebhookEvent(models.Model):
    """One event of the outbox: what happened, to which execution, and the execution's view at
    that moment (`data`), so every attempt sends the same body."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.CharField(max_length=255)
    # No constraint in the database (migration 0029): only the outbox trigger writes an event,
    # for the execution whose change it reports, and executions are never deleted; checking it
    # locked that execution row once more in every finalising transaction (docs/adr/0020).
    execution = models.ForeignKey(
        Execution,
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="+",
        db_index=False,  # webhook_event_exec_idx
        db_constraint=False,
    )
    type = models.CharField(max_length=64, choices=EventType.choices)
    data = models.JSONField()
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        db_table = "webhook_event"
        indexes = [models.Index(fields=["execution", "created_at"], name="webhook_event_exec_idx")]

    def __str__(self) -> str:
        return f"{self.type} {self.id}"


class WebhookDelivery(models.Model):
    """One event on its way to one subscription: its attempts and the last answer."""

    id = models.BigAutoField(primary_key=True)  # the order deliveries of one execution go in
    # No constraint in the database either (migration 0029): a delivery is written by the same
    # statement as its event (the outbox trigger, a ping) and deleted with it (purgehistory).
    event = models.ForeignKey(
        WebhookEvent,
        on_delete=models.CASCADE,
        related_name="deliveries",
        db_index=False,
        db_constraint=False,
    )
    subscription = models.ForeignKey(
        WebhookSubscription, on_delete=models.CASCADE, related_name="deliveries", db_index=False
    )
    # The event's execution, copied so the claim keeps each execution's deliveries in order per
    # subscription with one index; null for a ping.
    execution_id = models.UUIDField(null=True, blank=True, editable=False)
    status = models.CharField(
        max_length=16, choices=DeliveryStatus.choices, db_default=DeliveryStatus.PENDING
    )
    attempts = models.IntegerField(db_default=0)
    # Bumped by every claim: the result of an attempt is written only by the claim that made it.
    claim_token = models.BigIntegerField(db_default=0)
    next_attempt_at = models.DateTimeField(db_default=Now())
    # While an attempt is in flight: the moment another claim may take it over. In no index, so a
    # claim setting it can be a HOT update (sql.WEBHOOK_DELIVERIES_CLAIM).
    held_until = models.DateTimeField(null=True, blank=True, editable=False)
    # Retries run until this moment plus WEBHOOK_MAX_AGE_HOURS: the event's creation, or the
    # operator's redelivery.
    retry_from = models.DateTimeField(db_default=Now())
    last_attempt_at = models.DateTimeField(null=True, blank=True)
    last_response_code = models.IntegerField(null=True, blank=True)
    last_error = models.CharField(  # noqa: DJ001
        max_length=MAX_ERROR_CHARS, null=True, blank=True
    )
    last_response_body = models.CharField(  # noqa: DJ001
        max_length=MAX_BODY_KEPT, null=True, blank=True
    )
    delivered_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        db_table = "webhook_delivery"
        verbose_name_plural = "webhook deliveries"
        permissions = [("redeliver_webhookdelivery", "Can redeliver a webhook delivery")]
        indexes = [
            # The delivery loop's claim: due work only, in order.
            models.Index(
                fields=["next_attempt_at", "id"],
                name="webhook_delivery_due_idx",
                condition=Q(status=DeliveryStatus.PENDING),
            ),
            # Order per execution and subscription: is an earlier one still pending? Its
            # leading column and its predicate (PENDING, said as neither settled status) are in no
            # other index, so its probes can use no other (sql.WEBHOOK_DELIVERIES_CLAIM).
            models.Index(
                fields=["execution_id", "subscription", "id"],
                name="webhook_delivery_exec_idx",
                condition=~Q(status__in=[DeliveryStatus.DELIVERED, DeliveryStatus.FAILED]),
            ),
            models.Index(fields=["event"], name="webhook_delivery_event_idx"),
            models.Index(fields=["subscription", "-id"], name="webhook_delivery_sub_idx"),
        ]
        constraints = [
            models.CheckConstraint(
                condition=Q(status__in=DeliveryStatus.values), name="webhook_delivery_status_valid"
            ),
        ]

    def __str__(self) -> str:
        return f"delivery {self.id}"
