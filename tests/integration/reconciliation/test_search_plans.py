"""Plans of the admin's searches by what a case summary shows (a customer, an amount): the
requests list and the case list find the requests through request_data_search_idx (and the
requests list an owner through request_owner_search_idx), never by reading the request table
or an index of it whole.

The table holds 20,000 requests of one flow whose caseSummary is `/customer` and `/amount`,
analysed and then kept so (no autovacuum: its ANALYZE would sample other statistics than the
test's); each search's statements are the ones the admin sends, captured from real pages and
planned with EXPLAIN.
"""

import json

import psycopg
import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from tests.support.plans import autovacuum_off, plan_nodes

from .factories import FlowFactory, reconciliation_case

pytestmark = pytest.mark.django_db(transaction=True)

REQUESTS = 20_000
FILL = """
INSERT INTO request (id, flow_id, owner, scope, data, state)
SELECT gen_random_uuid(), %(flow)s, 'o' || g %% 50, 't' || g %% 20,
       jsonb_build_object('customer', 'cus_' || g, 'amount', g %% 5000, 'currency', 'EUR',
                          'pad', repeat('x', 300)),
       'DRAFT'
  FROM generate_series(1, %(n)s) AS g
"""
# The data's, an owner's of any tenant, a tenant's (the term is tried as each); and the key, by
# which the case list joins each case's request.
SEARCH_INDEXES = {
    "request_data_search_idx",
    "request_owner_search_idx",
    "request_tenant_list_idx",
    "request_pkey",
}
SEARCHES = [
    ("admin:executions_request_changelist", "cus_777"),
    ("admin:executions_request_changelist", "4321"),
    ("admin:reconciliation_reconciliationcase_changelist", "cus_777"),
]


@pytest.fixture
def filled(migration_dsn, operator):
    flow = FlowFactory()
    reconciliation_case()  # one case, so that the case list has a row to join
    with (
        psycopg.connect(migration_dsn, autocommit=True) as owner,
        autovacuum_off(owner, "request"),
    ):
        with connection.cursor() as cursor:
            cursor.execute(FILL, {"flow": flow.id, "n": REQUESTS})
        owner.execute("ANALYZE request")
        client = Client()
        client.force_login(operator)
        yield client


def _request_scans(statement: str) -> list[dict]:
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (FORMAT JSON) " + statement)
        (document,) = cursor.fetchone()
    plan = (document if isinstance(document, list) else json.loads(document))[0]["Plan"]
    return [
        node
        for node in plan_nodes(plan)
        if node.get("Relation Name") == "request" or "request_" in node.get("Index Name", "")
    ]


@pytest.mark.parametrize(("page", "term"), SEARCHES)
def test_search__by_a_summary_field_reads_the_data_index_not_the_table(filled, page, term):
    with CaptureQueriesContext(connection) as captured:
        response = filled.get(reverse(page), {"q": term})
    assert response.status_code == 200
    searched = [q["sql"] for q in captured.captured_queries if "@>" in q["sql"]]
    assert searched, [q["sql"] for q in captured.captured_queries]
    for statement in searched:
        scans = _request_scans(statement)
        assert not [n for n in scans if n["Node Type"] == "Seq Scan"], (statement, scans)
        indexes = {n["Index Name"] for n in scans if "Index Name" in n}
        assert "request_data_search_idx" in indexes, (statement, scans)
        # Each part of the term through an index whose first column it names: the owner's
        # list index, (scope, owner, ...), would be read whole for an owner of any tenant.
        assert indexes <= SEARCH_INDEXES, (statement, scans)
