"""Plans of the lists: every filter, alone and in the combinations clients use most, is served
by an index in both access modes (the owner's, the tenant's), never by scanning a table.

The tables hold enough rows across tenants, owners, states, flows and statuses for the planner to
choose as it would in production; the statements are the ones the API sends (captured from real
calls), planned with EXPLAIN after ANALYZE.
"""

import json
import re
import time
from urllib.parse import urlencode

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from executions import sql
from executions.flows.publication import flow_publish
from tests.support.plans import autovacuum_off, plan_nodes

from .conftest import caller, flow_definition

pytestmark = pytest.mark.django_db

TENANTS, OWNERS, PER_OWNER = 20, 5, 200  # 20,000 requests, as many executions
# Row g is of tenant g % TENANTS; k = g / TENANTS spreads owners, flows and states inside it.
FILL_REQUESTS = """
INSERT INTO request (id, flow_id, owner, scope, data, state, created_at, updated_at)
SELECT gen_random_uuid(),
       CASE WHEN k %% 10 = 0 THEN %(single)s WHEN k %% 2 = 0 THEN %(v1)s ELSE %(v2)s END,
       'o' || k %% %(owners)s, 't' || g %% %(tenants)s,
       jsonb_build_object('pad', repeat('x', 500)),
       (ARRAY['DRAFT', 'SUBMITTED', 'CLOSED'])[1 + k %% 3],
       now() - g * interval '1 second', now() - g * interval '1 second'
  FROM generate_series(1, %(n)s) AS g, LATERAL (SELECT g / %(tenants)s AS k) AS spread
"""
FILL_EXECUTIONS = """
INSERT INTO execution (id, request_id, flow_id, transition_id, status, accepted_revision,
                       actor_snapshot, error_code, created_at, finished_at)
SELECT gen_random_uuid(), r.id, r.flow_id, (ARRAY['submit', 'close'])[1 + n % 2], s.status, 2,
       jsonb_build_object('pad', repeat('x', 300)),
       CASE WHEN s.status = 'FAILED' THEN 'PERMANENT_FAILURE' END, r.created_at,
       CASE WHEN s.status IN ('SUCCEEDED', 'FAILED') THEN r.created_at END
  FROM (SELECT id, flow_id, created_at, row_number() OVER () AS n FROM request) AS r,
       LATERAL (SELECT CASE WHEN r.n % 20 = 0 THEN 'FAILED' WHEN r.n % 7 = 0 THEN 'PENDING'
                            ELSE 'SUCCEEDED' END AS status) AS s
"""
RECENT = "2000-01-01T00:00:00Z"
NOW_ISH = "2100-01-01T00:00:00Z"

REQUEST_CASES = [
    # (query, indexes that may serve it in tenant mode)
    ({}, {"request_tenant_list_idx"}),
    ({"state": "SUBMITTED"}, {"request_state_list_idx"}),
    ({"state": "SUBMITTED", "createdAfter": RECENT}, {"request_state_list_idx"}),
    ({"flowKey": "single"}, {"request_flow_list_idx"}),
    ({"flowKey": "twice"}, {"request_flow_list_idx", "request_tenant_list_idx"}),
    (
        {"flowKey": "single", "state": "DRAFT"},
        {"request_flow_list_idx", "request_state_list_idx"},
    ),
    # Blocked requests are live work only: either partial index holds just them.
    ({"blocked": "true"}, {"request_blocked_list_idx", "request_blocked_idx"}),
    ({"blocked": "false"}, {"request_tenant_list_idx"}),
    ({"createdAfter": RECENT, "createdBefore": NOW_ISH}, {"request_tenant_list_idx"}),
    # Its ids from its own index, then its rows by id (executions/sql/reads.py).
    ({"updatedAfter": NOW_ISH}, {"request_updated_at_list_idx", "request_pkey"}),
]
EXECUTION_CASES = [
    ({}, {"execution_tenant_list_idx"}),
    ({"status": "FAILED"}, {"execution_status_list_idx", "execution_error_list_idx"}),
    # PENDING rows are live queue (few): the claim's per-tenant index of due work serves them too.
    (
        {"status": "PENDING", "createdAfter": RECENT},
        {"execution_status_list_idx", "execution_fair_idx"},
    ),
    ({"status": "SUCCEEDED", "createdBefore": NOW_ISH}, {"execution_status_list_idx"}),
    ({"requestId": "REQUEST"}, {"execution_request_idx"}),
    ({"requestId": "REQUEST", "status": "SUCCEEDED"}, {"execution_request_idx"}),
    ({"transitionId": "close"}, {"execution_tenant_list_idx"}),
    ({"errorCode": "PERMANENT_FAILURE"}, {"execution_error_list_idx"}),
    ({"createdAfter": RECENT}, {"execution_tenant_list_idx"}),
    ({"finishedAfter": NOW_ISH}, {"execution_finished_at_list_idx", "execution_pkey"}),
]
# The page's own statement, not the flowKey's versions read before it.
PAGE_TABLE = re.compile(r"\bFROM (request|execution) AS\b")


def _explained(statement: str, options: str = "FORMAT JSON") -> dict:
    """The plan of a page's statement as the API sends it: its SELECT explained after the
    planner setting said before it (sql.PAGE_PLANNING), in the same message."""
    select = statement.removeprefix(sql.PAGE_PLANNING)
    with connection.cursor() as cursor:
        cursor.execute(f"{sql.PAGE_PLANNING}EXPLAIN ({options}) {select}")
        cursor.nextset()
        (document,) = cursor.fetchone()
    return (document if isinstance(document, list) else json.loads(document))[0]["Plan"]


# In the owner's mode its own index serves every filter, or a narrower one of the tenant's.
OWNER_INDEXES = {"request": "request_owner_list_idx", "execution": "execution_owner_list_idx"}


@pytest.fixture
def filled(db) -> str:
    """The tables filled and analysed; returns a request id of tenant t0's owner o0."""
    single, _ = flow_publish(definition=flow_definition(key="single"))
    v1, _ = flow_publish(definition=flow_definition(key="twice"))
    v2, _ = flow_publish(definition=flow_definition(key="twice", version=2))
    with connection.cursor() as cursor:
        cursor.execute(
            FILL_REQUESTS,
            {
                "single": single.id,
                "v1": v1.id,
                "v2": v2.id,
                "tenants": TENANTS,
                "owners": OWNERS,
                "n": TENANTS * OWNERS * PER_OWNER,
            },
        )
        cursor.execute(FILL_EXECUTIONS)
        # Some requests blocked by their live execution.
        cursor.execute(
            "UPDATE request AS r SET blocked_by_id = e.id FROM execution AS e "
            "WHERE e.request_id = r.id AND e.status = 'PENDING'"
        )
        cursor.execute("ANALYZE request")
        cursor.execute("ANALYZE execution")
        cursor.execute(
            "SELECT e.request_id FROM execution e WHERE e.scope = 't0' AND e.owner = 'o0' LIMIT 1"
        )
        return str(cursor.fetchone()[0])


def _scans(who, path: str, query: dict) -> list[dict]:
    """The scan nodes on request and execution of each statement the list call sends."""
    with CaptureQueriesContext(connection) as captured:
        response = who.get(f"{path}?{urlencode(query)}")
    assert response.status_code == 200, response.content
    listed = [
        q["sql"]
        for q in captured.captured_queries
        if q["sql"].startswith(sql.PAGE_PLANNING) and PAGE_TABLE.search(q["sql"])
    ]
    assert len(listed) == 1, listed
    return [
        node
        for node in plan_nodes(_explained(listed[0]))
        if node.get("Relation Name") in ("request", "execution") or "Index Name" in node
    ]


def _check(scans: list[dict], allowed: set[str], query: dict) -> None:
    assert scans, query
    for node in scans:
        assert "Seq Scan" not in node["Node Type"], (query, node)
        index = node.get("Index Name")
        if index is not None and not index.startswith("flow_"):  # flow_pkey: the joined flow
            assert index in allowed, (query, index, allowed)
    assert any(node.get("Index Name") in allowed for node in scans), (query, scans)


def _each_case(path: str, cases: list, request_id: str) -> None:
    tenant = caller(sub="reader", tenant="t0", scope="requests:read:tenant")
    owner = caller(sub="o0", tenant="t0", scope="requests:read")
    for query, tenant_indexes in cases:
        query = {k: (request_id if v == "REQUEST" else v) for k, v in query.items()}
        _check(_scans(tenant, path, query), tenant_indexes, query)
        owner_indexes = tenant_indexes | {OWNER_INDEXES[path.rsplit("/", 1)[1][:-1]]}
        _check(_scans(owner, path, query), owner_indexes, query)


# One test per list, every case in it: the tables are filled once for all of them.
def test_request_lists__every_filter_is_served_by_an_index_in_both_modes(api, filled):
    _each_case("/api/v1/requests", REQUEST_CASES, filled)


def test_execution_lists__every_filter_is_served_by_an_index_in_both_modes(api, filled):
    _each_case("/api/v1/executions", EXECUTION_CASES, filled)


# Recent rows of another tenant, as a busy one leaves them: the planner takes a time filter to
# keep as large a share of every tenant's rows as of the whole table's.
FILL_BUSY = """
INSERT INTO request (id, flow_id, owner, scope, data, state, created_at, updated_at)
SELECT gen_random_uuid(), %(flow)s, 'o0', 'busy', '{}', 'CLOSED', now(), now()
  FROM generate_series(1, %(n)s)
"""
FILL_BUSY_EXECUTIONS = """
INSERT INTO execution (id, request_id, flow_id, transition_id, status, accepted_revision,
                       actor_snapshot, created_at, finished_at)
SELECT gen_random_uuid(), r.id, r.flow_id, 'close', 'SUCCEEDED', 2, '{}', now(), now()
  FROM request AS r WHERE r.scope = 'busy'
"""


def _page_plan(who, path: str, query: dict) -> dict:
    """EXPLAIN (ANALYZE, BUFFERS) of the page's own statement, as the API sends it."""
    with CaptureQueriesContext(connection) as captured:
        response = who.get(f"{path}?{urlencode(query)}")
    assert response.status_code == 200, response.content
    (statement,) = [q["sql"] for q in captured.captured_queries if PAGE_TABLE.search(q["sql"])]
    return _explained(statement, "ANALYZE, BUFFERS, FORMAT JSON")


# Backends of this database whose snapshot holds back what VACUUM may mark all-visible.
_HOLDERS = """
SELECT pid, backend_type, state, left(query, 80) FROM pg_stat_activity
 WHERE datname = current_database() AND backend_xmin IS NOT NULL AND pid <> pg_backend_pid()
"""


def _all_visible(cursor, table: str) -> tuple[int, int]:
    """Vacuum `table` again until every page is all-visible, as autovacuum keeps a table's
    older pages (a snapshot another backend holds, an autovacuum's ANALYZE of another table,
    can keep the new rows from being visible to all for a moment): its pages and all-visible
    pages."""
    deadline = time.monotonic() + 30
    while True:
        cursor.execute("SELECT relpages, relallvisible FROM pg_class WHERE relname = %s", [table])
        pages, visible = cursor.fetchone()
        if visible >= pages:
            return pages, visible
        if time.monotonic() > deadline:
            cursor.execute(_HOLDERS)
            holders = cursor.fetchall()
            raise AssertionError(f"{table}: {visible} of {pages} pages all-visible; {holders}")
        time.sleep(0.2)
        cursor.execute(f"VACUUM {table}")


def _busy_page_plan(path: str, query: str) -> tuple[dict, tuple]:
    """The busy tenant's rows added, the tables vacuumed and analysed from every row (request's
    pages all-visible), then the plan of tenant t0's page of the last ten minutes; with the
    request table's pages and all-visible pages, for an assertion's message."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT id FROM flow WHERE key = 'single'")
        cursor.execute(FILL_BUSY, {"flow": cursor.fetchone()[0], "n": 20_000})
        cursor.execute(FILL_BUSY_EXECUTIONS)
        # Every row read by ANALYZE (a sample of 300 times the target, past the 40,000 here): a
        # random sample's statistics put the two plans' costs either way from run to run.
        cursor.execute("SET default_statistics_target = 200")
        try:
            cursor.execute("VACUUM ANALYZE request")
            cursor.execute("VACUUM ANALYZE execution")
        finally:
            cursor.execute("RESET default_statistics_target")
        visible = _all_visible(cursor, "request")
        cursor.execute(
            "SELECT to_char(now() - interval '10 minutes', 'YYYY-MM-DD\"T\"HH24:MI:SSOF')"
        )
        (since,) = cursor.fetchone()
    tenant = caller(sub="reader", tenant="t0", scope="requests:read:tenant")
    return _page_plan(tenant, path, {query: f"{since}:00"}), visible


# Committed, so that VACUUM can mark the pages all-visible, as autovacuum keeps a table's older
# pages: the index-only scan is then priced as one.
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("path", "query", "index"),
    [
        ("/api/v1/requests", "updatedAfter", "request_updated_at_list_idx"),
    ],
)
def test_time_filter__a_page_past_the_recent_rows_reads_the_index_not_the_tenant(
    api, filled, path, query, index
):
    """Ordered by creation and filtered by a later time, with statistics that take the filter
    to keep half of the tenant (a busy tenant's recent rows): the tenant's 30 rows of the last
    ten minutes are one page, which must not walk the tenant's 1,000 rows by creation to find
    there is no 31st (as it did when the filter only followed that walk)."""
    # No autovacuum until the page is planned: the statistics are read from every row below.
    with connection.cursor() as cursor, autovacuum_off(cursor, "request", "execution"):
        plan, visible = _busy_page_plan(path, query)
    rows = plan["Actual Rows"]
    assert 25 <= rows <= 30, rows  # the fill's clock is not the test's
    # Its ids from its own index alone, then the rows by id; never a walk by creation.
    scans = {
        node["Index Name"]: node["Node Type"] for node in plan_nodes(plan) if "Index Name" in node
    }
    assert scans.pop(index, None) == "Index Only Scan", (scans, visible)
    assert set(scans) <= {"request_pkey", "execution_pkey", "flow_pkey"}, scans
    # The index's pages and one lookup per row kept, not one per row of the tenant's 1,000.
    read = plan["Shared Hit Blocks"] + plan["Shared Read Blocks"]
    assert read < rows * 5 + 20, read


# Owners of a busy tenant with a few dozen rows each when the tables were last analysed, then a
# burst of thousands each before autovacuum gets to them. Rows of 1 KiB, written together, so the
# burst's pages are few and a bitmap scan of them cheap.
FILL_OWNER = """
INSERT INTO request (id, flow_id, owner, scope, data, state, created_at, updated_at)
SELECT gen_random_uuid(), %(flow)s, %(owner)s, 'busy', jsonb_build_object('pad', repeat('x', 500)),
       'SUBMITTED', clock_timestamp(), clock_timestamp()
  FROM generate_series(1, %(n)s)
"""
FILL_OWNER_EXECUTIONS = """
INSERT INTO execution (id, request_id, flow_id, transition_id, status, accepted_revision,
                       actor_snapshot, created_at)
SELECT gen_random_uuid(), r.id, r.flow_id, 'go', 'PENDING', 1,
       jsonb_build_object('pad', repeat('x', 300)), r.created_at
  FROM request AS r
 WHERE r.scope = 'busy' AND r.owner = %(owner)s
   AND NOT EXISTS (SELECT FROM execution AS e WHERE e.request_id = r.id)
"""
BURST_OWNERS = {f"burst{n}": n for n in (40, 60, 80, 100)}  # owner: rows analysed


def test_a_burst_the_statistics_have_not_seen_is_still_walked_in_order(api, filled):
    """Owners whose rows came after the last ANALYZE, which took each for a few dozen: a page
    of theirs walks the owner's index in order and stops at the page. With bitmap scans allowed,
    an estimate just under the page's 51 rows made the planner read all 6,000 rows of the owner
    and sort them (8 ms a page) in 2 of 10 such cases over two runs; which ones, ANALYZE's
    sample decides, so this test alone does not fail without sql.PAGE_PLANNING every time."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT id FROM flow WHERE key = 'single'")
        flow = cursor.fetchone()[0]
        cursor.execute(FILL_BUSY, {"flow": flow, "n": 20_000})
        cursor.execute(FILL_BUSY_EXECUTIONS)
    for owner, analysed in BURST_OWNERS.items():
        with connection.cursor() as cursor:
            cursor.execute(FILL_OWNER, {"flow": flow, "owner": owner, "n": analysed})
            cursor.execute(FILL_OWNER_EXECUTIONS, {"owner": owner})
            cursor.execute("ANALYZE request")
            cursor.execute("ANALYZE execution")
            cursor.execute(FILL_OWNER, {"flow": flow, "owner": owner, "n": 6_000})
            cursor.execute(FILL_OWNER_EXECUTIONS, {"owner": owner})
        burst = caller(sub=owner, tenant="busy", scope="requests:read")
        for path, index in (
            ("/api/v1/requests", "request_owner_list_idx"),
            ("/api/v1/executions", "execution_owner_list_idx"),
        ):
            nodes = list(plan_nodes(_page_plan(burst, path, {"limit": 50})))
            scans = [(n["Node Type"], n.get("Index Name")) for n in nodes if "Index Name" in n]
            assert scans == [("Index Scan", index)], (owner, path, nodes)
            assert not [n for n in nodes if n["Node Type"] == "Sort"], (owner, path, nodes)
            assert nodes[0]["Actual Rows"] == 51, (owner, path, nodes)
