"""The delivery loop against a real receiver on 127.0.0.1: signed, at least once with a stable
id, in order per execution, retried with backoff until the maximum age, `failing` shown, and the
address rules held on the address actually connected to."""

import asyncio
import datetime
import random
import socket
import time
from typing import Any

import aiohttp
import pytest
from django.test import override_settings
from psycopg_pool import AsyncConnectionPool

from executions.webhooks import services, targets
from executions.webhooks.config import WebhookConfig
from executions.webhooks.delivery import WebhookDeliverer, retry_delay
from executions.webhooks.models import WebhookSubscription
from executions.webhooks.sender import Attempt, WebhookSender
from executions.webhooks.signing import signature_verify
from tests.support.receiver import TEST_CONFIG, Receiver, delivering, poke
from tests.support.worker import wait_until

from .conftest import deliveries, end, subscribe

pytestmark = pytest.mark.django_db(transaction=True)

RELAXED = {"WEBHOOK_ALLOW_HTTP": True, "WEBHOOK_ALLOW_PRIVATE_NETWORKS": True}


def settled(conn, hook) -> list[dict[str, Any]]:
    rows = deliveries(conn, hook.id)
    return rows if rows and all(r["status"] != "PENDING" for r in rows) else []


def test_delivery__signed_once_with_a_stable_event_id(runtime_conn, runtime_dsn, accepted):
    with Receiver() as receiver, delivering(runtime_dsn) as deliverer:
        hook = subscribe(receiver.url)
        execution_id = accepted()
        end(runtime_conn, execution_id, "SUCCEEDED")
        poke(deliverer)
        (row,) = wait_until(lambda: settled(runtime_conn, hook), what="the delivery")
    (got,) = receiver.received
    body = got.body
    assert body["id"] == got.headers["Orquestador-Event-Id"] == str(row["event_id"])
    assert body["type"] == "execution.succeeded"
    assert body["data"]["id"] == str(execution_id) and body["data"]["status"] == "SUCCEEDED"
    assert signature_verify(
        header=got.headers["Orquestador-Signature"], body=got.raw, secret=hook.secret
    )
    assert not signature_verify(
        header=got.headers["Orquestador-Signature"], body=got.raw + b" ", secret=hook.secret
    )
    assert (row["status"], row["attempts"], row["last_response_code"]) == ("DELIVERED", 1, 200)


def test_delivery__a_rotation_signs_with_both_secrets(runtime_conn, runtime_dsn, accepted):
    with Receiver() as receiver, delivering(runtime_dsn) as deliverer:
        with override_settings(**RELAXED):
            hook, old = services.webhook_create(
                tenant="acme", url=receiver.url, events=["execution.failed"]
            )
            new = services.webhook_rotate_secret(tenant="acme", webhook_id=str(hook.id))
        end(runtime_conn, accepted(), "FAILED")
        poke(deliverer)
        wait_until(lambda: settled(runtime_conn, hook), what="the delivery")
    (got,) = receiver.received
    header = got.headers["Orquestador-Signature"]
    assert header.count("v1=") == 2 and old != new
    assert signature_verify(header=header, body=got.raw, secret=old)
    assert signature_verify(header=header, body=got.raw, secret=new)
    # Once the overlap has passed, only the new secret signs.
    WebhookSubscription.objects.filter(id=hook.id).update(
        previous_secret_expires_at=datetime.datetime(2000, 1, 1, tzinfo=datetime.UTC)
    )
    with Receiver() as receiver, delivering(runtime_dsn) as deliverer:
        WebhookSubscription.objects.filter(id=hook.id).update(url=receiver.url)
        end(runtime_conn, accepted(), "FAILED")
        poke(deliverer)
        wait_until(lambda: receiver.received, what="the second delivery")
    header = receiver.received[0].headers["Orquestador-Signature"]
    assert header.count("v1=") == 1
    assert not signature_verify(header=header, body=receiver.received[0].raw, secret=old)


def test_delivery__in_order_per_execution_through_retries(runtime_conn, runtime_dsn, accepted):
    first_refusals = {"left": 2}

    def answer(got) -> int:
        if got.body["type"] == "execution.suspended" and first_refusals["left"]:
            first_refusals["left"] -= 1
            return 503
        return 200

    with Receiver(answer) as receiver, delivering(runtime_dsn) as deliverer:
        hook = subscribe(receiver.url)
        execution_id = accepted()
        end(runtime_conn, execution_id, "SUSPENDED")
        end(runtime_conn, execution_id, "SUCCEEDED")
        poke(deliverer)
        rows = wait_until(
            lambda: len(settled(runtime_conn, hook)) == 2 and settled(runtime_conn, hook),
            what="both deliveries",
        )
    types = [b["type"] for b in receiver.bodies()]
    assert types == ["execution.suspended"] * 3 + ["execution.succeeded"]
    ids = {b["id"] for b in receiver.bodies()[:3]}
    assert len(ids) == 1  # the same event each time
    assert [(r["type"], r["attempts"], r["status"]) for r in rows] == [
        ("execution.suspended", 3, "DELIVERED"),
        ("execution.succeeded", 1, "DELIVERED"),
    ]


def test_delivery__an_execution_waiting_on_a_retry_holds_back_no_other(
    runtime_conn, runtime_dsn, accepted
):
    stuck = accepted()

    def answer(got) -> int:
        return 503 if got.body["data"]["id"] == str(stuck) else 200

    slow = WebhookConfig(**{**TEST_CONFIG.__dict__, "retry_base_seconds": 60.0})
    with Receiver(answer) as receiver, delivering(runtime_dsn, slow) as deliverer:
        hook = subscribe(receiver.url)
        end(runtime_conn, stuck, "FAILED")
        other = accepted()
        end(runtime_conn, other, "FAILED")
        poke(deliverer)
        wait_until(
            lambda: any(b["data"]["id"] == str(other) for b in receiver.bodies()),
            what="the other execution's delivery",
        )
    rows = {r["execution_id"]: r for r in deliveries(runtime_conn, hook.id)}
    assert rows[other]["status"] == "DELIVERED"
    assert rows[stuck]["status"] == "PENDING" and rows[stuck]["last_response_code"] == 503
    assert (
        rows[stuck]["last_response_body"].startswith("nope")
        and len(rows[stuck]["last_response_body"]) == 1024
    )


def test_delivery__past_the_maximum_age_it_fails_and_the_subscription_shows_failing(
    runtime_conn, runtime_dsn, accepted
):
    with Receiver(lambda _: 500) as receiver, delivering(runtime_dsn) as deliverer:
        hook = subscribe(receiver.url, ["execution.failed"])
        for _ in range(3):
            end(runtime_conn, accepted(), "FAILED")
        # Their retries started long ago: the next failure is past WEBHOOK_MAX_AGE_HOURS.
        runtime_conn.execute(
            "UPDATE webhook_delivery SET retry_from = clock_timestamp() - interval '2 hours'"
        )
        poke(deliverer)
        rows = wait_until(lambda: settled(runtime_conn, hook), what="the deliveries to fail")
    assert [(r["status"], r["attempts"]) for r in rows] == [("FAILED", 1)] * 3
    hook.refresh_from_db()
    assert services.webhook_status(hook) == "failing"
    with Receiver() as receiver, delivering(runtime_dsn) as deliverer:
        WebhookSubscription.objects.filter(id=hook.id).update(url=receiver.url)
        end(runtime_conn, accepted(), "FAILED")
        poke(deliverer)
        wait_until(lambda: receiver.received, what="a delivery that succeeds")
        wait_until(
            lambda: (
                services.webhook_status(WebhookSubscription.objects.get(id=hook.id)) == "active"
            ),
            what="the subscription to be active again",
        )


def test_delivery__a_redirect_is_not_followed(runtime_conn, runtime_dsn, accepted):
    with Receiver(lambda _: 302) as receiver, delivering(runtime_dsn) as deliverer:
        hook = subscribe(receiver.url, ["execution.failed"])
        end(runtime_conn, accepted(), "FAILED")
        poke(deliverer)
        wait_until(lambda: deliveries(runtime_conn, hook.id)[0]["last_error"], what="an attempt")
    assert deliveries(runtime_conn, hook.id)[0]["last_error"] == "redirect not followed"
    assert len(receiver.received) >= 1


def test_retry_delay__full_jitter_under_a_doubling_ceiling():
    rng = random.Random(3)
    for attempts in (1, 2, 5):
        samples = [retry_delay(attempts=attempts, base_seconds=1.0, rng=rng) for _ in range(500)]
        ceiling = 2 ** (attempts - 1)
        assert all(0 <= s <= ceiling for s in samples)
        assert max(samples) > 0.9 * ceiling and min(samples) < 0.1 * ceiling
    assert retry_delay(attempts=40, base_seconds=5.0, rng=rng) <= 3600


# -- where deliveries may go ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "rule"),
    [
        ("http://hooks.example.com/a", "https"),
        ("https://127.0.0.1/a", "loopback"),
        ("https://[::1]/a", "loopback"),
        ("https://[::ffff:127.0.0.1]/a", "loopback"),
        ("https://10.1.2.3/a", "private"),
        ("https://192.168.0.1/a", "private"),
        ("https://169.254.169.254/latest/meta-data", "link-local"),
        ("https://[fe80::1]/a", "link-local"),
        ("https://user:pw@hooks.example.com/a", "url"),
        ("ftp://hooks.example.com/a", "url"),
    ],
)
def test_url_refusal__names_the_rule(url, rule):
    refused = targets.url_refusal(
        url, allow_http=False, allow_private_networks=False, resolve=lambda *_: ["93.184.216.34"]
    )
    assert refused is not None and refused[0] == rule


def test_url_refusal__a_name_that_resolves_to_loopback():
    refused = targets.url_refusal(
        "https://inside.example.com/a",
        allow_http=False,
        allow_private_networks=False,
        resolve=lambda *_: ["93.184.216.34", "127.0.0.1"],
    )
    assert refused == ("loopback", "url: resolves to a loopback address")
    assert (
        targets.url_refusal(
            "https://hooks.example.com/a",
            allow_http=False,
            allow_private_networks=False,
            resolve=lambda *_: ["93.184.216.34"],
        )
        is None
    )


class Answers(aiohttp.abc.AbstractResolver):
    """A DNS that answers `address` for every name, counting its answers."""

    def __init__(self, address: str) -> None:
        self.address = address
        self.asked = 0

    async def resolve(self, host: str, port: int = 0, family: int = socket.AF_INET) -> list:
        self.asked += 1
        return [
            {
                "hostname": host,
                "host": self.address,
                "port": port,
                "family": socket.AF_INET,
                "proto": 0,
                "flags": socket.AI_NUMERICHOST,
            }
        ]

    async def close(self) -> None:
        pass


GUARDED = WebhookConfig(**{**TEST_CONFIG.__dict__, "allow_private_networks": False})


def test_delivery__refused_on_the_loopback_address_it_would_connect_to(
    runtime_conn, runtime_dsn, accepted
):
    with Receiver() as receiver, delivering(runtime_dsn, GUARDED) as deliverer:
        hook = subscribe(receiver.url, ["execution.failed"])  # written past the API's check
        end(runtime_conn, accepted(), "FAILED")
        poke(deliverer)
        wait_until(lambda: deliveries(runtime_conn, hook.id)[0]["last_error"], what="an attempt")
    assert deliveries(runtime_conn, hook.id)[0]["last_error"] == "refused by the loopback rule"
    assert receiver.received == []


def test_delivery__dns_rebinding_is_refused_at_connect(
    runtime_conn, runtime_dsn, accepted, monkeypatch
):
    with Receiver() as receiver:
        port = receiver.server.server_address[1]
        url = f"http://rebind.example.com:{port}/hook"
        # When the subscription is made the name is public...
        monkeypatch.setattr(targets, "resolve_addresses", lambda *_: ["93.184.216.34"])
        with override_settings(WEBHOOK_ALLOW_HTTP=True):
            hook, _ = services.webhook_create(tenant="acme", url=url, events=["execution.failed"])
        # ...and by the time it is delivered it answers loopback.
        rebound = Answers("127.0.0.1")
        with delivering(runtime_dsn, GUARDED, resolver=rebound) as deliverer:
            end(runtime_conn, accepted(), "FAILED")
            poke(deliverer)
            wait_until(
                lambda: deliveries(runtime_conn, hook.id)[0]["last_error"], what="an attempt"
            )
        assert rebound.asked >= 1
        assert deliveries(runtime_conn, hook.id)[0]["last_error"] == "refused by the loopback rule"
        assert receiver.received == []
        # The same answer with private networks allowed reaches the receiver: the refusal above
        # was the guard's, on the address it was about to connect to.
        with delivering(runtime_dsn, TEST_CONFIG, resolver=Answers("127.0.0.1")) as deliverer:
            end(runtime_conn, accepted(), "FAILED")
            poke(deliverer)
            wait_until(lambda: receiver.received, what="the delivery through the same name")


def test_sender__an_answer_later_than_the_timeout_is_a_failed_attempt_at_the_timeout():
    sender = WebhookSender(timeout_seconds=0.3, allow_http=True, allow_private_networks=True)

    async def attempt() -> tuple[Attempt, float]:
        started = time.monotonic()
        try:
            got = await sender.send(url=receiver.url, body=b"{}", headers={})
        finally:
            await sender.close()
        return got, time.monotonic() - started

    with Receiver(delay=2.0) as receiver:
        got, took = asyncio.run(attempt())
    assert (got.delivered, got.error) == (False, "no answer within 0.3 s")
    assert took < 1.5  # the attempt's own bound, not the receiver's answer


def test_delivery__stops_at_once_while_its_claim_waits_for_a_connection():
    """The database gone (nothing listens on the pool's port): stopping the loop does not wait
    out its claim's wait for a connection."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed again: connecting to it is refused

    async def main() -> tuple[float, int]:
        pool: AsyncConnectionPool = AsyncConnectionPool(
            f"host=127.0.0.1 port={port} dbname=gone", min_size=1, max_size=1, open=False
        )
        await pool.open(wait=False)
        borrowing = asyncio.Event()

        def borrow():
            borrowing.set()
            return pool.connection(timeout=30.0)

        try:
            deliverer = WebhookDeliverer(borrow=borrow, config=TEST_CONFIG)
            task = asyncio.create_task(deliverer.run())
            async with asyncio.timeout(5):
                await borrowing.wait()
            deliverer.stop()
            started = time.monotonic()
            async with asyncio.timeout(5):
                await task
            return time.monotonic() - started, deliverer.claims
        finally:
            await pool.close(timeout=1.0)

    stopped_after, claims = asyncio.run(main())
    assert stopped_after < 1.0  # far before the 30 s the claim would have waited
    assert claims == 0
