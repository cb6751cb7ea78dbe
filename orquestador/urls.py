from django.conf import settings
from django.contrib import admin
from django.urls import include, path

from . import health, metrics

urlpatterns = [
    path("healthz", health.healthz, name="healthz"),
    path("readyz", health.readyz, name="readyz"),
    path("metrics", metrics.metrics, name="metrics"),
    path("admin/", admin.site.urls),
    path("api/", include("executions.api.urls")),
]

# The worker endpoint (SPEC §8) exists only where an operator enabled it, behind its token.
if settings.WORKER_ENDPOINT_ENABLED:
    from executions.worker import endpoint as workerendpoint

    urlpatterns += [
        path("internal/worker/execute", workerendpoint.execute, name="worker-execute"),
        path("internal/worker/cancel", workerendpoint.cancel, name="worker-cancel"),
    ]

handler500 = "orquestador.errorpages.server_error"
handler400 = "orquestador.errorpages.bad_request"
handler403 = "orquestador.errorpages.permission_denied"
handler404 = "orquestador.errorpages.page_not_found"
