"""The API's statements name their columns as their rows' fields (executions/sql/rows.py), in
order: the rows are made from the statements' tuples by position, so a column added, dropped,
renamed or moved in one and not in the other fails here, not as a field holding another's value."""

import uuid

import pytest
from django.db import connection

from executions import sql
from executions.sql.rows import (
    AcceptReadRow,
    CallbackCheckpointRow,
    ExecutionRow,
    RequestRow,
    ResumeLockRow,
)

pytestmark = pytest.mark.django_db

NOBODY = str(uuid.uuid4())  # no row has it: only the statements' columns are read
# What a request statement gives: RequestRow's fields with the flow's id in place of its key and
# version, which executions/api/selectors.py looks up.
REQUEST_COLUMNS = ("id", "flow_id", *RequestRow._fields[3:])
ACCEPT_WRITE_PARAMS = {
    "execution_id": NOBODY,
    "request_id": NOBODY,
    "scope": "acme",
    "owner": "alice",
    "state": "DRAFT",
    "expected_revision": 1,
    "transition_id": "submit",
    "actor": None,
    "idempotency_key": None,
    "fingerprint": None,
    "subject": "alice",
    "payload": None,
    "trace_context": None,
}
PAGE = {"limit": 1}

STATEMENTS = {
    "ACCEPT_READ": (
        sql.ACCEPT_READ,
        {"request_id": NOBODY, "scope": "acme", "owner": "alice", "idempotency_key": None},
        AcceptReadRow._fields,
    ),
    "ACCEPT_WRITE": (sql.ACCEPT_WRITE, ACCEPT_WRITE_PARAMS, ExecutionRow._fields),
    "EXECUTION_VIEW": (
        sql.EXECUTION_VIEW.format(access="true"),
        {"execution_id": NOBODY},
        ExecutionRow._fields,
    ),
    "EXECUTION_PAGE": (sql.EXECUTION_PAGE.format(conditions="true"), PAGE, ExecutionRow._fields),
    "EXECUTION_PAGE_BY_TIME": (
        sql.EXECUTION_PAGE_BY_TIME.format(conditions="true"),
        PAGE,
        ExecutionRow._fields,
    ),
    "REQUEST_VIEW": (
        sql.REQUEST_VIEW.format(access="true"),
        {"request_id": NOBODY},
        REQUEST_COLUMNS,
    ),
    "REQUEST_PAGE": (sql.REQUEST_PAGE.format(conditions="true"), PAGE, REQUEST_COLUMNS),
    "REQUEST_PAGE_BY_TIME": (
        sql.REQUEST_PAGE_BY_TIME.format(conditions="true"),
        PAGE,
        REQUEST_COLUMNS,
    ),
    "CALLBACK_CHECKPOINT": (
        sql.CALLBACK_CHECKPOINT,
        {"external_key": f"{NOBODY}:charge"},
        CallbackCheckpointRow._fields,
    ),
    "RESUME_LOCK": (sql.RESUME_LOCK, {"execution_id": NOBODY}, ResumeLockRow._fields),
}


@pytest.mark.parametrize("name", STATEMENTS)
def test_statement__names_its_columns_as_its_rows_fields(name):
    statement, params, fields = STATEMENTS[name]
    with connection.cursor() as cursor:
        cursor.execute(statement, params)
        columns = tuple(column.name for column in cursor.description)
        assert cursor.fetchall() == []  # it matched nothing, as it should: nothing was written
    assert columns == fields
