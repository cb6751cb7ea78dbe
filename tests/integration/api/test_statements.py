"""What one API call costs the database: the statements it sends, counted and pinned.

An acceptance is two statements whatever the request, with no BEGIN or COMMIT of its own: the
read, then the write that is its one transaction (executions/api/acceptance.py); reading an
execution is one statement, two while it is RUNNING. A change that adds a query to these paths
fails here and must say why in this file.
"""

import datetime

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from executions import sql
from executions.flows import cache as flowcache

pytestmark = pytest.mark.django_db(transaction=True)  # real transactions, no savepoints

# The caller's request with its flow's identity (and the execution an Idempotency-Key already
# names on it), then one statement: the request's counters and block, the execution,
# TRANSITION_ACCEPTED and the NOTIFY, committed as it ends.
ACCEPT_STATEMENTS = ["SELECT", "WITH"]
ACCEPT_WITH_KEY_STATEMENTS = ACCEPT_STATEMENTS  # the key's lookup is part of the read
REPLAY_STATEMENTS = ["SELECT", "SELECT"]  # the read finds the key's execution; then that one
# The first acceptance on a flow version in a process also reads its definition, once.
FIRST_ON_FLOW_STATEMENTS = ["SELECT", "SELECT", "WITH"]
GET_STATEMENTS = ["SELECT"]  # the caller's execution, access filtered in the WHERE clause
# A RUNNING one may be held by its worker for a rate's moment: whether it is (`throttled`), too.
GET_RUNNING_STATEMENTS = ["SELECT", "SELECT"]


def verbs(captured: CaptureQueriesContext) -> list[str]:
    # A page's planner setting, said in the same message as its SELECT, is not a statement of
    # its own here.
    return [
        query["sql"].removeprefix(sql.PAGE_PLANNING).split(None, 1)[0].upper()
        for query in captured.captured_queries
    ]


def sent(captured: CaptureQueriesContext) -> list[str]:
    return [query["sql"][:100] for query in captured.captured_queries]


@pytest.fixture
def warm(alice, flow) -> None:
    """The flow's definition already read by this process, as after its first acceptance."""
    alice.accept(alice.create()["id"], "submit", 1)
    connection.ensure_connection()


def test_accept__is_two_statements_and_the_write_is_one_transaction(alice, flow, warm):
    created = alice.create()

    with CaptureQueriesContext(connection) as captured:
        response = alice.accept(created["id"], "submit", 1)

    assert response.status_code == 202, response.content
    assert verbs(captured) == ACCEPT_STATEMENTS, sent(captured)
    write = captured.captured_queries[1]["sql"]
    for part in ("UPDATE request", "INSERT INTO execution", "INSERT INTO audit_event", "pg_notify"):
        assert part in write, write
    assert connection.get_autocommit()  # no transaction left open around it


def test_accept__the_first_on_a_flow_version_reads_its_definition_once(alice, flow):
    flowcache.forget_all()
    first, second = alice.create(), alice.create()
    connection.ensure_connection()

    with CaptureQueriesContext(connection) as captured:
        assert alice.accept(first["id"], "submit", 1).status_code == 202
    assert verbs(captured) == FIRST_ON_FLOW_STATEMENTS, sent(captured)
    assert "definition" in captured.captured_queries[1]["sql"]

    with CaptureQueriesContext(connection) as captured:
        assert alice.accept(second["id"], "submit", 1).status_code == 202
    assert verbs(captured) == ACCEPT_STATEMENTS, sent(captured)


def test_accept__a_refusal_is_the_read_alone(alice, flow, warm):
    created = alice.create()

    with CaptureQueriesContext(connection) as captured:
        response = alice.accept(created["id"], "submit", 7)

    assert response.status_code == 409, response.content
    assert verbs(captured) == ["SELECT"], sent(captured)


def test_accept_with_idempotency_key__costs_nothing_more(alice, flow, warm):
    created = alice.create()

    with CaptureQueriesContext(connection) as captured:
        response = alice.accept(created["id"], "submit", 1, HTTP_IDEMPOTENCY_KEY="k-1")

    assert response.status_code == 202, response.content
    assert verbs(captured) == ACCEPT_WITH_KEY_STATEMENTS, sent(captured)

    with CaptureQueriesContext(connection) as replay:
        again = alice.accept(created["id"], "submit", 1, HTTP_IDEMPOTENCY_KEY="k-1")

    assert again.status_code == 202 and again.json() == response.json()
    assert verbs(replay) == REPLAY_STATEMENTS, sent(replay)


def test_get_execution__is_one_statement(alice, flow):
    created = alice.create()
    accepted = alice.accept(created["id"], "submit", 1).json()
    connection.ensure_connection()

    with CaptureQueriesContext(connection) as captured:
        response = alice.get(f"/api/v1/executions/{accepted['id']}")

    assert response.status_code == 200, response.content
    assert verbs(captured) == GET_STATEMENTS, sent(captured)


def test_get_execution__running__also_reads_whether_a_limit_holds_it(alice, flow):
    from django.utils import timezone

    from executions.models import Execution

    created = alice.create()
    accepted = alice.accept(created["id"], "submit", 1).json()
    until = timezone.now() + datetime.timedelta(seconds=30)  # as a claim leaves it
    Execution.objects.filter(id=accepted["id"]).update(
        status="RUNNING", attempts=1, lease_owner="w", lease_expires_at=until, next_attempt_at=until
    )

    with CaptureQueriesContext(connection) as captured:
        response = alice.get(f"/api/v1/executions/{accepted['id']}")

    assert response.status_code == 200, response.content
    assert verbs(captured) == GET_RUNNING_STATEMENTS, sent(captured)
    assert "route_call" in captured.captured_queries[1]["sql"]


# Lists: one statement per page whatever its size (the rows with their flows; the caller's access
# in the WHERE clause), plus the flow's versions when filtered by flowKey, plus one for what the
# page's SUSPENDED executions wait for when it has any. An execution's steps: the execution
# (access), then its checkpoints.
LIST_REQUESTS_STATEMENTS = ["SELECT"]
# The flows a page names are read once per process (executions/flows/cache.py), after the page.
LIST_REQUESTS_FIRST_ON_FLOW_STATEMENTS = ["SELECT", "SELECT"]
LIST_REQUESTS_BY_FLOW_STATEMENTS = ["SELECT", "SELECT"]
LIST_EXECUTIONS_STATEMENTS = ["SELECT"]
LIST_EXECUTIONS_WITH_SUSPENDED_STATEMENTS = ["SELECT", "SELECT"]
ACTIONS_STATEMENTS = ["SELECT", "SELECT"]


@pytest.fixture
def twelve(alice, flow) -> list[str]:
    """Twelve of alice's requests, each with one execution."""
    ids = []
    for _ in range(12):
        created = alice.create()
        ids.append(alice.accept(created["id"], "submit", 1).json()["id"])
    connection.ensure_connection()
    return ids


@pytest.mark.parametrize("limit", [1, 5])
def test_list_pages__statements_do_not_grow_with_the_page(alice, twelve, limit):
    for path, expected in (
        (f"/api/v1/requests?limit={limit}", LIST_REQUESTS_STATEMENTS),
        (f"/api/v1/requests?limit={limit}&flowKey=claims", LIST_REQUESTS_BY_FLOW_STATEMENTS),
        (f"/api/v1/executions?limit={limit}", LIST_EXECUTIONS_STATEMENTS),
    ):
        first = alice.get(path).json()
        assert len(first["results"]) == limit
        with CaptureQueriesContext(connection) as captured:
            response = alice.get(f"{path}&cursor={first['next']}")
        assert response.status_code == 200, response.content
        assert len(response.json()["results"]) == limit
        assert verbs(captured) == expected, sent(captured)


def test_list_requests__a_flow_is_named_from_the_database_once_per_process(alice, twelve):
    flowcache.forget_all()
    with CaptureQueriesContext(connection) as captured:
        assert alice.get("/api/v1/requests?limit=5").status_code == 200
    assert verbs(captured) == LIST_REQUESTS_FIRST_ON_FLOW_STATEMENTS, sent(captured)
    assert "FROM flow" in captured.captured_queries[1]["sql"]

    with CaptureQueriesContext(connection) as captured:
        assert alice.get("/api/v1/requests?limit=5").status_code == 200
    assert verbs(captured) == LIST_REQUESTS_STATEMENTS, sent(captured)


def test_list_executions__suspended_ones_add_one_statement_for_the_page(alice, twelve):
    from executions.models import ActionExecution, Execution

    for execution_id in twelve[:5]:
        Execution.objects.filter(id=execution_id).update(status="SUSPENDED")
        ActionExecution.objects.create(
            execution_id=execution_id,
            action_id="approval",
            sequence=0,
            capability="wait:approved",
            capability_version=1,
            effect="READ_ONLY",
            status="WAITING",
            input_hash="0" * 64,
            external_key=f"{execution_id}:approval",
            fencing_token=1,
        )
    with CaptureQueriesContext(connection) as captured:
        response = alice.get("/api/v1/executions?limit=50")
    assert response.status_code == 200, response.content
    assert sum("waitingFor" in e for e in response.json()["results"]) == 5
    assert verbs(captured) == LIST_EXECUTIONS_WITH_SUSPENDED_STATEMENTS, sent(captured)


def test_execution_actions__are_two_statements(alice, twelve, django_assert_num_queries):
    with django_assert_num_queries(len(ACTIONS_STATEMENTS)):
        response = alice.get(f"/api/v1/executions/{twelve[0]}/actions")
    assert response.status_code == 200, response.content
