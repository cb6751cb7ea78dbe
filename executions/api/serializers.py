"""The API's JSON shapes, in camelCase: bodies it accepts (strict) and views it returns.

Input serializers refuse what they do not know: an unknown field, a string where an integer is
expected (no "5" for 5, no true for 1), a non-object body. Each refusal names the field. Every
shape the API speaks is here, to be read beside docs/api.md.
"""

import re
from typing import TYPE_CHECKING, Any

from django.core.validators import RegexValidator
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from ..flows.canonical import compact_size
from ..flows.compensations import compensated_action
from ..flows.problems import IDENTIFIER, IDENTIFIER_RULE, MAX_NAME_LENGTH, MAX_VERSION
from ..models import (
    ActionExecution,
    CheckpointStatus,
    Effect,
    Execution,
    ExecutionStatus,
    Request,
)
from ..queue.cancel import MAX_REASON_CHARS
from ..queue.limits import throttled_each
from ..queue.operatorwrites import REASON_SPACES
from ..queue.waits import waiting_for

if TYPE_CHECKING:
    from django_stubs_ext import StrPromise

MAX_EVENT_ID_CHARS = 255  # characters of an eventId
MAX_PAYLOAD_BYTES = 256 * 1024  # bytes of an event's payload, as compact UTF-8 JSON
# An eventId: 1 to 255 visible ASCII characters, spaces allowed inside (as Idempotency-Key).
EVENT_ID = re.compile(r"[\x21-\x7e](?:[\x20-\x7e]{0,253}[\x21-\x7e])?")

MAX_REVISION = 2**63 - 1  # PostgreSQL bigint
# Strings the database can store: no NUL (jsonb and text refuse it). The body parser refuses it
# first, anywhere in a body (400); this states it in the OpenAPI schema of each top-level string.
NO_NUL = RegexValidator(r"^[^\x00]*$", message="must not contain a NUL character")


class StrictCharField(serializers.CharField):
    """A JSON string, taken as sent (no coercion from numbers, no trimming)."""

    default_error_messages = {"invalid": "must be a string"}

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("trim_whitespace", False)
        super().__init__(**kwargs)

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictIntegerField(serializers.IntegerField):
    """A JSON integer (no strings, booleans or fractions)."""

    default_error_messages = {"invalid": "must be an integer"}

    def to_internal_value(self, data: Any) -> int:
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("invalid")
        return super().to_internal_value(data)


@extend_schema_field({"type": "object", "additionalProperties": True})
class JsonObjectField(serializers.Field):
    """A JSON object, taken as sent."""

    default_error_messages = {"invalid": "must be a JSON object"}

    def to_internal_value(self, data: Any) -> dict[str, Any]:
        if not isinstance(data, dict):
            self.fail("invalid")
        return data

    def to_representation(self, value: Any) -> Any:
        return value


class StrictSerializer(serializers.Serializer):
    """A body that must be a JSON object holding only the declared fields."""

    def run_validation(self, data: Any = serializers.empty) -> Any:
        if not isinstance(data, dict):
            raise serializers.ValidationError(
                {"non_field_errors": ["the body must be a JSON object"]}
            )
        return super().run_validation(data)

    def to_internal_value(self, data: Any) -> dict[str, Any]:
        unknown = [name for name in data if name not in self.fields]
        if unknown:
            allowed = ", ".join(self.fields)
            raise serializers.ValidationError(
                {name[:100]: [f"unknown field (allowed: {allowed})"] for name in unknown}
            )
        return super().to_internal_value(data)


def _messages(**extra: str) -> "dict[str, str | StrPromise]":
    return {"required": "is required", "null": "must not be null", **extra}


def _name_field(help_text: str, validators: list | None = None) -> StrictCharField:
    """A flow's key, a transition's id, an event's name: 1 to MAX_NAME_LENGTH characters."""
    return StrictCharField(
        min_length=1,
        max_length=MAX_NAME_LENGTH,
        validators=[NO_NUL] if validators is None else validators,
        error_messages=_messages(
            blank="must not be empty",
            min_length="must not be empty",
            max_length=f"must be at most {MAX_NAME_LENGTH} characters",
        ),
        help_text=help_text,
    )


def _positive_field(maximum: int, help_text: str, required: bool = True) -> StrictIntegerField:
    """A version or a revision: an integer from 1 to `maximum`."""
    return StrictIntegerField(
        required=required,
        min_value=1,
        max_value=maximum,
        error_messages=_messages(
            min_value="must be at least 1", max_value=f"must be at most {maximum}"
        ),
        help_text=help_text,
    )


class RequestCreateSerializer(StrictSerializer):
    flowKey = _name_field("The key of a published flow.")
    flowVersion = _positive_field(
        MAX_VERSION, "A published version of the flow; without it, the highest one.", required=False
    )
    # DRF's serializer metaclass takes declared fields out of the class body, so this field does
    # not hide Serializer.data as the type checker believes.
    data = JsonObjectField(  # type: ignore[assignment]
        error_messages=_messages(),
        help_text="The request's data: validated against the flow's dataSchema, and at most "
        "256 KiB as compact UTF-8 JSON. No string in it, at any depth, may hold NUL (\\u0000).",
    )


class TransitionAcceptSerializer(StrictSerializer):
    transitionId = _name_field("The id of a transition of the request's flow.")
    expectedRevision = _positive_field(
        MAX_REVISION,
        "The request revision the caller saw; a different current one is a conflict.",
    )


REASON_PATTERN = r"^[^\x00]*[^\x00 \t\n\r\f\v][^\x00]*$"  # one character that is not a space


class ExecutionCancelSerializer(StrictSerializer):
    reason = StrictCharField(
        min_length=1,
        max_length=MAX_REASON_CHARS,
        # Spaces are spelled out (not \s/\S): regular-expression engines disagree on whether
        # characters like U+001C are white space, and the schema must mean the same everywhere.
        validators=[RegexValidator(REASON_PATTERN, message="must not be only spaces")],
        error_messages=_messages(
            blank="must not be empty",
            min_length="must not be empty",
            max_length=f"must be at most {MAX_REASON_CHARS} characters",
        ),
        help_text="Why it is cancelled, for the audit trail: 1 to "
        f"{MAX_REASON_CHARS} characters, not only spaces.",
    )

    def validate_reason(self, value: str) -> str:
        return value.strip(REASON_SPACES)


class ExecutionEventSerializer(StrictSerializer):
    eventId = StrictCharField(
        min_length=1,
        max_length=MAX_EVENT_ID_CHARS,
        validators=[
            RegexValidator(
                rf"^{EVENT_ID.pattern}$",
                message="must be visible ASCII characters (spaces only inside)",
            )
        ],
        error_messages=_messages(
            blank="must not be empty",
            min_length="must not be empty",
            max_length=f"must be at most {MAX_EVENT_ID_CHARS} characters",
        ),
        help_text="The sender's id for this event, unique per execution: sending it again with "
        "the same body is a harmless replay. 1 to 255 visible ASCII characters.",
    )
    event = _name_field(
        "The event's name, as the flow's wait action names it.",
        [RegexValidator(rf"^{IDENTIFIER.pattern}$", message=f"must be {IDENTIFIER_RULE}")],
    )
    payload = JsonObjectField(
        error_messages=_messages(),
        help_text="The event's payload: validated against the wait's payloadSchema; it becomes "
        "the wait action's output (at most 256 KiB as compact UTF-8 JSON).",
    )

    def validate_eventId(self, value: str) -> str:
        if not EVENT_ID.fullmatch(value):
            raise serializers.ValidationError(
                "must be visible ASCII characters (spaces only inside)"
            )
        return value

    def validate_event(self, value: str) -> str:
        if not IDENTIFIER.fullmatch(value):
            raise serializers.ValidationError(f"must be {IDENTIFIER_RULE}")
        return value

    def validate_payload(self, value: dict[str, Any]) -> dict[str, Any]:
        if compact_size(value) > MAX_PAYLOAD_BYTES:
            raise serializers.ValidationError(
                f"must be at most {MAX_PAYLOAD_BYTES} bytes as compact UTF-8 JSON"
            )
        return value


class CallbackSerializer(serializers.Serializer):
    """Documentation only: the body an asynchronous provider posts (read by callbacks.py)."""

    externalKey = serializers.CharField(
        max_length=200, help_text="The call's external key, <executionId>:<actionId>."
    )
    output = JsonObjectField(help_text="The call's output, valid against the output schema.")


class WaitingForSerializer(serializers.Serializer):
    actionId = serializers.CharField(help_text="The wait action (or asynchronous action).")
    event = serializers.CharField(
        help_text="The event it waits for; `callback` for an asynchronous provider's answer."
    )
    deadline = serializers.DateTimeField(help_text="When the wait times out.")


class ThrottledSerializer(serializers.Serializer):
    actionId = serializers.CharField(help_text="The action a route limit holds back.")
    capability = serializers.CharField(help_text="Its route, `capability@version`.")
    until = serializers.DateTimeField(
        allow_null=True,
        help_text="The earliest time it may go; null while it waits for a call in flight to end.",
    )


class RequestViewSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    flowKey = serializers.CharField(source="flow.key")
    flowVersion = serializers.IntegerField(source="flow.version")
    state = serializers.CharField()
    revision = serializers.IntegerField()
    data = JsonObjectField()  # type: ignore[assignment]  # a declared field: see RequestCreateSerializer
    blocked = serializers.SerializerMethodField(
        help_text="True while an execution holds the request."
    )
    createdAt = serializers.DateTimeField(source="created_at")
    updatedAt = serializers.DateTimeField(source="updated_at")

    def get_blocked(self, request: Request) -> bool:
        return request.blocked_by_id is not None


class ExecutionViewSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    requestId = serializers.UUIDField(source="request_id")
    transitionId = serializers.CharField(source="transition_id")
    status = serializers.ChoiceField(choices=ExecutionStatus.choices)
    outcome = serializers.SerializerMethodField(help_text="The business outcome, once decided.")
    targetState = serializers.SerializerMethodField(
        method_name="get_target_state", help_text="The state the request moves to."
    )
    errorCode = serializers.CharField(
        source="error_code", allow_null=True, help_text="A stable error code, when it failed."
    )
    attempts = serializers.IntegerField()
    createdAt = serializers.DateTimeField(source="created_at")
    finishedAt = serializers.DateTimeField(source="finished_at", allow_null=True)
    waitingFor = serializers.SerializerMethodField(
        required=False,
        help_text="While SUSPENDED only (absent otherwise): what the execution waits for.",
    )
    throttled = serializers.SerializerMethodField(
        required=False,
        help_text="While a route limit holds its next call back (absent otherwise).",
    )

    def to_representation(self, instance: Execution) -> dict[str, Any]:
        view = super().to_representation(instance)
        for optional in ("waitingFor", "throttled"):
            if view.get(optional) is None:
                view.pop(optional, None)
        return view

    @extend_schema_field(ThrottledSerializer)
    def get_throttled(self, execution: Execution) -> dict[str, Any] | None:
        # A page passes what each of its executions is throttled on, read in one statement.
        known = self.context.get("throttled")
        found = (known if known is not None else throttled_each([execution])).get(str(execution.id))
        return None if found is None else ThrottledSerializer(found).data

    @extend_schema_field(WaitingForSerializer)
    def get_waitingFor(self, execution: Execution) -> dict[str, Any] | None:
        # A page passes what each of its executions waits for, read in one statement.
        known = self.context.get("waiting")
        found = known.get(str(execution.id)) if known is not None else waiting_for(execution)
        return None if found is None else WaitingForSerializer(found).data

    def get_outcome(self, execution: Execution) -> str | None:
        return (execution.result or {}).get("outcome")

    def get_target_state(self, execution: Execution) -> str | None:
        return (execution.result or {}).get("targetState")


class RequestPageSerializer(serializers.Serializer):
    results = RequestViewSerializer(many=True)
    next = serializers.CharField(
        allow_null=True,
        help_text="The cursor of the next page (send it with the same filters), or null on "
        "the last page.",
    )


class ExecutionPageSerializer(serializers.Serializer):
    results = ExecutionViewSerializer(many=True)
    next = serializers.CharField(
        allow_null=True,
        help_text="The cursor of the next page (send it with the same filters), or null on "
        "the last page.",
    )


class ExecutionActionSerializer(serializers.Serializer):
    """One step of an execution, as a client shows progress: never its input, output, external
    key or the provider's answer."""

    actionId = serializers.CharField(source="action_id")
    capability = serializers.CharField()
    version = serializers.IntegerField(source="capability_version")
    effect = serializers.ChoiceField(choices=Effect.choices)
    status = serializers.ChoiceField(choices=CheckpointStatus.choices)
    attempts = serializers.IntegerField(source="attempt", help_text="Attempts started so far.")
    startedAt = serializers.DateTimeField(source="started_at")
    finishedAt = serializers.DateTimeField(source="finished_at", allow_null=True)
    errorCode = serializers.CharField(
        source="error_code", allow_null=True, help_text="A stable error code, when it failed."
    )
    compensates = serializers.SerializerMethodField(
        help_text="The actionId this step undoes, when it is a compensation; null otherwise."
    )

    def get_compensates(self, checkpoint: ActionExecution) -> str | None:
        return compensated_action(checkpoint.action_id)


class ExecutionActionListSerializer(serializers.Serializer):
    results = ExecutionActionSerializer(many=True)


class FlowViewSerializer(serializers.Serializer):
    key = serializers.CharField()
    version = serializers.IntegerField()
    checksum = serializers.CharField(help_text="SHA-256 of the definition's canonical JSON.")
    publishedAt = serializers.DateTimeField(source="published_at")


def _name(**kwargs: Any) -> serializers.CharField:
    kwargs.setdefault("validators", [NO_NUL])
    return serializers.CharField(min_length=1, max_length=MAX_NAME_LENGTH, **kwargs)


class FlowDefinitionSerializer(serializers.Serializer):
    """A flow definition as docs/flow-format.md describes it: the OpenAPI schema of `POST
    /api/v1/flows`.

    The view checks the whole definition itself (`executions.flows.checks`, every problem with
    its path, 422 FLOW_INVALID); this states its shape, so that a generated client sends what the
    check can accept. Nested strings must not hold NUL either (400 INVALID_BODY).
    """

    key = _name(
        validators=[RegexValidator(r"^[a-z0-9][a-z0-9_-]*$"), NO_NUL],
        help_text="Lowercase letters, digits, '-' and '_', starting with a letter or digit.",
    )
    version = serializers.IntegerField(min_value=1, max_value=MAX_VERSION)
    initialState = _name(help_text="One of `states`.")
    states = serializers.ListField(child=_name(), min_length=1)
    dataSchema = JsonObjectField(help_text="JSON Schema Draft 2020-12, self-contained.")
    transitions = serializers.ListField(
        child=JsonObjectField(),
        help_text="Each with id, from, actions, decision (docs/flow-format.md).",
    )
    caseSummary = serializers.ListField(
        child=serializers.CharField(validators=[NO_NUL]),
        required=False,
        max_length=8,
        help_text="JSON Pointers into the request data shown on reconciliation cases.",
    )


class ErrorSerializer(serializers.Serializer):
    code = serializers.CharField(help_text="A stable error code.")
    detail = serializers.CharField(help_text="What is wrong, for people.")


class FlowProblemSerializer(serializers.Serializer):
    path = serializers.CharField(help_text="Where in the definition, e.g. $.transitions[0].id")
    message = serializers.CharField()


class FlowInvalidSerializer(ErrorSerializer):
    problems = FlowProblemSerializer(many=True)
