"""Subscriptions' writes (the API and the admin call these), each its own transaction, and the
reads the API shows them by: always within the caller's tenant, anything else NOT_FOUND.

The secret is returned only by `webhook_create` and `webhook_rotate_secret`; every other read of
a subscription leaves it out.
"""

import datetime
from collections.abc import Sequence
from typing import Any

from django.db import connection, transaction
from django.db.models import QuerySet
from django.utils import timezone

from orquestador import errors
from orquestador.errors import CodedError

from .. import sql
from ..access import parse_id
from .config import FAILING_AFTER, MAX_SUBSCRIPTIONS, WebhookConfig, webhook_config
from .models import WebhookSubscription
from .signing import secret_new
from .targets import url_normalised, url_refusal


def webhook_status(subscription: WebhookSubscription) -> str:
    """`failing` while its deliveries keep failing (FAILING_AFTER attempts in a row), else
    `active`."""
    return "failing" if subscription.consecutive_failures >= FAILING_AFTER else "active"


def _target_checked(url: str, config: WebhookConfig) -> str:
    """`url` normalised, once the rules allow it (executions/webhooks/targets.py)."""
    refused = url_refusal(
        url, allow_http=config.allow_http, allow_private_networks=config.allow_private_networks
    )
    if refused is not None:
        rule, detail = refused
        raise CodedError(errors.WEBHOOK_URL_REFUSED, f"{detail} (rule: {rule})")
    return url_normalised(url)


def webhook_create(
    *, tenant: str, url: str, events: Sequence[str], description: str = ""
) -> tuple[WebhookSubscription, str]:
    """A new subscription of `tenant` and its secret (shown to the caller this once)."""
    url = _target_checked(url, webhook_config())
    secret = secret_new()
    with transaction.atomic():
        # One tenant's creations one at a time, so the cap holds under concurrency.
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(hashtext('webhooks:' || %s))", [tenant])
        if WebhookSubscription.objects.filter(tenant=tenant).count() >= MAX_SUBSCRIPTIONS:
            raise CodedError(
                errors.WEBHOOK_LIMIT_REACHED,
                f"the tenant already has {MAX_SUBSCRIPTIONS} webhook subscriptions; delete one "
                "first",
            )
        subscription = WebhookSubscription.objects.create(
            tenant=tenant,
            url=url,
            events=list(dict.fromkeys(events)),
            description=description,
            secret=secret,
        )
    subscription.refresh_from_db(fields=["created_at", "consecutive_failures"])
    return subscription, secret


def webhook_list(*, tenant: str) -> QuerySet[WebhookSubscription]:
    """The tenant's subscriptions, oldest first."""
    return WebhookSubscription.objects.filter(tenant=tenant).order_by("created_at", "id")


def webhook_get(*, tenant: str, webhook_id: str) -> WebhookSubscription:
    """The tenant's subscription `webhook_id`; NOT_FOUND for anything else."""
    parsed = parse_id(webhook_id)
    found = None if parsed is None else webhook_list(tenant=tenant).filter(id=parsed).first()
    if found is None:
        raise CodedError(errors.NOT_FOUND, "no such webhook")
    return found


def webhook_delete(*, tenant: str, webhook_id: str) -> None:
    """Delete the subscription and its deliveries (pending ones are not sent any more)."""
    subscription = webhook_get(tenant=tenant, webhook_id=webhook_id)
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("DELETE FROM webhook_delivery WHERE subscription_id = %s", [subscription.id])
        cursor.execute("DELETE FROM webhook_subscription WHERE id = %s", [subscription.id])


def webhook_rotate_secret(*, tenant: str, webhook_id: str) -> str:
    """A new secret; the current one keeps signing beside it for WEBHOOK_SECRET_OVERLAP_HOURS."""
    subscription = webhook_get(tenant=tenant, webhook_id=webhook_id)
    overlap = datetime.timedelta(seconds=webhook_config().secret_overlap_seconds)
    secret = secret_new()
    with transaction.atomic():
        locked = WebhookSubscription.objects.select_for_update().get(id=subscription.id)
        locked.previous_secret = locked.secret
        locked.previous_secret_expires_at = timezone.now() + overlap
        locked.secret = secret
        locked.save(update_fields=["previous_secret", "previous_secret_expires_at", "secret"])
    return secret


def webhook_ping(*, tenant: str, webhook_id: str) -> Any:
    """A `webhook.ping` event with its one delivery to this subscription; returns its id."""
    subscription = webhook_get(tenant=tenant, webhook_id=webhook_id)
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(sql.WEBHOOK_PING, {"subscription_id": subscription.id, "tenant": tenant})
        row = cursor.fetchone()
        if row is not None:  # an idle worker sends it now, not at its poll
            cursor.execute(sql.NOTIFY_WEBHOOKS)
    if row is None:  # deleted meanwhile
        raise CodedError(errors.NOT_FOUND, "no such webhook")
    return row[0]


def deliveries_redeliver(*, ids: Sequence[int]) -> int:
    """An operator's redelivery: each delivery due now, retried for WEBHOOK_MAX_AGE_HOURS
    again; returns how many."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(sql.WEBHOOK_DELIVERY_REDELIVER, {"ids": list(ids)})
        redelivered = len(cursor.fetchall())
        if redelivered:  # an idle worker sends them now, not at its poll
            cursor.execute(sql.NOTIFY_WEBHOOKS)
    return redelivered
