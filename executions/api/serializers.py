"""The API's JSON shapes, in camelCase: bodies it accepts (strict) and views it returns.

Input serializers refuse what they do not know: an unknown field, a string where an integer is
expected (no "5" for 5, no true for 1), a non-object body. Each refusal names the field. The
views' serializers are derived from the fields executions/api/shapes.py declares (`view_fields`).
"""

import datetime
import re
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from django.core.validators import RegexValidator
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from ..flows.canonical import compact_size
from ..flows.problems import IDENTIFIER, IDENTIFIER_RULE, MAX_NAME_LENGTH, MAX_VERSION
from ..models import Execution
from ..queue.cancel import MAX_REASON_CHARS
from ..queue.limits import throttled_each
from ..queue.operatorwrites import REASON_SPACES
from ..queue.waits import waiting_for
from .shapes import (
    ACTION_VIEW,
    EXECUTION_VIEW,
    REQUEST_VIEW,
    THROTTLED,
    WAITING_FOR,
    Field,
    Kind,
    Shape,
)

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


# -- the views (executions/api/shapes.py declares their fields) ----------------------------------

# The serializer field of each kind of value, and the type a computed one's method returns (what
# the schema reads for it).
_KIND_FIELDS: dict[Kind, type[serializers.Field]] = {
    Kind.ID: serializers.UUIDField,
    Kind.TEXT: serializers.CharField,
    Kind.INTEGER: serializers.IntegerField,
    Kind.BOOLEAN: serializers.BooleanField,
    Kind.TIME: serializers.DateTimeField,
    Kind.JSON: JsonObjectField,
}
_KIND_TYPES: dict[Kind, Any] = {
    Kind.ID: uuid.UUID,
    Kind.TEXT: str,
    Kind.INTEGER: int,
    Kind.BOOLEAN: bool,
    Kind.TIME: datetime.datetime,
    Kind.JSON: dict,
}


def _computed(field: Field) -> Callable[[Any, Any], Any]:
    """The method of a field a model instance gives computed (`source` a function)."""
    read = cast(Callable[[Any], Any], field.source)

    def method(self: serializers.Serializer, instance: Any) -> Any:
        return read(instance)

    kind = _KIND_TYPES[field.kind]
    method.__annotations__["return"] = kind | None if field.null else kind
    return method


def view_fields(shape: Shape) -> type[serializers.Serializer]:
    """A serializer declaring `shape`'s fields, read from a model instance (or, for a nested
    object, from its dict), and a method field for each nested object (the serializer that
    derives from it gives its `get_<key>`). Without a docstring: the schema would show it."""
    attrs: dict[str, Any] = {}
    for field in shape.fields:
        options: dict[str, Any] = {}
        if field.null:
            options["allow_null"] = True
        if field.help_text is not None:
            options["help_text"] = field.help_text
        if callable(field.source):
            attrs[field.key] = serializers.SerializerMethodField(**options)
            attrs[f"get_{field.key}"] = _computed(field)
            continue
        source = field.source or field.column
        if source != field.key:
            options["source"] = source
        if field.choices is not None:
            attrs[field.key] = serializers.ChoiceField(choices=field.choices, **options)
        else:
            attrs[field.key] = _KIND_FIELDS[field.kind](**options)
    for nested in shape.nested:
        attrs[nested.key] = serializers.SerializerMethodField(
            required=False, help_text=nested.help_text
        )
    return type("ViewFields", (serializers.Serializer,), attrs)


# Each view's serializer derives from the base view_fields makes for its shape (a base the type
# checker cannot follow, hence its ignore), without a docstring unless the schema shows one.
class WaitingForSerializer(view_fields(WAITING_FOR)):  # type: ignore[misc]
    pass


class ThrottledSerializer(view_fields(THROTTLED)):  # type: ignore[misc]
    pass


class RequestViewSerializer(view_fields(REQUEST_VIEW)):  # type: ignore[misc]
    pass


class ExecutionViewSerializer(view_fields(EXECUTION_VIEW)):  # type: ignore[misc]
    def to_representation(self, instance: Execution) -> dict[str, Any]:
        view = super().to_representation(instance)
        for nested in EXECUTION_VIEW.nested:
            if view.get(nested.key) is None:
                view.pop(nested.key, None)
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


class ExecutionActionSerializer(view_fields(ACTION_VIEW)):  # type: ignore[misc]
    """One step of an execution, as a client shows progress: never its input, output, external
    key or the provider's answer."""


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
    display = JsonObjectField(
        required=False,
        help_text='How pages show the data: {"amounts": [{"path", "currency", "minorUnits"}]}.',
    )


class ErrorSerializer(serializers.Serializer):
    code = serializers.CharField(help_text="A stable error code.")
    detail = serializers.CharField(help_text="What is wrong, for people.")


class FlowProblemSerializer(serializers.Serializer):
    path = serializers.CharField(help_text="Where in the definition, e.g. $.transitions[0].id")
    message = serializers.CharField()


class FlowInvalidSerializer(ErrorSerializer):
    problems = FlowProblemSerializer(many=True)
