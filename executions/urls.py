"""The executions app's URLs, included at the root by orquestador/urls.py: the queue's metrics,
the API, and the worker endpoint where an operator enabled it."""

from django.conf import settings
from django.urls import include, path

from .metrics import views as metrics_views

urlpatterns = [
    path("metrics", metrics_views.metrics, name="metrics"),
    path("api/", include("executions.api.urls")),
]

# The worker endpoint exists only where an operator enabled it, behind WORKER_ENDPOINT_TOKEN
# (executions/worker/endpoint.py).
if settings.WORKER_ENDPOINT_ENABLED:
    from .worker import endpoint as workerendpoint

    urlpatterns += [
        path("internal/worker/execute", workerendpoint.execute, name="worker-execute"),
        path("internal/worker/cancel", workerendpoint.cancel, name="worker-cancel"),
    ]
