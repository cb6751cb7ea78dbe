"""What one API call costs the database: the statements it sends, counted and pinned.

An acceptance is one transaction of a fixed, small number of statements whatever the request;
reading an execution is one statement. A change that adds a query to these paths fails here
and must say why in this file.
"""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

pytestmark = pytest.mark.django_db(transaction=True)  # real BEGIN and COMMIT, no savepoints

# One transaction: BEGIN, the request locked with its flow, the execution inserted, the
# request's counters and block updated, TRANSITION_ACCEPTED inserted, the NOTIFY, COMMIT.
ACCEPT_STATEMENTS = [
    "BEGIN",
    "SELECT",  # the caller's request and its flow, FOR UPDATE OF the request
    "INSERT",  # the execution
    "UPDATE",  # the request: revision, version, blocked_by
    "INSERT",  # TRANSITION_ACCEPTED
    "SELECT",  # pg_notify: wakes an idle worker at commit
    "COMMIT",
]
ACCEPT_WITH_KEY_STATEMENTS = [
    *ACCEPT_STATEMENTS[:2],
    "SELECT",  # an earlier acceptance with this Idempotency-Key, under the request's lock
    *ACCEPT_STATEMENTS[2:],
]
GET_STATEMENTS = ["SELECT"]  # the caller's execution, access filtered in the WHERE clause


def verbs(captured: CaptureQueriesContext) -> list[str]:
    return [query["sql"].split(None, 1)[0].upper() for query in captured.captured_queries]


def sent(captured: CaptureQueriesContext) -> list[str]:
    return [query["sql"][:100] for query in captured.captured_queries]


def test_accept__is_one_transaction_of_five_statements_between_begin_and_commit(alice, flow):
    created = alice.create()
    connection.ensure_connection()

    with CaptureQueriesContext(connection) as captured:
        response = alice.accept(created["id"], "submit", 1)

    assert response.status_code == 202, response.content
    assert verbs(captured) == ACCEPT_STATEMENTS, sent(captured)
    assert "FOR UPDATE" in captured.captured_queries[1]["sql"]
    assert "pg_notify" in captured.captured_queries[5]["sql"]


def test_accept_with_idempotency_key__adds_only_the_key_lookup(alice, flow):
    created = alice.create()
    connection.ensure_connection()

    with CaptureQueriesContext(connection) as captured:
        response = alice.accept(created["id"], "submit", 1, HTTP_IDEMPOTENCY_KEY="k-1")

    assert response.status_code == 202, response.content
    assert verbs(captured) == ACCEPT_WITH_KEY_STATEMENTS, sent(captured)

    with CaptureQueriesContext(connection) as replay:
        again = alice.accept(created["id"], "submit", 1, HTTP_IDEMPOTENCY_KEY="k-1")

    assert again.status_code == 202 and again.json() == response.json()
    assert verbs(replay) == ["BEGIN", "SELECT", "SELECT", "COMMIT"], sent(replay)


def test_get_execution__is_one_statement(alice, flow):
    created = alice.create()
    accepted = alice.accept(created["id"], "submit", 1).json()
    connection.ensure_connection()

    with CaptureQueriesContext(connection) as captured:
        response = alice.get(f"/api/v1/executions/{accepted['id']}")

    assert response.status_code == 200, response.content
    assert verbs(captured) == GET_STATEMENTS, sent(captured)


# Lists: one statement per page whatever its size (the rows with their flows; the caller's access
# in the WHERE clause), plus the flow's versions when filtered by flowKey, plus one for what the
# page's SUSPENDED executions wait for when it has any. An execution's steps: the execution
# (access), then its checkpoints.
LIST_REQUESTS_STATEMENTS = ["SELECT"]
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
