"""The webhook API: a tenant's subscriptions under scope webhooks:admin, secrets shown only on
creation and rotation, refused targets named by rule, other tenants' subscriptions 404."""

import re

import pytest
from django.test import override_settings

from executions.webhooks import targets
from executions.webhooks.models import WebhookDelivery

from .conftest import assert_error, caller

pytestmark = pytest.mark.django_db

HOOKS = "/api/v1/webhooks"
BODY = {"url": "https://hooks.example.com/in", "events": ["execution.succeeded"]}


@pytest.fixture(autouse=True)
def public_dns(monkeypatch):
    # Names resolve to a public address: the tests do not depend on a resolver.
    monkeypatch.setattr(targets, "resolve_addresses", lambda *_: ["93.184.216.34"])


@pytest.fixture
def ops(api):
    return caller(sub="ops", tenant="acme", scope="webhooks:admin")


@pytest.fixture
def ops_elsewhere(api):
    return caller(sub="ops", tenant="globex", scope="webhooks:admin")


def test_webhooks__created_with_its_secret_then_listed_and_read_without(ops):
    created = ops.post(HOOKS, {**BODY, "description": "orders"})
    assert created.status_code == 201, created.content
    view = created.json()
    assert view["secret"].startswith("whsec_") and len(view["secret"]) > 40
    assert view["status"] == "active" and view["description"] == "orders"
    assert set(view) == {"id", "url", "events", "description", "createdAt", "status", "secret"}
    listed = ops.get(HOOKS).json()["results"]
    assert [h["id"] for h in listed] == [view["id"]]
    assert "secret" not in listed[0]
    one = ops.get(f"{HOOKS}/{view['id']}").json()
    assert "secret" not in one and one["url"] == BODY["url"]


def test_webhooks__another_tenant_sees_none_of_them(ops, ops_elsewhere):
    hook = ops.post(HOOKS, BODY).json()
    assert ops_elsewhere.get(HOOKS).json() == {"results": []}
    for method in ("get", "delete"):
        response = getattr(ops_elsewhere.client, method)(
            f"{HOOKS}/{hook['id']}", **ops_elsewhere.headers
        )
        assert_error(response, 404, "NOT_FOUND")
    for action in ("rotate-secret", "ping"):
        assert_error(ops_elsewhere.post(f"{HOOKS}/{hook['id']}/{action}", {}), 404, "NOT_FOUND")
    assert_error(ops.get(f"{HOOKS}/not-a-uuid"), 404, "NOT_FOUND")


def test_webhooks__need_the_scope(alice):
    assert_error(alice.get(HOOKS), 403, "FORBIDDEN", "webhooks:admin")
    assert_error(alice.post(HOOKS, BODY), 403, "FORBIDDEN")


@pytest.mark.parametrize(
    ("url", "rule"),
    [
        ("http://hooks.example.com/in", "https"),
        ("https://127.0.0.1:9000/in", "loopback"),
        ("https://10.0.0.8/in", "private"),
        ("https://169.254.169.254/latest", "link-local"),
    ],
)
def test_webhooks__a_refused_target_names_its_rule(ops, url, rule):
    assert_error(ops.post(HOOKS, {**BODY, "url": url}), 422, "WEBHOOK_URL_REFUSED", rule)


@pytest.mark.parametrize(
    ("url", "rule"),
    [
        ("https://[::127.0.0.1]/", "loopback"),  # IPv4-compatible
        ("https://[::ffff:10.0.0.8]/", "private"),  # IPv4-mapped
        ("https://[64:ff9b::127.0.0.1]/", "loopback"),  # NAT64
        ("https://[64:ff9b::a9fe:a9fe]/", "link-local"),  # NAT64 to 169.254.169.254
        ("https://[64:ff9b:1::a00:8]/", "private"),  # local-use NAT64
        ("https://[2002:7f00:1::]/", "loopback"),  # 6to4
        ("https://[2001:0:4136:e378::80ff:fffe]/", "loopback"),  # Teredo, client 127.0.0.1
        ("https://hooks.example.com:0/in", "url"),
        ("https://hooks.example.com:70000/in", "url"),
    ],
)
def test_webhooks__an_ipv6_form_carrying_a_refused_address_or_a_bad_port(ops, url, rule):
    assert_error(ops.post(HOOKS, {**BODY, "url": url}), 422, "WEBHOOK_URL_REFUSED", f"rule: {rule}")
    assert ops.get(HOOKS).json() == {"results": []}


@pytest.mark.parametrize(
    "url",
    [
        " https://hooks.example.com/in",
        "https://hooks.example.com/in ",
        "https://hooks.example.com/in\r\nX-Injected: 1",
        "https://hooks.example.com/\tin",
        "https://hooks.example.com/in\n",
        "https://hooks.example.com/\u200bin",
    ],
)
def test_webhooks__whitespace_or_a_control_character_is_refused_not_trimmed(ops, url):
    assert_error(
        ops.post(HOOKS, {**BODY, "url": url}),
        400,
        "INVALID_BODY",
        "url",
        "must not contain whitespace or control characters",
    )
    assert ops.get(HOOKS).json() == {"results": []}


def test_webhooks__scheme_and_host_are_stored_in_lower_case(ops):
    created = ops.post(HOOKS, {**BODY, "url": "HTTPS://Hooks.EXAMPLE.com:8443/In?Key=V"})
    assert created.status_code == 201, created.content
    stored = "https://hooks.example.com:8443/In?Key=V"
    assert created.json()["url"] == stored
    assert ops.get(f"{HOOKS}/{created.json()['id']}").json()["url"] == stored


def test_webhooks__the_test_switches_allow_a_loopback_receiver(ops):
    with override_settings(WEBHOOK_ALLOW_HTTP=True, WEBHOOK_ALLOW_PRIVATE_NETWORKS=True):
        created = ops.post(HOOKS, {**BODY, "url": "http://127.0.0.1:9000/in"})
    assert created.status_code == 201, created.content


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"url": BODY["url"]}, "events"),
        ({**BODY, "events": []}, "events"),
        ({**BODY, "events": ["execution.nope"]}, "events"),
        ({**BODY, "events": ["webhook.ping"]}, "events"),
        ({**BODY, "events": "execution.failed"}, "events"),
        ({**BODY, "url": 7}, "url"),
        ({**BODY, "url": "x" * 2049}, "url"),
        ({**BODY, "secret": "mine"}, "secret"),
    ],
)
def test_webhooks__a_bad_body_names_the_field(ops, body, field):
    assert_error(ops.post(HOOKS, body), 400, "INVALID_BODY", field)


def test_webhooks__rotate_ping_and_delete(ops):
    hook = ops.post(HOOKS, BODY).json()
    rotated = ops.post(f"{HOOKS}/{hook['id']}/rotate-secret", {})
    assert rotated.status_code == 200 and rotated.json()["secret"] != hook["secret"]
    pinged = ops.post(f"{HOOKS}/{hook['id']}/ping", {})
    assert pinged.status_code == 202, pinged.content
    delivery = WebhookDelivery.objects.select_related("event").get(subscription_id=hook["id"])
    assert (
        delivery.event.type == "webhook.ping" and str(delivery.event.id) == pinged.json()["eventId"]
    )
    assert ops.client.delete(f"{HOOKS}/{hook['id']}", **ops.headers).status_code == 204
    assert_error(ops.get(f"{HOOKS}/{hook['id']}"), 404, "NOT_FOUND")
    assert not WebhookDelivery.objects.filter(subscription_id=hook["id"]).exists()


def test_webhooks__at_most_a_hundred_per_tenant(ops, ops_elsewhere):
    for _ in range(100):
        assert ops.post(HOOKS, BODY).status_code == 201
    assert_error(ops.post(HOOKS, BODY), 409, "WEBHOOK_LIMIT_REACHED")
    assert ops_elsewhere.post(HOOKS, BODY).status_code == 201


def test_webhooks__the_schema_states_the_rule_as_a_pattern(api):
    from django.test import Client

    schema = Client().get("/api/schema/", {"format": "json"}).json()
    pattern = schema["components"]["schemas"]["WebhookCreate"]["properties"]["url"]["pattern"]
    # What a client generated from the schema checks is what the server refuses with 400.
    compiled = re.compile(pattern.replace("$", r"\Z"))
    assert compiled.search("https://hooks.example.com/in")
    for refused in (" https://x/", "https://x/\n", "https://x/\r\n", "https://x/\u200b", "\x00"):
        assert not compiled.search(refused), refused
