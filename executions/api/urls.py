"""The URL space under /api/: the OpenAPI schema (always), the request API when
REQUEST_API_ENABLED, the flow admin API when FLOW_ADMIN_ENABLED, and a JSON 404 for the rest.

The switches are read when the URLs load: a disabled API is not mounted at all, so its paths are
the same 404 as any unknown path.
"""

from django.conf import settings
from django.urls import path, re_path

from orquestador.api_errors import not_found
from orquestador.auth import configured_verifier

from .executionviews import (
    CallbackView,
    ExecutionCancelView,
    ExecutionDetailView,
    ExecutionEventsView,
)
from .listviews import ExecutionActionsView, ExecutionCollectionView
from .schema import SchemaView
from .views import (
    FlowCollectionView,
    RequestCollectionView,
    RequestDetailView,
    TransitionCollectionView,
)
from .webhookviews import (
    WebhookCollectionView,
    WebhookDetailView,
    WebhookPingView,
    WebhookRotateSecretView,
)

urlpatterns = [path("schema/", SchemaView.as_view(), name="api-schema")]

if settings.REQUEST_API_ENABLED or settings.FLOW_ADMIN_ENABLED:
    # A JWT key that cannot verify anything stops the process here, when the URLs load
    # (manage.py check, runserver, migrate), rather than failing every call.
    configured_verifier()

if settings.REQUEST_API_ENABLED:
    REQUEST = "v1/requests/<str:request_id>"
    EXECUTION = "v1/executions/<str:execution_id>"
    WEBHOOK = "v1/webhooks/<str:webhook_id>"
    urlpatterns += [
        path("v1/requests", RequestCollectionView.as_view(), name="api-requests"),
        path(REQUEST, RequestDetailView.as_view(), name="api-request"),
        path(
            f"{REQUEST}/transitions",
            TransitionCollectionView.as_view(),
            name="api-request-transitions",
        ),
        path("v1/executions", ExecutionCollectionView.as_view(), name="api-executions"),
        path(EXECUTION, ExecutionDetailView.as_view(), name="api-execution"),
        path(f"{EXECUTION}/actions", ExecutionActionsView.as_view(), name="api-execution-actions"),
        path(f"{EXECUTION}/cancel", ExecutionCancelView.as_view(), name="api-execution-cancel"),
        path(f"{EXECUTION}/events", ExecutionEventsView.as_view(), name="api-execution-events"),
        path("v1/callbacks/<str:name>", CallbackView.as_view(), name="api-callbacks"),
        path("v1/webhooks", WebhookCollectionView.as_view(), name="api-webhooks"),
        path(WEBHOOK, WebhookDetailView.as_view(), name="api-webhook"),
        path(
            f"{WEBHOOK}/rotate-secret",
            WebhookRotateSecretView.as_view(),
            name="api-webhook-rotate-secret",
        ),
        path(f"{WEBHOOK}/ping", WebhookPingView.as_view(), name="api-webhook-ping"),
    ]

if settings.FLOW_ADMIN_ENABLED:
    urlpatterns += [path("v1/flows", FlowCollectionView.as_view(), name="api-flows")]

urlpatterns += [re_path(r"", not_found, name="api-not-found")]
