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

handler500 = "orquestador.api_errors.server_error"
