"""What the API's fixed reads (executions/sql/reads.py) hand its views: a request's and an
execution's view columns by name, in the statements' column order, with no model instance built
per row. executions/api/render.py builds the JSON from them; an Execution instance has the same
attribute names, so an acceptance's answer is built by the same code as a read's.

Their times are naive, in UTC (the statements select them `AT TIME ZONE 'UTC'`): psycopg reads a
plain timestamp in C, where Django's loader of timestamptz wraps psycopg's pure-Python one, and
`render.moment` writes one in UTC without a zone conversion. Together that was a fifth of a
page's CPU. Ids come as text, as their views write them: psycopg's UUID (built by uuid.UUID's
pure-Python constructor), its str() and its hash as a page's key cost more than the rest of the
row. Of an execution's result only its outcome and target state, the texts its view shows, not
the JSON to decode.
"""

import datetime
from typing import Any, NamedTuple


def utc(value: datetime.datetime) -> datetime.datetime:
    """A row's naive UTC time as an aware one."""
    return value.replace(tzinfo=datetime.UTC)


class RequestRow(NamedTuple):
    id: str
    flow_key: str
    flow_version: int
    state: str
    revision: int
    data: Any  # decoded JSON
    blocked: bool
    created_at: datetime.datetime  # naive, UTC
    updated_at: datetime.datetime  # naive, UTC


class ExecutionRow(NamedTuple):
    id: str
    request_id: str
    transition_id: str
    status: str
    attempts: int
    next_attempt_at: datetime.datetime | None  # naive, UTC; a SUSPENDED one's deadline
    outcome: str | None
    target_state: str | None
    error_code: str | None
    created_at: datetime.datetime  # naive, UTC
    finished_at: datetime.datetime | None  # naive, UTC

    @property
    def result(self) -> dict[str, str | None]:
        """The part of the execution's result its view shows, as the model's `result` has it."""
        return {"outcome": self.outcome, "targetState": self.target_state}
