"""Many clients at once, on real threads with their own database connections: one request's row
lock serialises acceptances, so exactly one wins; identical Idempotency-Key retries share one
execution. And the NOTIFY for idle workers is delivered at commit, only for an acceptance."""

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connections
from django.test import Client

from executions.models import AuditEvent, AuditType, Execution, Request
from executions.sql import NOTIFY_CHANNEL

from .conftest import Caller, assert_error

pytestmark = pytest.mark.django_db(transaction=True)

CLIENTS = 8
DEADLINE = 60  # seconds for the whole race; a hang fails instead of blocking the suite


def race(count: int, call: Callable[[], object]) -> list:
    """Run `call` on `count` threads released together by a barrier; return their results."""
    barrier = threading.Barrier(count, timeout=DEADLINE)

    def one():
        try:
            barrier.wait()
            return call()
        finally:
            connections.close_all()  # this thread's own connection

    with ThreadPoolExecutor(max_workers=count) as pool:
        futures = [pool.submit(one) for _ in range(count)]
        return [future.result(timeout=DEADLINE) for future in futures]


def test_concurrent_acceptances__exactly_one_wins(alice, flow):
    created = alice.create()

    def accept_one():
        client = Caller(None, Client())
        client.headers = alice.headers
        return client.accept(created["id"], "submit", 1)

    responses = race(CLIENTS, accept_one)
    statuses = sorted(response.status_code for response in responses)
    assert statuses == [202] + [409] * (CLIENTS - 1)
    # Every loser took the lock after the winner committed, and found the request held.
    losers = [r.json()["code"] for r in responses if r.status_code == 409]
    assert losers == ["REQUEST_BLOCKED"] * (CLIENTS - 1)

    winner = next(r for r in responses if r.status_code == 202).json()
    stored = Request.objects.get(id=created["id"])
    assert (stored.revision, stored.version) == (2, 2)
    assert str(stored.blocked_by_id) == winner["id"]
    assert Execution.objects.count() == 1
    assert AuditEvent.objects.filter(type=AuditType.TRANSITION_ACCEPTED).count() == 1


def test_concurrent_identical_retries__share_one_execution(alice, flow):
    created = alice.create()

    def retry():
        client = Caller(None, Client())
        client.headers = alice.headers
        return client.accept(created["id"], "submit", 1, HTTP_IDEMPOTENCY_KEY="retry-7")

    responses = race(CLIENTS, retry)
    assert [response.status_code for response in responses] == [202] * CLIENTS
    assert len({response.json()["id"] for response in responses}) == 1
    assert len({response["Location"] for response in responses}) == 1
    assert Execution.objects.count() == 1
    assert Request.objects.get(id=created["id"]).revision == 2


def test_concurrent_retries_with_one_key_and_different_bodies(alice, flow):
    created = alice.create()
    revisions = iter(range(1, CLIENTS + 1))
    lock = threading.Lock()

    def retry():
        with lock:
            revision = next(revisions)
        client = Caller(None, Client())
        client.headers = alice.headers
        return client.accept(created["id"], "submit", revision, HTTP_IDEMPOTENCY_KEY="k")

    responses = race(CLIENTS, retry)
    codes = sorted("ACCEPTED" if r.status_code == 202 else r.json()["code"] for r in responses)
    # Only the revision-1 body can be accepted. Stale bodies that lock before it are revision
    # conflicts (and do not use up the key); those that lock after it find the key taken by a
    # different body. One execution, never a 500.
    assert codes.count("ACCEPTED") == 1
    assert set(codes) <= {"ACCEPTED", "IDEMPOTENCY_KEY_REUSED", "REVISION_CONFLICT"}
    assert Execution.objects.get().accepted_revision == 2


def test_notify__delivered_at_commit_for_an_acceptance_only(alice, flow, runtime_conn):
    created = alice.create()
    runtime_conn.execute(f"LISTEN {NOTIFY_CHANNEL}")

    refused = alice.accept(created["id"], "submit", 9)
    assert_error(refused, 409, "REVISION_CONFLICT")
    accepted = alice.accept(created["id"], "submit", 1)
    assert accepted.status_code == 202

    # Notifications arrive in commit order: the first one must be the acceptance's.
    received = list(runtime_conn.notifies(timeout=DEADLINE, stop_after=1))
    assert [n.payload for n in received] == [accepted.json()["id"]]
    assert received[0].channel == NOTIFY_CHANNEL
