"""The root URLs. The shell imports no app: each app's URL module is included by its dotted name
(executions/urls.py: /metrics, /api/, the worker endpoint), and the admin finds the apps' pages
itself."""

from django.contrib import admin
from django.urls import include, path

from . import health

# The product's name on every admin page, in the header and the browser's tab.
admin.site.site_header = "orquestador administration"
admin.site.site_title = "orquestador admin"
admin.site.index_title = "orquestador operations"

urlpatterns = [
    path("healthz", health.healthz, name="healthz"),
    path("readyz", health.readyz, name="readyz"),
    # Before the admin's own URLs, which answer everything under /admin/.
    path("admin/oidc/", include("orquestador.signinurls")),
    path("admin/", admin.site.urls),
    path("", include("executions.urls")),
]

handler500 = "orquestador.errorpages.server_error"
handler400 = "orquestador.errorpages.bad_request"
handler403 = "orquestador.errorpages.permission_denied"
handler404 = "orquestador.errorpages.page_not_found"
