"""What the API's fixed reads (executions/sql/reads.py) hand its views: a request's and an
execution's view columns by name, in the statements' column order, with no model instance built
per row. executions/api/render.py builds the JSON from them; an Execution instance has the same
attribute names, so an acceptance's answer is built by the same code as a read's."""

import datetime
import uuid
from typing import Any, NamedTuple


class RequestRow(NamedTuple):
    id: uuid.UUID
    flow_key: str
    flow_version: int
    state: str
    revision: int
    data: Any  # decoded JSON
    blocked: bool
    created_at: datetime.datetime
    updated_at: datetime.datetime


class ExecutionRow(NamedTuple):
    id: uuid.UUID
    request_id: uuid.UUID
    transition_id: str
    status: str
    attempts: int
    next_attempt_at: datetime.datetime | None  # a SUSPENDED one's deadline
    result: Any  # decoded JSON, or None
    error_code: str | None
    created_at: datetime.datetime
    finished_at: datetime.datetime | None
