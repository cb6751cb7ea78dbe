"""The rows the API's statements answer, by name: a request's and an execution's view columns
(what the fixed reads of executions/sql/reads.py and an acceptance's write hand the views; no
model instance per row; executions/api/shapes.py names each field's column), and what its writes
decide on, each statement naming its columns as its row's fields (tests/integration/api/
test_rows.py). Times come as the API writes them, text in UTC (`render.moment` rewrites them in
another zone); ids as text; of a result only its outcome and target state; a request's data as
JSON text, decoded (`json_value`) only as it is rendered (docs/adr/0021).
"""

import datetime
import json
import json.scanner
import uuid
from typing import Any, NamedTuple

# The decoder's own C scanner: json.loads wraps it in three Python calls, which cost more than
# decoding a small value.
_scan = json.scanner.make_scanner(json.JSONDecoder())  # type: ignore[arg-type]


def json_value(text: Any) -> Any:
    """A row's JSON (jsonb as PostgreSQL writes it: Django's connections read it as text)
    decoded; a value already decoded as it is."""
    if not isinstance(text, str):
        return text
    # PostgreSQL writes jsonb with nothing around it; anything else is json.loads's to judge.
    try:
        decoded, end = _scan(text, 0)
    except StopIteration:
        return json.loads(text)
    return decoded if end == len(text) else json.loads(text)


def instant(text: str) -> datetime.datetime:
    """A row's time (the API's text, in UTC) as an aware datetime."""
    return datetime.datetime.fromisoformat(text)


class RequestRow(NamedTuple):
    id: str
    flow_key: str
    flow_version: int
    state: str
    revision: int
    data: str  # JSON text, as PostgreSQL writes jsonb (json_value decodes it)
    blocked: bool
    created_at: str  # the API's text, UTC
    updated_at: str  # the API's text, UTC


class ExecutionRow(NamedTuple):
    id: str
    request_id: str
    transition_id: str
    status: str
    attempts: int
    next_attempt_at: str | None  # the API's text, UTC: a SUSPENDED one's deadline, else None
    outcome: str | None
    target_state: str | None
    error_code: str | None
    created_at: str  # the API's text, UTC
    finished_at: str | None  # the API's text, UTC


class AcceptReadRow(NamedTuple):
    """What an acceptance decides on (executions/sql/acceptance.py's ACCEPT_READ)."""

    flow_id: int
    flow_key: str
    flow_version: int
    flow_checksum: str
    state: str
    revision: int
    blocked_by_id: uuid.UUID | None
    earlier_id: uuid.UUID | None  # the execution the Idempotency-Key already names, if any
    earlier_fingerprint: str | None  # the body that execution was accepted with


class CallbackCheckpointRow(NamedTuple):
    """The checkpoint a callback names, with its execution's request (waits.py's
    CALLBACK_CHECKPOINT)."""

    execution_id: uuid.UUID
    action_id: str
    status: str
    output: Any  # JSON text as Django's cursors hand jsonb over, or decoded
    capability: str
    capability_version: int
    request_id: uuid.UUID


class ResumeLockRow(NamedTuple):
    """A resumed execution, locked (waits.py's RESUME_LOCK)."""

    status: str
    fencing_token: int
    flow_id: int
    transition_id: str
    next_attempt_at: datetime.datetime | None
