"""Access is filtered in SQL: every query for a request or an execution made on a caller's
behalf carries the caller's tenant, and its owner unless it reads with requests:read:tenant.

Each endpoint is called while capturing the SQL it executes. A resource that exists but belongs
to someone else is answered 404 by the same filtered query that would have found it: nothing is
fetched and checked afterwards.
"""

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from executions.models import Request
from executions.sql import PAGE_PLANNING

from .conftest import assert_error

pytestmark = pytest.mark.django_db

# The ORM's quoted names, and the acceptance's raw SQL (executions/sql/acceptance.py: the request
# as `request AS r` in its read, `UPDATE request` in its write).
_TOUCHES = re.compile(r'(FROM|JOIN|UPDATE) "?(request|execution)\b"?')


def _column(name: str) -> str:
    """`name` of the request as the ORM or the raw SQL spells it in a WHERE clause."""
    return rf'(?:"request"\."{name}"|\br\.{name}|(?<![."\w]){name})'


def scoped_queries(captured: CaptureQueriesContext) -> list[str]:
    """The SELECTs and UPDATEs (alone or in a WITH) that read or change requests or executions
    (a page's after its planner setting, sent in the same message)."""
    statements = [q["sql"].removeprefix(PAGE_PLANNING) for q in captured.captured_queries]
    return [
        statement
        for statement in statements
        if statement.lstrip().upper().startswith(("SELECT", "UPDATE", "WITH"))
        and _TOUCHES.search(statement)
    ]


# Equal: `=`, or IS NOT DISTINCT FROM (the same for these NOT NULL columns), which the statements
# that find a row by its key use so that no index serves the test (executions/access.py).
_EQUALS = " (?:=|IS NOT DISTINCT FROM) "


def assert_filtered(queries: list[str], *, tenant: str, owner: str | None) -> None:
    assert queries, "expected at least one query on requests or executions"
    for sql in queries:
        assert " WHERE " in sql, sql
        where = sql.split(" WHERE ", 1)[1]
        assert re.search(_column("scope") + _EQUALS + f"'{tenant}'", where), sql
        if owner is None:
            assert not re.search(_column("owner"), where), sql
        else:
            assert re.search(_column("owner") + _EQUALS + f"'{owner}'", where), sql


def call(caller, method: str, path: str, body=None):
    with CaptureQueriesContext(connection) as captured:
        response = caller.get(path) if method == "GET" else caller.post(path, body)
    return response, scoped_queries(captured)


@pytest.fixture
def setup(alice, flow):
    created = alice.create()
    accepted = alice.accept(created["id"], "submit", 1).json()
    return created["id"], accepted["id"]


def endpoints(request_id: str, execution_id: str) -> list[tuple[str, str, dict | None]]:
    return [
        ("GET", f"/api/v1/requests/{request_id}", None),
        ("GET", f"/api/v1/executions/{execution_id}", None),
        (
            "POST",
            f"/api/v1/requests/{request_id}/transitions",
            {"transitionId": "submit", "expectedRevision": 2},
        ),
    ]


def test_owner_and_tenant_are_in_every_query__for_the_owner(alice, setup):
    for method, path, body in endpoints(*setup):
        response, queries = call(alice, method, path, body)
        assert response.status_code in (200, 409), (path, response.content)
        assert_filtered(queries, tenant="acme", owner="alice")


@pytest.mark.parametrize("who", ["bob", "alice_elsewhere"])
def test_another_owner_or_tenant__gets_404_from_the_filtered_query(request, setup, who):
    other = request.getfixturevalue(who)
    tenant = "globex" if who == "alice_elsewhere" else "acme"
    owner = "alice" if who == "alice_elsewhere" else "bob"
    for method, path, body in endpoints(*setup):
        response, queries = call(other, method, path, body)
        assert_error(response, 404, "NOT_FOUND")
        assert_filtered(queries, tenant=tenant, owner=owner)
        # The one query that looked for it was the filtered one: no unfiltered fetch happened.
        assert len(queries) == 1, queries


def test_tenant_reader__filters_by_tenant_alone(auditor, setup):
    request_id, execution_id = setup
    for path in (f"/api/v1/requests/{request_id}", f"/api/v1/executions/{execution_id}"):
        response, queries = call(auditor, "GET", path)
        assert response.status_code == 200
        assert_filtered(queries, tenant="acme", owner=None)


def test_tenant_reader__another_tenants_request_is_404_in_sql(auditor, flow):
    elsewhere = Request.objects.create(
        flow=flow, owner="carol", scope="globex", data={"applicant": "A"}, state="DRAFT"
    )
    response, queries = call(auditor, "GET", f"/api/v1/requests/{elsewhere.id}")
    assert_error(response, 404, "NOT_FOUND")
    assert_filtered(queries, tenant="acme", owner=None)


def test_transition__reads_and_writes_with_owner_and_tenant_in_the_where(alice, flow):
    created = alice.create()
    with CaptureQueriesContext(connection) as captured:
        response = alice.accept(created["id"], "submit", 1, HTTP_IDEMPOTENCY_KEY="k")
    assert response.status_code == 202
    queries = scoped_queries(captured)
    assert_filtered(queries, tenant="acme", owner="alice")
    read, write = queries[0], queries[-1]
    # The Idempotency-Key's execution is found through the filtered request, in the read.
    assert "e.request_id = r.id AND e.idempotency_key = 'k'" in read, read
    # The write changes the request only under the same filter, and only as it was read.
    update = write.split("UPDATE request", 1)[1].split("RETURNING", 1)[0]
    assert re.search(f"scope{_EQUALS}'acme' AND owner{_EQUALS}'alice'", update), write
    assert "blocked_by_id IS NULL" in update, write


@pytest.mark.parametrize(
    ("who", "tenant", "owner"),
    [("alice", "acme", "alice"), ("bob", "acme", "bob"), ("auditor", "acme", None)],
)
def test_lists__filter_by_the_callers_access_in_the_where(request, setup, who, tenant, owner):
    listing = request.getfixturevalue(who)
    response, queries = call(listing, "GET", "/api/v1/requests?state=DRAFT&limit=5")
    assert response.status_code == 200, response.content
    assert_filtered(queries, tenant=tenant, owner=owner)
    # Executions are listed by the copies of their request's tenant and owner (no join).
    response, queries = call(listing, "GET", "/api/v1/executions?status=PENDING&limit=5")
    assert response.status_code == 200, response.content
    (sql,) = queries
    where = sql.split(" WHERE ", 1)[1]
    assert "JOIN" not in sql, sql
    assert f"e.scope = '{tenant}'" in where, sql
    if owner is None:
        assert "e.owner" not in where, sql
    else:
        assert f"e.owner = '{owner}'" in where, sql
    assert len(response.json()["results"]) == (0 if who == "bob" else 1)
