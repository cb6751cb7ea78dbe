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
