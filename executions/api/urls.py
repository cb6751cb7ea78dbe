"""The URL space under /api/: the OpenAPI schema (always), the request API when
REQUEST_API_ENABLED, the flow admin API when FLOW_ADMIN_ENABLED, and a JSON 404 for the rest.

The switches are read when the URLs load: a disabled API is not mounted at all, so its paths are
the same 404 as any unknown path.
"""

from django.conf import settings
from django.urls import path, re_path
from drf_spectacular.views import SpectacularAPIView

from orquestador.api_errors import not_found
from orquestador.auth import configured_verifier

from . import executionviews, views

urlpatterns = [path("schema/", SpectacularAPIView.as_view(), name="api-schema")]

if settings.REQUEST_API_ENABLED or settings.FLOW_ADMIN_ENABLED:
    # A JWT key that cannot verify anything stops the process here, when the URLs load
    # (manage.py check, runserver, migrate), rather than failing every call.
    configured_verifier()

if settings.REQUEST_API_ENABLED:
    urlpatterns += [
        path("v1/requests", views.RequestCollectionView.as_view(), name="api-requests"),
        path("v1/requests/<str:request_id>", views.RequestDetailView.as_view(), name="api-request"),
        path(
            "v1/requests/<str:request_id>/transitions",
            views.TransitionCollectionView.as_view(),
            name="api-request-transitions",
        ),
        path(
            "v1/executions/<str:execution_id>",
            executionviews.ExecutionDetailView.as_view(),
            name="api-execution",
        ),
        path(
            "v1/executions/<str:execution_id>/cancel",
            executionviews.ExecutionCancelView.as_view(),
            name="api-execution-cancel",
        ),
        path(
            "v1/executions/<str:execution_id>/events",
            executionviews.ExecutionEventsView.as_view(),
            name="api-execution-events",
        ),
        path(
            "v1/callbacks/<str:name>", executionviews.CallbackView.as_view(), name="api-callbacks"
        ),
    ]

if settings.FLOW_ADMIN_ENABLED:
    urlpatterns += [path("v1/flows", views.FlowCollectionView.as_view(), name="api-flows")]

urlpatterns += [re_path(r"", not_found, name="api-not-found")]
