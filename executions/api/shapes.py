"""The API's views of an execution, a request and an execution's step (and of the objects an
execution's view may hold), each declared once: its fields in order, each with its JSON name, its
kind, the column of the fixed reads' named row it is read from (executions/sql/rows.py) and, where
a model instance gives it otherwise, how. Everything that writes these views is derived from these
lists: the serializers (serializers.py: the OpenAPI schema, and the views of a model instance),
the dicts (render.py) and a row's JSON text (pagejson.py), each writing every kind its own way.
tests/integration/api/test_render.py and test_pagejson.py hold the three to one another.
"""

import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..flows.compensations import compensated_action
from ..models import ActionExecution, CheckpointStatus, Effect, ExecutionStatus, Request


class Kind(enum.Enum):
    """What a field's value is, which says how each writer writes it."""

    ID = "id"  # a UUID; a row's as its text already
    TEXT = "text"
    INTEGER = "integer"
    BOOLEAN = "boolean"
    TIME = "time"  # an aware datetime, or a row's text in UTC (executions/sql/rows.py)
    JSON = "json"  # a JSON object; a row's as the text PostgreSQL writes (rows.json_value)


@dataclass(frozen=True)
class Field:
    key: str  # the JSON name
    kind: Kind
    # The named row's attribute it is read from; a nested object's: its dict's key; a step's (which
    # has no named row): its model's attribute.
    column: str
    null: bool = False  # whether it may be null
    # How a model instance gives it when not as `column`: a dotted path (DRF's `source`), or
    # computed from the instance (then read-only in the schema).
    source: str | Callable[[Any], Any] | None = None
    choices: Any = None  # the values it takes (the schema's enumeration), when it is one of them
    help_text: str | None = None


@dataclass(frozen=True)
class Nested:
    """An object a view holds only when there is one (absent otherwise): read beside the row, not
    from it, and given to the writers by `key`."""

    key: str
    shape: "Shape"
    help_text: str


@dataclass(frozen=True, eq=False)  # each shape is itself (the writers' caches key on it)
class Shape:
    fields: tuple[Field, ...]
    nested: tuple[Nested, ...] = ()


def _result(name: str) -> Callable[[Any], Any]:
    def read(execution: Any) -> Any:
        return (execution.result or {}).get(name)

    return read


def _blocked(request: Request) -> bool:
    return request.blocked_by_id is not None


def _compensates(checkpoint: ActionExecution) -> str | None:
    return compensated_action(checkpoint.action_id)


WAITING_FOR = Shape(
    (
        Field(
            "actionId", Kind.TEXT, "actionId", help_text="The wait action (or asynchronous action)."
        ),
        Field(
            "event",
            Kind.TEXT,
            "event",
            help_text="The event it waits for; `callback` for an asynchronous provider's answer.",
        ),
        Field("deadline", Kind.TIME, "deadline", help_text="When the wait times out."),
    )
)

THROTTLED = Shape(
    (
        Field("actionId", Kind.TEXT, "actionId", help_text="The action a route limit holds back."),
        Field("capability", Kind.TEXT, "capability", help_text="Its route, `capability@version`."),
        Field(
            "until",
            Kind.TIME,
            "until",
            null=True,
            help_text="The earliest time it may go; null while it waits for a call in flight to "
            "end.",
        ),
    )
)

# An execution's and a step's error code, alike in both views.
ERROR_CODE = Field(
    "errorCode",
    Kind.TEXT,
    "error_code",
    null=True,
    help_text="A stable error code, when it failed.",
)

EXECUTION_VIEW = Shape(
    (
        Field("id", Kind.ID, "id"),
        Field("requestId", Kind.ID, "request_id"),
        Field("transitionId", Kind.TEXT, "transition_id"),
        Field("status", Kind.TEXT, "status", choices=ExecutionStatus.choices),
        Field(
            "outcome",
            Kind.TEXT,
            "outcome",
            null=True,
            source=_result("outcome"),
            help_text="The business outcome, once decided.",
        ),
        Field(
            "targetState",
            Kind.TEXT,
            "target_state",
            null=True,
            source=_result("targetState"),
            help_text="The state the request moves to.",
        ),
        ERROR_CODE,
        Field("attempts", Kind.INTEGER, "attempts"),
        Field("createdAt", Kind.TIME, "created_at"),
        Field("finishedAt", Kind.TIME, "finished_at", null=True),
    ),
    nested=(
        Nested(
            "waitingFor",
            WAITING_FOR,
            "While SUSPENDED only (absent otherwise): what the execution waits for.",
        ),
        Nested(
            "throttled",
            THROTTLED,
            "While a route limit holds its next call back (absent otherwise).",
        ),
    ),
)

REQUEST_VIEW = Shape(
    (
        Field("id", Kind.ID, "id"),
        Field("flowKey", Kind.TEXT, "flow_key", source="flow.key"),
        Field("flowVersion", Kind.INTEGER, "flow_version", source="flow.version"),
        Field("state", Kind.TEXT, "state"),
        Field("revision", Kind.INTEGER, "revision"),
        Field("data", Kind.JSON, "data"),
        Field(
            "blocked",
            Kind.BOOLEAN,
            "blocked",
            source=_blocked,
            help_text="True while an execution holds the request.",
        ),
        Field("createdAt", Kind.TIME, "created_at"),
        Field("updatedAt", Kind.TIME, "updated_at"),
    )
)

# An execution's step, as a client shows progress: never its input, output, external key or the
# provider's answer.
ACTION_VIEW = Shape(
    (
        Field("actionId", Kind.TEXT, "action_id"),
        Field("capability", Kind.TEXT, "capability"),
        Field("version", Kind.INTEGER, "capability_version"),
        Field("effect", Kind.TEXT, "effect", choices=Effect.choices),
        Field("status", Kind.TEXT, "status", choices=CheckpointStatus.choices),
        Field("attempts", Kind.INTEGER, "attempt", help_text="Attempts started so far."),
        Field("startedAt", Kind.TIME, "started_at"),
        Field("finishedAt", Kind.TIME, "finished_at", null=True),
        ERROR_CODE,
        Field(
            "compensates",
            Kind.TEXT,
            "action_id",
            null=True,
            source=_compensates,
            help_text="The actionId this step undoes, when it is a compensation; null otherwise.",
        ),
    )
)
