"""Plans of the API's fixed statements that find one row by its key (an acceptance's read and
write, the reads by id): through the primary key whatever the planner's statistics say.

They run prepared, so each connection soon keeps one generic plan per statement, made on
statistics that lag behind the tables as a queue's do (docs/adr/0009). These tests analyse the
tables nearly empty, fill them with one tenant's requests and executions, and check each
statement's generic plan: the request and the execution are read through request_pkey and
execution_pkey, never by walking a list index whose first column is the tenant and whose last is
the id (what the plans did while the caller's access was tested with `=`; docs/adr/0021).
"""

import uuid
from collections.abc import Iterator

import psycopg
import pytest
from psycopg.types.json import Jsonb

from executions import access, sql
from executions.flows.publication import flow_publish
from orquestador.auth import REQUESTS_READ, REQUESTS_READ_TENANT, Principal
from tests.support.plans import autovacuum_off, plan_nodes, planned

from .conftest import FLOW

pytestmark = pytest.mark.django_db(transaction=True)

SEEN = 10  # requests, each with an execution, of another tenant when the tables are analysed
FILLED = 5_000  # requests, each with an execution, added after the tables were analysed
FILL = """
WITH made AS (
    INSERT INTO request (id, flow_id, owner, scope, data, state)
    SELECT gen_random_uuid(), %(flow_id)s, 'alice', 'acme', '{}', 'DRAFT'
      FROM generate_series(1, %(n)s)
 RETURNING id, flow_id
)
INSERT INTO execution (id, request_id, flow_id, transition_id, accepted_revision,
                       actor_snapshot, dispatch_principal)
SELECT gen_random_uuid(), m.id, m.flow_id, 'submit', 2, '{}', '{}' FROM made AS m
RETURNING id, request_id
"""
OWNER = Principal(subject="alice", tenant="acme", permissions=frozenset({REQUESTS_READ}))
TENANT = Principal(subject="carol", tenant="acme", permissions=frozenset({REQUESTS_READ_TENANT}))


@pytest.fixture
def stale(migration_dsn, runtime_conn) -> Iterator[tuple[str, str]]:
    """Statistics taken on nearly empty tables (a few rows of another tenant, so that they
    replace whatever an earlier test left: ANALYZE of an empty table keeps the old ones), then
    one tenant's rows: an execution id and its request's. Kept stale while the test plans (no
    autovacuum: its ANALYZE would refresh them, and the plan made with `=` then used the key
    after all, as CI once saw)."""
    flow, _ = flow_publish(definition=FLOW)
    with (
        psycopg.connect(migration_dsn, autocommit=True) as owner,
        autovacuum_off(owner, "request", "execution"),
    ):
        runtime_conn.execute(
            FILL.replace("'alice', 'acme'", "'bob', 'other'"), {"flow_id": flow.id, "n": SEEN}
        )
        owner.execute("ANALYZE request")
        owner.execute("ANALYZE execution")
        rows = runtime_conn.execute(FILL, {"flow_id": flow.id, "n": FILLED}).fetchall()
        execution_id, request_id = rows[len(rows) // 2]
        yield str(execution_id), str(request_id)


def _generic(conn: psycopg.Connection, statement: str, params: dict) -> list[dict]:
    conn.execute("SET plan_cache_mode = force_generic_plan")  # the plan a prepared one keeps
    return planned(conn, statement, params)


def _by_key(nodes: list[dict]) -> dict[str, set[str]]:
    """The indexes each of request and execution is scanned through (a scan without one:
    "none"); the writes' own nodes are not scans."""
    found: dict[str, set[str]] = {}
    for node in nodes:
        relation = node.get("Relation Name")
        if relation in ("request", "execution") and node["Node Type"].endswith("Scan"):
            # A bitmap heap scan reads the indexes its bitmap index scans name.
            names = {n["Index Name"] for n in plan_nodes(node) if "Index Name" in n}
            found.setdefault(relation, set()).update(names or {"none"})
    return found


def test_acceptance_read__finds_the_request_by_its_key(runtime_conn, stale):
    _, request_id = stale
    params = {
        "request_id": request_id,
        "scope": "acme",
        "owner": "alice",
        "idempotency_key": None,
    }
    nodes = _generic(runtime_conn, sql.ACCEPT_READ, params)
    assert _by_key(nodes)["request"] == {"request_pkey"}, list(nodes)


def test_acceptance_write__updates_the_request_found_by_its_key(runtime_conn, stale):
    _, request_id = stale
    params = {
        "execution_id": str(uuid.uuid4()),
        "request_id": request_id,
        "scope": "acme",
        "owner": "alice",
        "state": "DRAFT",
        "expected_revision": 1,
        "transition_id": "submit",
        "actor": Jsonb({}),
        "idempotency_key": None,
        "fingerprint": None,
        "subject": "alice",
        "payload": Jsonb({}),
        "trace_context": None,
    }
    nodes = _generic(runtime_conn, sql.ACCEPT_WRITE, params)
    assert _by_key(nodes)["request"] == {"request_pkey"}, list(nodes)


@pytest.mark.parametrize("principal", [OWNER, TENANT], ids=["owner", "tenant"])
def test_reads_by_id__find_their_rows_by_their_keys(runtime_conn, stale, principal):
    execution_id, request_id = stale
    keyed = access.request_filter_sql(principal, alias="r", keyed=True)
    scope = access.request_filter_params(principal)
    request = _generic(
        runtime_conn, sql.REQUEST_VIEW.format(access=keyed), {"request_id": request_id, **scope}
    )
    assert _by_key(request) == {"request": {"request_pkey"}}, request
    execution = _generic(
        runtime_conn,
        sql.EXECUTION_VIEW.format(access=keyed),
        {"execution_id": execution_id, **scope},
    )
    assert _by_key(execution) == {"execution": {"execution_pkey"}, "request": {"request_pkey"}}


def test_the_access_test_with_equals__is_what_walked_a_list_index(runtime_conn, stale):
    # What the statements above avoid, so that this file keeps showing why.
    _, request_id = stale
    unkeyed = access.request_filter_sql(OWNER, alias="r")
    nodes = _generic(
        runtime_conn,
        sql.REQUEST_VIEW.format(access=unkeyed),
        {"request_id": request_id, **access.request_filter_params(OWNER)},
    )
    assert _by_key(nodes)["request"] != {"request_pkey"}, nodes
