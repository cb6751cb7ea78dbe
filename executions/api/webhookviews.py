"""The webhook API (docs/api.md#webhooks): a tenant's subscriptions, scope webhooks:admin. Like
every view: parse, call one service, render."""

from rest_framework import status
from rest_framework.request import Request as DrfRequest
from rest_framework.response import Response

from orquestador.auth import WEBHOOKS_ADMIN

from ..webhooks import services
from .base import ApiView, caller, error_response, operation, path_id, validated
from .webhookserializers import (
    WebhookCreatedSerializer,
    WebhookCreateSerializer,
    WebhookListSerializer,
    WebhookPingSerializer,
    WebhookSecretSerializer,
    WebhookViewSerializer,
)

ADMIN = (WEBHOOKS_ADMIN,)
NOT_FOUND = error_response("NOT_FOUND: no such webhook, or not one of the caller's tenant.")
WEBHOOK_ID = path_id("webhook_id", "webhook")


class WebhookCollectionView(ApiView):
    required_permissions = {"GET": ADMIN, "POST": ADMIN}

    @operation(
        "webhooks_list",
        "List the tenant's webhooks",
        "Every subscription of the caller's tenant (at most 100), oldest first; never their "
        "secrets. Needs webhooks:admin.",
        responses={200: WebhookListSerializer},
    )
    def get(self, request: DrfRequest) -> Response:
        found = services.webhook_list(tenant=caller(request).tenant)
        return Response({"results": WebhookViewSerializer(found, many=True).data})

    @operation(
        "webhooks_create",
        "Subscribe a URL to events",
        "The answer carries the signing secret, shown this once. Needs webhooks:admin.",
        request=WebhookCreateSerializer,
        responses={
            201: WebhookCreatedSerializer,
            409: error_response("WEBHOOK_LIMIT_REACHED: the tenant has 100 subscriptions."),
            422: error_response(
                "WEBHOOK_URL_REFUSED: the URL breaks a rule (named in the detail): not "
                "https://, or it resolves to a loopback, private or link-local address."
            ),
        },
    )
    def post(self, request: DrfRequest) -> Response:
        body = validated(WebhookCreateSerializer, request)
        subscription, secret = services.webhook_create(
            tenant=caller(request).tenant,
            url=body["url"],
            events=body["events"],
            description=body.get("description", ""),
        )
        view = WebhookCreatedSerializer(subscription, context={"secret": secret}).data
        return Response(view, status=status.HTTP_201_CREATED)


class WebhookDetailView(ApiView):
    required_permissions = {"GET": ADMIN, "DELETE": ADMIN}

    @operation(
        "webhooks_retrieve",
        "Read a webhook",
        "One subscription of the caller's tenant, without its secret. Needs webhooks:admin.",
        parameters=[WEBHOOK_ID],
        responses={200: WebhookViewSerializer, 404: NOT_FOUND},
    )
    def get(self, request: DrfRequest, webhook_id: str) -> Response:
        found = services.webhook_get(tenant=caller(request).tenant, webhook_id=webhook_id)
        return Response(WebhookViewSerializer(found).data)

    @operation(
        "webhooks_destroy",
        "Delete a webhook",
        "Its pending deliveries are not sent any more. Needs webhooks:admin.",
        parameters=[WEBHOOK_ID],
        responses={204: None, 404: NOT_FOUND},
    )
    def delete(self, request: DrfRequest, webhook_id: str) -> Response:
        services.webhook_delete(tenant=caller(request).tenant, webhook_id=webhook_id)
        return Response(status=status.HTTP_204_NO_CONTENT)


class WebhookRotateSecretView(ApiView):
    required_permissions = {"POST": ADMIN}

    @operation(
        "webhooks_rotate_secret",
        "Rotate a webhook's secret",
        "A new secret; deliveries carry a signature with each of the two until "
        "WEBHOOK_SECRET_OVERLAP_HOURS have passed. Needs webhooks:admin.",
        parameters=[WEBHOOK_ID],
        request=None,
        responses={200: WebhookSecretSerializer, 404: NOT_FOUND},
    )
    def post(self, request: DrfRequest, webhook_id: str) -> Response:
        secret = services.webhook_rotate_secret(
            tenant=caller(request).tenant, webhook_id=webhook_id
        )
        return Response({"secret": secret})


class WebhookPingView(ApiView):
    required_permissions = {"POST": ADMIN}

    @operation(
        "webhooks_ping",
        "Send a test event",
        "A webhook.ping delivery to this subscription, whatever its events. Needs webhooks:admin.",
        parameters=[WEBHOOK_ID],
        request=None,
        responses={202: WebhookPingSerializer, 404: NOT_FOUND},
    )
    def post(self, request: DrfRequest, webhook_id: str) -> Response:
        event_id = services.webhook_ping(tenant=caller(request).tenant, webhook_id=webhook_id)
        return Response({"eventId": str(event_id)}, status=status.HTTP_202_ACCEPTED)
