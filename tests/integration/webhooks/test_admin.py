"""The webhooks in the admin: deliveries with their status, attempts, last answer and error, the
redeliver action behind its own permission, and subscriptions added with their secret shown once
and refused targets named."""

import psycopg
import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.urls import reverse

from executions import sql
from executions.webhooks.models import WebhookDelivery, WebhookSubscription

from .conftest import end, subscribe

pytestmark = pytest.mark.django_db(transaction=True)

DELIVERIES = "admin:executions_webhookdelivery_changelist"


def staff(*permissions: str) -> Client:
    user = User.objects.create_user("ops", password="x", is_staff=True)
    for codename in ("view_webhookdelivery", "view_webhooksubscription", *permissions):
        user.user_permissions.add(Permission.objects.get(codename=codename))
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def failed_delivery(runtime_conn, accepted) -> WebhookDelivery:
    subscribe("https://hooks.example.com/a", ["execution.failed"])
    end(runtime_conn, accepted(), "FAILED")
    runtime_conn.execute(
        "UPDATE webhook_delivery SET status = 'FAILED', attempts = 7, last_response_code = 503,"
        " last_error = 'answered 503', last_response_body = 'busy'"
    )
    return WebhookDelivery.objects.get()


def test_deliveries__listed_with_status_attempts_answer_and_error(failed_delivery):
    page = staff().get(reverse(DELIVERIES)).content.decode()
    for shown in ("execution.failed", "FAILED", ">7<", "503", "answered 503"):
        assert shown in page, shown
    one = Client()
    one.force_login(User.objects.get(username="ops"))
    body = one.get(reverse("admin:executions_webhookdelivery_change", args=[failed_delivery.pk]))
    assert body.status_code == 200 and "busy" in body.content.decode()


def test_redeliver__puts_a_failed_delivery_back_on_its_way_and_says_so(
    failed_delivery, runtime_dsn
):
    client = staff("redeliver_webhookdelivery")
    with psycopg.connect(runtime_dsn, autocommit=True) as listener:
        listener.execute(sql.LISTEN_WEBHOOKS)
        response = client.post(
            reverse(DELIVERIES), {"action": "redeliver", "_selected_action": [failed_delivery.pk]}
        )
        # An idle worker's delivery loop hears it and sends it now, not at its poll.
        heard = [n.channel for n in listener.notifies(timeout=5.0, stop_after=1)]
    assert response.status_code == 302
    assert heard == [sql.WEBHOOK_CHANNEL]
    failed_delivery.refresh_from_db()
    assert failed_delivery.status == "PENDING" and failed_delivery.attempts == 7


def test_redeliver__refused_without_its_permission(failed_delivery):
    response = staff().post(
        reverse(DELIVERIES), {"action": "redeliver", "_selected_action": [failed_delivery.pk]}
    )
    assert response.status_code == 403
    failed_delivery.refresh_from_db()
    assert failed_delivery.status == "FAILED"


def test_subscriptions__added_with_the_secret_shown_once_and_refused_targets_named(monkeypatch):
    from executions.webhooks import targets

    monkeypatch.setattr(targets, "resolve_addresses", lambda *_: ["93.184.216.34"])
    client = staff("add_webhooksubscription")
    add = reverse("admin:executions_webhooksubscription_add")
    refused = client.post(
        add, {"tenant": "acme", "url": "https://10.0.0.1/in", "events": ["execution.failed"]}
    )
    assert refused.status_code == 200 and "rule: private" in refused.content.decode()
    added = client.post(
        add,
        {"tenant": "acme", "url": "https://hooks.example.com/in", "events": ["execution.failed"]},
        follow=True,
    )
    subscription = WebhookSubscription.objects.get()
    assert subscription.secret in added.content.decode()
    for page in (
        reverse("admin:executions_webhooksubscription_changelist"),
        reverse("admin:executions_webhooksubscription_change", args=[subscription.pk]),
    ):
        shown = client.get(page)
        assert shown.status_code == 200 and "hooks.example.com" in shown.content.decode()
        assert subscription.secret not in shown.content.decode()


def test_subscriptions__the_admin_holds_the_same_address_rule_and_stores_the_url_normalised(
    monkeypatch,
):
    from executions.webhooks import targets

    monkeypatch.setattr(targets, "resolve_addresses", lambda *_: ["93.184.216.34"])
    client = staff("add_webhooksubscription")
    add = reverse("admin:executions_webhooksubscription_add")
    for url, rule in (
        ("https://[64:ff9b::a9fe:a9fe]/in", "link-local"),
        ("https://[2002:7f00:1::]/in", "loopback"),
        ("https://hooks.example.com/in\r\nX: 1", "url"),
    ):
        refused = client.post(add, {"tenant": "acme", "url": url, "events": ["execution.failed"]})
        assert refused.status_code == 200 and f"rule: {rule}" in refused.content.decode(), url
    assert not WebhookSubscription.objects.exists()
    client.post(
        add,
        {"tenant": "acme", "url": "HTTPS://HOOKS.Example.COM/In", "events": ["execution.failed"]},
    )
    assert WebhookSubscription.objects.get().url == "https://hooks.example.com/In"
