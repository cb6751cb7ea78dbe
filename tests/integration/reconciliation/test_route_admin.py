"""The routes on the Workers page: a row per route with its limits, calls in flight and parked
executions, and whether it is paused, by whom and why; an operator with `pause_route` pauses a
route from its row (how long and why asked) and resumes it from its row (nothing asked),
recorded in route_event with who and why; one without it sees the rows and cannot post."""

import re

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


def _row(page: str, route: str) -> str:
    """The route's row of the page."""
    found = re.search(rf'<tr class="route-row" data-route="{re.escape(route)}".*?</tr>', page, re.S)
    assert found, f"no row for {route}"
    return found.group(0)


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
    row = _row(page, "payments.charge@1")
    assert 'data-paused="yes"' in row
    assert 'by <span class="paused-by">admin:petra</span>' in row  # paused until … by whom
    assert '<span class="pause-reason">incident 7</span>' in row  # and why
    assert 'class="route-pause"' in row and 'class="route-resume"' in row
    assert _events() == [
        ("payments.charge@1", "PAUSED", "admin:petra", "incident 7", False),
        ("payments.charge@1", "RESUMED", "admin:petra", "provider back", True),
    ]
    after = ops.get(reverse(WORKERS)).content.decode()
    assert "Route payments.charge@1 resumed." in after
    assert 'data-paused="no"' in _row(after, "payments.charge@1")
    assert "incident 7" not in _row(after, "payments.charge@1")


def test_workers_page__without_permission__no_form_and_post_refused(make_user):
    viewer = _client(make_user("vera", *VIEW))

    page = viewer.get(reverse(WORKERS)).content.decode()
    refused = viewer.post(
        reverse(ROUTE_VIEW),
        {"route": "payments.charge@1", "action": "pause", "minutes": "10", "reason": "x"},
    )

    assert 'id="route-limits"' in page
    assert 'data-route="payments.charge@1"' in page  # the row, without controls
    assert "route-pause-form" not in page and "route-resume" not in page
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


def test_workers_page__a_row_per_route__its_limits_in_words(make_user):
    page = _client(make_user("rosa", *VIEW)).get(reverse(WORKERS)).content.decode()
    head = page[page.index('id="route-limits"') :]
    head = head[: head.index("</thead>")]
    assert "Most calls at once" in head and "Rate limit" in head and "Paused" in head
    assert "max_in_flight" not in head and "rate_limit" not in head
    # A route of the catalog without limits or a pause still has its row.
    row = _row(page, "payments.charge@1")
    assert "not counted" in row and 'data-paused="no"' in row


def test_workers_page__resume_needs_no_reason_and_a_pause_needs_one(make_user):
    ops = _client(make_user("ruth", *VIEW, "pause_route"))
    no_reason = ops.post(
        reverse(ROUTE_VIEW),
        {"route": "payments.charge@1", "action": "pause", "minutes": "10", "reason": "  "},
        follow=True,
    )
    assert "Why it is paused" in no_reason.content.decode()
    assert _events() == []

    ops.post(
        reverse(ROUTE_VIEW),
        {"route": "payments.charge@1", "action": "pause", "minutes": "10", "reason": "deploy"},
    )
    page = ops.get(reverse(WORKERS)).content.decode()
    # The row's resume form asks for nothing: no reason field, nothing required.
    resume = re.search(
        r'<form[^>]*class="route-resume-form".*?</form>', _row(page, "payments.charge@1"), re.S
    )
    assert resume and "required" not in resume.group(0) and 'name="reason"' not in resume.group(0)
    resumed = ops.post(
        reverse(ROUTE_VIEW), {"route": "payments.charge@1", "action": "resume"}, follow=True
    )

    assert "Route payments.charge@1 resumed." in resumed.content.decode()
    assert _events() == [
        ("payments.charge@1", "PAUSED", "admin:ruth", "deploy", False),
        ("payments.charge@1", "RESUMED", "admin:ruth", "", True),
    ]
