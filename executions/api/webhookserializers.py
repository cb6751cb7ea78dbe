"""The webhook API's JSON shapes (docs/api.md#webhooks): the body a subscription is made from,
and the views it is shown by (never its secret, but once)."""

from typing import Any

from django.core.validators import RegexValidator
from rest_framework import serializers

from ..webhooks.models import MAX_DESCRIPTION_CHARS, MAX_URL_CHARS, SUBSCRIBABLE
from ..webhooks.services import webhook_status
from ..webhooks.targets import URL_TEXT_PATTERN
from .serializers import NO_NUL, StrictCharField, StrictSerializer


class EventsField(serializers.ListField):
    """A JSON array of event types, at least one, each known."""

    default_error_messages = {"not_a_list": "must be a JSON array of event types"}

    def to_internal_value(self, data: Any) -> list[str]:
        if not isinstance(data, list):
            self.fail("not_a_list", input_type=type(data).__name__)
        return super().to_internal_value(data)


# A URL is taken as sent: with whitespace or a control character in it, it is refused, not
# trimmed (the schema carries the rule as its pattern; the service says where the character is).
URL_AS_SENT = RegexValidator(
    URL_TEXT_PATTERN, message="must not contain whitespace or control characters"
)


class WebhookCreateSerializer(StrictSerializer):
    url = StrictCharField(
        min_length=1,
        max_length=MAX_URL_CHARS,
        validators=[URL_AS_SENT],  # NUL included
        error_messages={
            "required": "is required",
            "null": "must not be null",
            "blank": "must not be empty",
            "max_length": f"must be at most {MAX_URL_CHARS} characters",
        },
        help_text="Where deliveries go: an https:// URL that does not resolve to a loopback, "
        "private or link-local address (nor to an IPv6 address carrying one), without "
        "whitespace or control characters; stored with its scheme and host in lower case.",
    )
    events = EventsField(
        child=serializers.ChoiceField(
            choices=SUBSCRIBABLE, error_messages={"invalid_choice": "unknown event type"}
        ),
        min_length=1,
        max_length=len(SUBSCRIBABLE),
        error_messages={
            "required": "is required",
            "null": "must not be null",
            "empty": "must name at least one event type",
            "min_length": "must name at least one event type",
            "max_length": f"must name at most {len(SUBSCRIBABLE)} event types",
        },
        help_text="The event types to send (webhook.ping is sent on request whatever these are).",
    )
    description = StrictCharField(
        required=False,
        allow_blank=True,
        max_length=MAX_DESCRIPTION_CHARS,
        validators=[NO_NUL],
        error_messages={
            "null": "must not be null",
            "max_length": f"must be at most {MAX_DESCRIPTION_CHARS} characters",
        },
        help_text="What the subscription is for.",
    )


class WebhookViewSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    url = serializers.CharField()
    events = serializers.ListField(child=serializers.ChoiceField(choices=SUBSCRIBABLE))
    description = serializers.CharField()
    createdAt = serializers.DateTimeField(source="created_at")
    status = serializers.SerializerMethodField(
        help_text="`active`, or `failing` while its deliveries keep failing."
    )

    def get_status(self, subscription: Any) -> str:
        return webhook_status(subscription)


class WebhookCreatedSerializer(WebhookViewSerializer):
    secret = serializers.SerializerMethodField(
        help_text="The signing secret: shown here and on rotation only."
    )

    def get_secret(self, subscription: Any) -> str:
        return str(self.context["secret"])


class WebhookListSerializer(serializers.Serializer):
    results = WebhookViewSerializer(many=True)


class WebhookSecretSerializer(serializers.Serializer):
    secret = serializers.CharField(
        help_text="The new signing secret; the previous one keeps signing beside it for "
        "WEBHOOK_SECRET_OVERLAP_HOURS."
    )


class WebhookPingSerializer(serializers.Serializer):
    eventId = serializers.UUIDField(help_text="The id of the webhook.ping event on its way.")
