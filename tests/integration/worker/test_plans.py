"""Plans of the hot-path statements: they stay key lookups and index walks whatever the statistics.

A queue fills in bursts, so the planner's statistics lag far behind it (docs/adr/0009). These
tests analyse the tables while they are nearly empty, then fill them, and check the shape of each
plan: the claim walks execution_claim_idx in order without sorting, and the checkpoint writes lock
each holder's execution by its id, one lookup per item, instead of scanning every live execution.
After finished history was vacuumed while nothing was in flight, every fenced statement's generic
plan still finds its execution through execution_pkey, never by walking execution_claim_idx. The
fenced statements are found in the executions/sql package's owner modules by their fence, not
listed here: a new one is checked as soon as it exists, and one that compares a holder's token
without the fence fails.
"""

import contextlib
import datetime
import importlib
import json
import pkgutil
import re

import psycopg
import pytest
from psycopg import sql as pgsql
from psycopg.types.json import Jsonb

from executions import sql
from executions.worker.pooling import PoolingConfig
from tests.support.meteredprovider import route_tables_clear
from tests.support.plans import autovacuum_off, plan_nodes, planned
from tests.support.worker import action, claim, enqueue

pytestmark = pytest.mark.django_db(transaction=True)

BACKLOG = 150  # executions accepted after the tables were analysed
RUNNING = 100  # of which claimed

_FILLED = ("request", "execution", "action_execution", "route_park")  # what these tests fill


@pytest.fixture(autouse=True)
def _statistics_as_taken(migration_dsn):
    """Each test plans on the statistics it takes, and on its own rows only. No autovacuum on the
    tables filled here meanwhile: its ANALYZE or VACUUM landing between two fills would replace
    them with others, checked by chance (one between the peers' finished history and their
    backlog planned their lookup on execution_fair_idx; that state is taken on purpose now).
    Setting this waits for, and cancels, one already running on them. The route tables are
    emptied before and after (the flush between tests does not know them)."""
    route_tables_clear(migration_dsn)
    try:
        with (
            psycopg.connect(migration_dsn, autocommit=True) as owner,
            autovacuum_off(owner, *_FILLED),
        ):
            yield
    finally:
        route_tables_clear(migration_dsn)


def _worker_session(conn: psycopg.Connection, *, claims: bool = False) -> None:
    """The session settings a worker's connection runs first (a direct one, no pooler)."""
    for statement in PoolingConfig().session_statements(claims=claims):
        conn.execute(statement)


@pytest.fixture
def stale_backlog(conn, make_flow, migration_dsn):
    """Statistics taken on near-empty tables, then a backlog with many RUNNING executions."""
    flow_id = make_flow([action("a", "NO_OP")])
    with psycopg.connect(migration_dsn, autocommit=True) as owner:
        owner.execute("ANALYZE execution")
        owner.execute("ANALYZE request")
    for _ in range(BACKLOG):
        enqueue(conn, flow_id, notify=False)
    return claim(conn, "worker-a", limit=RUNNING, lease_seconds=60)


def test_claim__walks_the_claim_index_in_order_without_a_sort(conn, runtime_dsn, stale_backlog):
    with psycopg.connect(runtime_dsn, autocommit=True) as claimer:
        _worker_session(claimer, claims=True)
        nodes = planned(
            claimer,
            sql.CLAIM_EXECUTIONS,
            {"owner": "worker-b", "limit": 10, "lease_seconds": 60, "outage": False},
        )
    types = {node["Node Type"] for node in nodes}
    assert "Sort" not in types
    scans = [n for n in nodes if n.get("Relation Name") == "execution" and "Index Name" in n]
    assert any(n["Index Name"] == "execution_claim_idx" for n in scans)


@pytest.mark.parametrize(
    ("statement", "fields"),
    [
        (
            sql.CHECKPOINT_START,
            {
                "action_id": "a",
                "sequence": 0,
                "capability": "NO_OP",
                "capability_version": 1,
                "effect": "READ_ONLY",
                "input_hash": "h",
                "external_key": "k",
                "attempt": 1,
            },
        ),
        (sql.CHECKPOINT_SUCCEED, {"action_id": "a", "attempt": 1, "output": {}}),
    ],
    ids=["start", "succeed"],
)
def test_checkpoint_write__looks_up_each_holder_by_its_execution_id(
    conn, stale_backlog, statement, fields
):
    items = [
        {
            "execution_id": str(found.execution_id),
            "request_id": str(found.fence.request_id),
            "token": found.fence.token,
            "owner": "worker-a",
            **fields,
        }
        for found in stale_backlog[:3]
    ]
    _worker_session(conn)
    nodes = planned(conn, statement, {"items": Jsonb(items), "synchronous_commit": "on"})
    # One lookup per item, keyed by that item's execution id (a primary-key lookup on a table
    # of any size; a tiny one may be read whole), never a join against every live execution.
    on_execution = [n for n in nodes if n.get("Relation Name") == "execution"]
    assert on_execution
    for node in on_execution:
        key = node.get("Index Cond") if "Index Name" in node else node.get("Filter")
        assert "(id = i.execution_id)" in key, node
        assert node.get("Index Name", "execution_pkey") == "execution_pkey", node


HISTORY = 20_000  # finished executions, analysed while nothing was in flight

# A finished execution of the history, as many as HISTORY, all under one request.
_HISTORY = """
INSERT INTO execution (id, request_id, flow_id, transition_id, status, accepted_revision,
                       attempts, fencing_token, actor_snapshot, finished_at)
SELECT gen_random_uuid(), %(request_id)s, %(flow_id)s, 'go', 'SUCCEEDED', 2, 1, 1, '{}',
       clock_timestamp()
  FROM generate_series(1, %(n)s)
"""


@pytest.fixture
def backlog_after_history(conn, make_flow, migration_dsn):
    """Finished history vacuumed while nothing was in flight, then a claimed backlog.

    The statistics then say execution_pkey is deep and execution_claim_idx is empty, however
    many rows the backlog has put in it since.
    """
    flow_id = make_flow([action("a", "NO_OP")])
    done = enqueue(conn, flow_id, notify=False)
    with psycopg.connect(migration_dsn, autocommit=True) as owner:
        owner.execute(
            "UPDATE execution SET status = 'SUCCEEDED', finished_at = clock_timestamp() "
            "WHERE id = %s",
            [done.execution_id],
        )
        owner.execute(_HISTORY, {"request_id": done.request_id, "flow_id": flow_id, "n": HISTORY})
        owner.execute("VACUUM ANALYZE execution")
        owner.execute("ANALYZE request")
    for _ in range(BACKLOG):
        enqueue(conn, flow_id, notify=False)
    return claim(conn, "worker-a", limit=RUNNING, lease_seconds=60)


# Parameters the statements below leave uncast, by type; any other is text.
_TYPES = {
    "execution_id": "uuid",
    "request_id": "uuid",
    "token": "bigint",
    "attempt": "integer",
    "output": "jsonb",
    "limit": "integer",
    "outage": "boolean",
    "step_ids": "text[]",
}


def _generic_plan(
    conn: psycopg.Connection, statement: str, params: dict, *, analyse: bool = False
) -> list[dict]:
    """The generic plan's nodes, as a worker connection runs the statement (not run here; with
    `analyse`, run in a transaction rolled back, each node with what it read)."""
    names = _prepare(conn, statement)
    try:
        return _explain_prepared(conn, names, params, analyse=analyse)
    finally:
        conn.execute("DEALLOCATE fenced")


def _prepare(conn: psycopg.Connection, statement: str) -> list[str]:
    """PREPARE the statement as `fenced`; returns its parameters' names in $n order."""
    names: list[str] = []

    def number(match: re.Match) -> str:
        if match.group(1) not in names:
            names.append(match.group(1))
        return f"${names.index(match.group(1)) + 1}"

    text = re.sub(r"%\((\w+)\)s", number, statement)
    types = ", ".join(_TYPES.get(name, "text") for name in names)
    conn.execute(f"PREPARE fenced ({types}) AS {text}")
    return names


def _explain_prepared(
    conn: psycopg.Connection, names: list[str], params: dict, *, analyse: bool = False
) -> list[dict]:
    """The nodes of `fenced`'s plan (its generic plan under WORKER_SESSION, made at its first
    EXPLAIN and kept by the session, as a worker's prepared statement is)."""
    values = pgsql.SQL(", ").join(pgsql.Literal(params[name]) for name in names)
    explain = "EXPLAIN (ANALYZE, FORMAT JSON)" if analyse else "EXPLAIN (FORMAT JSON)"
    query = pgsql.SQL(explain + " EXECUTE fenced ({})").format(values)
    with conn.transaction(force_rollback=True) if analyse else contextlib.nullcontext():
        (row,) = conn.execute(query).fetchone()
    document = row if isinstance(row, list) else json.loads(row)
    return list(plan_nodes(document[0]["Plan"]))


def _read_on_execution(nodes: list[dict]) -> int:
    """Entries read from execution's indexes, kept or filtered out (a bitmap index scan names
    no relation, only its index)."""
    return sum(
        (n["Actual Rows"] + n.get("Rows Removed by Filter", 0)) * n["Actual Loops"]
        for n in nodes
        if n.get("Index Name", "").startswith("execution_")
    )


def _fence(found) -> dict:
    return {
        "execution_id": str(found.execution_id),
        "request_id": str(found.fence.request_id),
        "token": found.fence.token,
        "owner": "worker-a",
    }


def _statements() -> dict[str, str]:
    """Every statement of the executions/sql package, read from its owner modules."""
    found = {}
    for owner in pkgutil.iter_modules(sql.__path__):
        module = importlib.import_module(f"{sql.__name__}.{owner.name}")
        for name, text in vars(module).items():
            public = name.isupper() and not name.startswith("_")  # fragments are private
            if public and isinstance(text, str) and name not in ("FENCE", "NOTIFY_CHANNEL"):
                found[name] = text
    return found


def _fenced() -> dict[str, str]:
    """Every statement of the package that carries the fence, in any of its forms."""
    forms = list(sql.FENCES.values())
    return {name: text for name, text in _statements().items() if any(f in text for f in forms)}


# Values of the parameters of fenced statements, by name (the holder's own come from its claim).
_VALUES = {
    "lease_seconds": 60,
    "delay_seconds": 1,
    "error_code": "E",
    "error_detail": "d",
    "action_id": "a",
    "attempt": 1,
    "status": "FAILED",
    "output": None,
    "synchronous_commit": "on",
    "actor": "worker-a",
    "timeout_seconds": 60,
    "deadline": datetime.datetime(2030, 1, 1, tzinfo=datetime.UTC),
    "step_ids": ["a:compensate"],
}
# Values of an item's columns (jsonb_to_recordset) by type, unless the holder gives them.
_ITEM_VALUES = {
    "text": "a",
    "integer": 1,
    "bigint": 2,
    "jsonb": {},
    "text[]": ["a"],
    "double precision": 0.0,
}
_ITEM_COLUMNS = re.compile(r"jsonb_to_recordset\(%\(items\)s::jsonb\) AS i\(([^)]*)\)")


def _params(name: str, statement: str, held) -> dict:
    """Parameters for `statement`, read off its text: the holders' coordinates and items."""
    holders = [_fence(found) for found in held[:3]]
    params = {}
    for param in dict.fromkeys(re.findall(r"%\((\w+)\)s", statement)):
        if param in holders[0]:
            params[param] = holders[0][param]
        elif param in ("execution_ids", "request_ids", "tokens"):
            params[param] = [h[param[:-1]] for h in holders]
        elif param == "items":
            columns = _ITEM_COLUMNS.search(statement).group(1)
            fields = [c.split(maxsplit=1) for c in re.split(r",\s*", columns.strip())]
            params["items"] = Jsonb(
                [{f: h[f] if f in h else _ITEM_VALUES[t] for f, t in fields} for h in holders]
            )
        else:
            assert param in _VALUES, f"{name}: give the plan test a value for %({param})s"
            params[param] = _VALUES[param]
    return params


def test_fenced_statements__are_found_and_every_holder_token_is_fenced():
    statements = _statements()
    # Every statement of an owner module is in the package's index, which callers use.
    assert {
        name for name in statements if getattr(sql, name, None) is not statements[name]
    } == set()
    fenced = _fenced()
    # The hot path and every ending of a run are among them.
    assert {
        "LEASE_PROBE",
        "LOAD_EXECUTION",
        "RENEW_LEASES",
        "CHECKPOINT_START",
        "CHECKPOINT_SUCCEED",
        "CHECKPOINT_SETTLE",
        "EXECUTION_SCHEDULE_RETRY",
        "EXECUTION_FAIL",
        "EXECUTION_REQUIRE_RECONCILIATION",
        "EXECUTION_FINALIZE",
    } <= set(fenced)
    # A statement that compares an execution's token with one it was given is a holder's write
    # and must carry the fence, unless it is an operator write guarded under its own lock.
    compares_token = {
        name
        for name, text in _statements().items()
        if re.search(r"(WHERE|AND)\s+(\w+\.)?fencing_token = (%\(token\)s|\w+\.token\b)", text)
    }
    assert compares_token - set(fenced) == set(sql.OPERATOR_GUARDED)


def test_fenced_statements__find_their_execution_by_primary_key_after_history(
    conn, backlog_after_history
):
    _worker_session(conn)
    for name, statement in _fenced().items():
        nodes = _generic_plan(conn, statement, _params(name, statement, backlog_after_history))
        on_execution = [
            n
            for n in nodes
            if n.get("Relation Name") == "execution" and n["Node Type"] != "ModifyTable"
        ]
        assert on_execution, name
        for node in on_execution:
            # execution_claim_idx counted empty would be walked end to end for the id on every
            # call; execution_pkey finds the row whatever the statistics say.
            assert node.get("Index Name") == "execution_pkey", (name, node)
        # The holder's request too, when a statement reads it: by its key.
        for node in nodes:
            if node.get("Relation Name") == "request" and node["Node Type"] != "ModifyTable":
                assert node.get("Index Name") == "request_pkey", (name, node)


GROWN = 20_000  # requests accepted after the table was analysed

_REQUESTS = """
INSERT INTO request (id, flow_id, owner, scope, data, state, revision, version)
SELECT gen_random_uuid(), %(flow_id)s, 'alice', 'acme', '{}', 'DRAFT', 2, 2
  FROM generate_series(1, %(n)s)
"""


@pytest.mark.parametrize("analysed", ["before it grew", "with none blocked"])
def test_final_commit__locks_each_items_request_by_its_key(
    conn, make_flow, migration_dsn, analysed
):
    """A grouped statement's items come from a function scan the planner counts as 100 rows
    whatever the batch; against a request table analysed small, hashing the whole table looked
    cheaper than 100 key lookups, and the final commit's generic plan scanned every request on
    each call (found by the benchmark: 0.2 ms per execution at 10,000 requests, growing). And
    analysed while no request was blocked, request_blocked_idx counted empty, and the lookup
    walked it whole for the id, as the fence's status once walked execution_claim_idx."""
    flow_id = make_flow([action("a", "NO_OP")])
    with psycopg.connect(migration_dsn, autocommit=True) as owner:
        if analysed == "before it grew":
            owner.execute("ANALYZE request")
        owner.execute(_REQUESTS, {"flow_id": flow_id, "n": GROWN})
        if analysed == "with none blocked":
            owner.execute("ANALYZE request")
    for _ in range(3):
        enqueue(conn, flow_id, notify=False)
    held = claim(conn, "worker-a", limit=3, lease_seconds=60)
    _worker_session(conn)
    statement = sql.EXECUTION_FINALIZE
    nodes = _generic_plan(conn, statement, _params("EXECUTION_FINALIZE", statement, held))
    on_request = [
        n for n in nodes if n.get("Relation Name") == "request" and n["Node Type"] != "ModifyTable"
    ]
    assert on_request
    for node in on_request:
        assert node.get("Index Name") == "request_pkey", node


def test_claim__after_statistics_of_an_empty_queue_scans_no_table_whole(
    conn, make_flow, runtime_dsn, migration_dsn
):
    """An ANALYZE while nothing is queued (common) says every table is empty, and a generic plan
    made then is kept for the life of the worker's connection: the claim used to join its rows
    by scanning every execution and every request, once per claimed row (found by the benchmark,
    3 ms of PostgreSQL CPU per execution at a 10,000-row backlog)."""
    flow_id = make_flow([action("a", "NO_OP")])
    with psycopg.connect(migration_dsn, autocommit=True) as owner:
        owner.execute("ANALYZE request, execution, action_execution, audit_event")
    for _ in range(BACKLOG):
        enqueue(conn, flow_id, notify=False)
    with psycopg.connect(runtime_dsn, autocommit=True) as claimer:
        _worker_session(claimer, claims=True)
        params = {"owner": "worker-b", "limit": 10, "lease_seconds": 60, "outage": False}
        nodes = _generic_plan(claimer, sql.CLAIM_EXECUTIONS, params)
    _assert_claim_by_key(nodes)


# What the claim touches: its claim index; the claimed versions by their tuple ids; each one's
# request through request_pkey; a taken-over row's checkpoints by their key.
_CLAIM_INDEXES = {"execution_claim_idx", "request_pkey", "action_execution_action_uniq"}


def _assert_claim_by_key(nodes: list[dict]) -> None:
    whole = [n for n in nodes if n["Node Type"] == "Seq Scan"]
    assert whole == [], [n.get("Relation Name") for n in whole]
    indexes = {n["Index Name"] for n in nodes if "Index Name" in n}
    assert indexes <= _CLAIM_INDEXES, indexes
    assert {"execution_claim_idx", "request_pkey"} <= indexes, indexes
    (update,) = [n for n in nodes if n["Node Type"] == "ModifyTable" and n["Operation"] == "Update"]
    assert [n["Node Type"] for n in update["Plans"] if "Relation Name" in n] == ["Tid Scan"]


def test_claim__planned_on_empty_tables_reads_only_what_it_claims_from_a_backlog(
    conn, make_flow, runtime_dsn, migration_dsn
):
    """A worker's claim is prepared at its first run, on a just-created (or drained and
    vacuumed) queue, and that generic plan is kept for the connection's life. Planned on tables
    of no pages, every index of execution or request that holds an `id` column looked as cheap
    as the primary key, and the planner took a list index (id its last column) and walked it
    whole: once for the claimed rows and once per claimed row for its request (found by the
    benchmark on a fresh cluster: the claim ten times its cost of later runs, 1 ms of
    PostgreSQL time per execution at 1 x 10)."""
    flow_id = make_flow([action("a", "NO_OP")])
    with psycopg.connect(migration_dsn, autocommit=True) as owner:
        owner.execute("VACUUM ANALYZE request, execution, action_execution, audit_event")
    params = {"owner": "worker-b", "limit": 10, "lease_seconds": 60, "outage": False}
    with psycopg.connect(runtime_dsn, autocommit=True) as claimer:
        _worker_session(claimer, claims=True)
        names = _prepare(claimer, sql.CLAIM_EXECUTIONS)
        _explain_prepared(claimer, names, params)  # the generic plan, made on empty tables
        for _ in range(BACKLOG):
            enqueue(conn, flow_id, notify=False)
        nodes = _explain_prepared(claimer, names, params, analyse=True)
    _assert_claim_by_key(nodes)
    read = sum(
        (n["Actual Rows"] + n.get("Rows Removed by Filter", 0)) * n["Actual Loops"]
        for n in nodes
        if "Index Name" in n
    )
    assert read <= 2 * params["limit"] + 5, read
    (update,) = [n for n in nodes if n["Node Type"] == "ModifyTable" and n["Operation"] == "Update"]
    assert update["Actual Rows"] == params["limit"]


FAIR_BACKLOG = 20_000  # one tenant's due executions, accepted after the tables were analysed
FAIR_HELD = 1_000  # of them, held: more than the claim counts (fairness.HELD_COUNTED)

# n accepted executions of one tenant (the trigger copies each request's scope).
_TENANT_BACKLOG = """
WITH r AS (
    INSERT INTO request (id, flow_id, owner, scope, data, state, revision, version)
    SELECT gen_random_uuid(), %(flow_id)s, 'alice', %(scope)s, '{}', 'DRAFT', 2, 2
      FROM generate_series(1, %(n)s)
    RETURNING id
)
INSERT INTO execution (id, request_id, flow_id, transition_id, accepted_revision, actor_snapshot)
SELECT gen_random_uuid(), r.id, %(flow_id)s, 'go', 2, '{}' FROM r
"""
_TENANT_CLAIM_INDEXES = {
    "execution_fair_idx",
    "execution_held_idx",
    "execution_pkey",
    "request_pkey",
    "action_execution_action_uniq",
}


def test_tenant_claim__reads_a_bounded_number_of_rows_whatever_the_backlog(
    conn, make_flow, runtime_dsn, migration_dsn
):
    """WORKER_FAIRNESS=tenant's claim against one tenant's backlog of 20,000 (1,000 of them held)
    beside two small tenants, with statistics of an empty queue and again with fresh ones: no
    table is scanned whole, only its own indexes and the primary keys are touched, and it reads
    a bounded number of index entries, not the backlog nor every held execution (one descent
    per tenant, each tenant's first rows, its held ones up to HELD_COUNTED)."""
    flow_id = make_flow([action("a", "NO_OP")])
    with psycopg.connect(migration_dsn, autocommit=True) as owner:
        owner.execute("ANALYZE request, execution, action_execution, audit_event")
        for scope, n in (("tenant-a", FAIR_BACKLOG), ("tenant-b", 5), ("tenant-c", 5)):
            owner.execute(_TENANT_BACKLOG, {"flow_id": flow_id, "scope": scope, "n": n})
        held = claim(conn, "worker-a", limit=FAIR_HELD, lease_seconds=60)
        assert len(held) == FAIR_HELD  # tenant-a's
        for statistics in ("of an empty queue", "fresh"):
            if statistics == "fresh":
                owner.execute("ANALYZE request, execution")
            _assert_tenant_claim_bounded(runtime_dsn)


def _assert_tenant_claim_bounded(runtime_dsn: str) -> None:
    params = {"owner": "worker-b", "limit": 10, "lease_seconds": 60, "outage": False}
    with psycopg.connect(runtime_dsn, autocommit=True) as claimer:
        _worker_session(claimer, claims=True)
        nodes = _generic_plan(claimer, sql.CLAIM_EXECUTIONS_BY_TENANT, params, analyse=True)
    whole = [n for n in nodes if n["Node Type"] == "Seq Scan"]
    assert whole == [], [n.get("Relation Name") for n in whole]
    indexes = {n["Index Name"] for n in nodes if "Index Name" in n}
    assert indexes <= _TENANT_CLAIM_INDEXES, indexes
    assert {"execution_fair_idx", "execution_held_idx"} <= indexes, indexes
    read = _read_on_execution(nodes)
    assert read < 300, read
    (claimed,) = [
        n for n in nodes if n["Node Type"] == "ModifyTable" and n["Operation"] == "Update"
    ]
    assert claimed["Actual Rows"] == 10


# Every due execution of the given tenants parked on one route, for a place (until NULL,
# migration 0021) or for a rate's turn to be dealt (until 'infinity', migration 0031).
_PARKS = """
INSERT INTO route_park (execution_id, route, action_id, fencing_token, until, parked_at, scope)
SELECT e.id, 'p.lim@1', 'a', e.fencing_token, %(until)s, e.created_at, e.scope
  FROM execution AS e
 WHERE e.scope = ANY (%(scopes)s) AND e.status = 'PENDING'
"""
_HELD_COUNTED = importlib.import_module("executions.migrations.0025_route_park_held_counted")
_TURNS_DEALT = importlib.import_module("executions.migrations.0031_route_turns_dealt_by_tenant")


@pytest.mark.parametrize(
    ("order_query", "until", "park_index"),
    [
        (_HELD_COUNTED.ORDER_QUERY, None, "route_park_tenant_idx"),
        (_TURNS_DEALT.TURN_ORDER_QUERY, "infinity", "route_park_turn_idx"),
    ],
    ids=["for a place", "for a turn"],
)
def test_tenant_wake__reads_a_bounded_number_of_parks_whatever_the_backlog(
    conn, make_flow, runtime_dsn, migration_dsn, order_query, until, park_index
):
    """WORKER_FAIRNESS=tenant's order of parked executions, for a place (route_park_tenant_order,
    migrations 0021 and 0025) and for a rate's turn (route_park_turn_order, migration 0031),
    against one tenant's 19,000 parks and 1,000 held beside two small tenants, with statistics
    of empty tables and again with fresh ones: no table scanned whole, the parks' index skips
    from tenant to tenant and reads each one's first parks, not the backlog, and the held are
    counted up to HELD_COUNTED."""
    wake = _HELD_COUNTED
    statement = order_query.replace("p_route", "%(route)s").replace("p_count", "%(limit)s")
    flow_id = make_flow([action("a", "NO_OP")])
    with psycopg.connect(migration_dsn, autocommit=True) as owner:
        owner.execute("ANALYZE request, execution, route_park")
        for scope, n in (("tenant-a", FAIR_BACKLOG), ("tenant-b", 5), ("tenant-c", 5)):
            owner.execute(_TENANT_BACKLOG, {"flow_id": flow_id, "scope": scope, "n": n})
        assert len(claim(conn, "worker-a", limit=FAIR_HELD, lease_seconds=60)) == FAIR_HELD
        owner.execute(_PARKS, {"scopes": ["tenant-a", "tenant-b", "tenant-c"], "until": until})
        for statistics in ("of empty tables", "fresh"):
            if statistics == "fresh":
                owner.execute("ANALYZE request, execution, route_park")
            with psycopg.connect(runtime_dsn, autocommit=True) as waker:
                nodes = _generic_plan(
                    waker, statement, {"route": "p.lim@1", "limit": 5}, analyse=True
                )
            whole = [n for n in nodes if n["Node Type"] == "Seq Scan"]
            assert whole == [], [n.get("Relation Name") for n in whole]
            indexes = {n["Index Name"] for n in nodes if "Index Name" in n}
            assert indexes <= {park_index, "execution_held_idx", "execution_pkey"}, indexes
            assert park_index in indexes, indexes
            read = sum(
                (n["Actual Rows"] + n.get("Rows Removed by Filter", 0)) * n["Actual Loops"]
                for n in nodes
                if n.get("Relation Name") == "route_park"
            )
            assert read < 100, read
            counted = sum(
                n["Actual Rows"] * n["Actual Loops"]
                for n in nodes
                if n.get("Index Name") == "execution_held_idx"
            )
            assert counted <= wake.HELD_COUNTED, counted  # tenant-a's, not all it holds
            (top,) = [n for n in nodes if n["Node Type"] == "Limit"][:1]
            assert top["Actual Rows"] == 9  # 5 asked, 4 more for the locks' SKIP LOCKED


# Finished history: n executions of one request each, each with its checkpoint and the park it
# left (parks of executions that moved on stay until purgehistory).
_FINISHED_WITH_PARKS = """
WITH r AS (
    INSERT INTO request (id, flow_id, owner, scope, data, state, revision, version)
    SELECT gen_random_uuid(), %(flow_id)s, 'alice', 'tenant-h', '{}', 'DONE', 3, 3
      FROM generate_series(1, %(n)s)
    RETURNING id
),
x AS (
    INSERT INTO execution (id, request_id, flow_id, transition_id, status, accepted_revision,
                           attempts, fencing_token, actor_snapshot, finished_at)
    SELECT gen_random_uuid(), r.id, %(flow_id)s, 'go', 'SUCCEEDED', 2, 1, 1, '{}',
           clock_timestamp()
      FROM r
    RETURNING id
),
c AS (
    INSERT INTO action_execution (execution_id, action_id, sequence, capability,
                                  capability_version, effect, status, input_hash, external_key,
                                  attempt, fencing_token)
    SELECT x.id, 'a', 0, 'NO_OP', 1, 'READ_ONLY', 'SUCCEEDED', 'h', x.id::text || ':a', 1, 1
      FROM x
)
INSERT INTO route_park (execution_id, route, action_id, fencing_token, until, parked_at, scope)
SELECT x.id, 'p.lim@1', 'a', 0, NULL, clock_timestamp(), 'tenant-h' FROM x
"""
PEERS_HISTORY = 5_000  # finished executions, and then due ones
_PEERS_INDEXES = {
    "execution_claim_idx",
    "execution_pkey",
    "action_execution_action_uniq",
    "route_park_pkey",
}


@pytest.mark.parametrize("analysed", ["of empty tables", "of finished history"])
def test_park_peers__read_a_bounded_number_of_rows_whatever_the_backlog(
    conn, make_flow, runtime_dsn, migration_dsn, analysed
):
    """The peers a full route's take parks beside its own (route_park_peers, migrations 0022 and
    0032) against a backlog of 5,000 due executions of its flow after as much finished history
    (each with a checkpoint and a park left), with statistics of empty tables or of the history
    alone (an autoanalyze between the two), and again with fresh ones: no table scanned whole,
    the due rows read from execution_claim_idx in claim order, at most PEERS_AHEAD of them, then
    each one found by its key, never by walking a partial index over every due row for the ids,
    as the lookup did when its status test proved their predicate; each peer's checkpoints and
    park looked up by key."""
    peers = importlib.import_module("executions.migrations.0022_route_park_peers")
    by_key = importlib.import_module("executions.migrations.0032_route_park_peers_by_key")
    statement = (
        by_key.PEERS_QUERY.replace("p_parked_at", "%(parked_at)s::timestamptz")
        .replace("p_flow", "%(flow)s::bigint")
        .replace("p_transition", "%(transition)s")
    )
    flow_id = make_flow([action("a", "NO_OP")])
    tables = "request, execution, action_execution, route_park"
    with psycopg.connect(migration_dsn, autocommit=True) as owner:
        if analysed == "of empty tables":
            owner.execute(f"ANALYZE {tables}")
        owner.execute(_FINISHED_WITH_PARKS, {"flow_id": flow_id, "n": PEERS_HISTORY})
        if analysed == "of finished history":
            owner.execute(f"ANALYZE {tables}")
        owner.execute(
            _TENANT_BACKLOG, {"flow_id": flow_id, "scope": "tenant-a", "n": PEERS_HISTORY}
        )
        params = {
            "parked_at": datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=1),
            "flow": flow_id,
            "transition": "go",
        }
        for statistics in (analysed, "fresh"):
            if statistics == "fresh":
                owner.execute(f"ANALYZE {tables}")
            with psycopg.connect(runtime_dsn, autocommit=True) as taker:
                _worker_session(taker)
                taker.execute("SET enable_sort = off")  # as route_park_peers runs
                nodes = _generic_plan(taker, statement, params, analyse=True)
            whole = [n for n in nodes if n["Node Type"] == "Seq Scan"]
            assert whole == [], (statistics, [n.get("Relation Name") for n in whole])
            indexes = {n["Index Name"] for n in nodes if "Index Name" in n}
            assert indexes <= _PEERS_INDEXES, indexes
            assert "execution_claim_idx" in indexes, indexes
            # The walk in claim order once, then the rows by their key.
            on_execution = sorted(
                n["Index Name"] for n in nodes if n.get("Index Name", "").startswith("execution_")
            )
            assert on_execution == ["execution_claim_idx", "execution_pkey"], (
                statistics,
                on_execution,
            )
            assert not [n for n in nodes if n["Node Type"] == "Sort"], statistics
            read = _read_on_execution(nodes)
            assert read <= 2 * peers.PEERS_AHEAD + 10, [
                (n["Node Type"], n.get("Index Name"), n["Actual Rows"], n["Actual Loops"])
                for n in nodes
            ]
            (rows,) = [n for n in nodes if n["Node Type"] == "LockRows"]
            assert rows["Actual Rows"] == peers.PEERS_AHEAD
