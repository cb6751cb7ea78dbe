"""The route limits on the Workers page: each limited or paused route with its calls in flight
and parked executions; an operator with `pause_route` pauses and resumes a route (recorded in
route_event with who and why); one without it sees the panel and cannot post."""

import pytest
from django.db import connection
from django.test import Client
from django.urls import reverse

from tests.support.meteredprovider import route_tables_clear

from .conftest import VIEW

pytestmark = pytest.mark.django_db(transaction=True)

WORKERS = "admin:reconciliation_workerprocess_changelist"
ROUTE_VIEW = "admin:reconciliation_workerprocess_route"


@pytest.fixture(autouse=True)
def _empty(migration_dsn, charge_registry):
    route_tables_clear(migration_dsn)
    yield
    route_tables_clear(migration_dsn)  # nor left for the next test's metrics or claims


def _client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _events() -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT route, type, actor, reason, until IS NULL FROM route_event ORDER BY id"
        )
        return cursor.fetchall()


def test_workers_page__pause_then_resume__audited_and_shown(make_user):
    ops = _client(make_user("petra", *VIEW, "pause_route"))

    paused = ops.post(
        reverse(ROUTE_VIEW),
        {"route": "payments.charge@1", "action": "pause", "minutes": "10", "reason": "incident 7"},
    )
    page = ops.get(reverse(WORKERS)).content.decode()
    resumed = ops.post(
        reverse(ROUTE_VIEW),
        {"route": "payments.charge@1", "action": "resume", "reason": "provider back"},
    )

    assert paused.status_code == resumed.status_code == 302
    assert 'data-route="payments.charge@1"' in page
    assert "UTC (admin:petra)" in page  # paused until … by whom
    assert 'id="route-pause-form"' in page
    assert _events() == [
        ("payments.charge@1", "PAUSED", "admin:petra", "incident 7", False),
        ("payments.charge@1", "RESUMED", "admin:petra", "provider back", True),
    ]
    after = ops.get(reverse(WORKERS)).content.decode()
    assert "Route payments.charge@1 resumed." in after


def test_workers_page__without_permission__no_form_and_post_refused(make_user):
    viewer = _client(make_user("vera", *VIEW))

    page = viewer.get(reverse(WORKERS)).content.decode()
    refused = viewer.post(
        reverse(ROUTE_VIEW),
        {"route": "payments.charge@1", "action": "pause", "minutes": "10", "reason": "x"},
    )

    assert 'id="route-limits"' in page
    assert 'id="route-pause-form"' not in page
    assert refused.status_code == 403
    assert _events() == []


def test_workers_page__unknown_route_or_no_minutes__nothing_changes(make_user):
    ops = _client(make_user("paula", *VIEW, "pause_route"))

    unknown = ops.post(
        reverse(ROUTE_VIEW),
        {"route": "nope@1", "action": "pause", "minutes": "10", "reason": "x"},
        follow=True,
    )
    no_minutes = ops.post(
        reverse(ROUTE_VIEW),
        {"route": "payments.charge@1", "action": "pause", "reason": "x"},
        follow=True,
    )

    assert "Not a route of INTEGRATIONS_FILE." in unknown.content.decode()
    assert "How long to pause, in minutes." in no_minutes.content.decode()
    assert _events() == []
