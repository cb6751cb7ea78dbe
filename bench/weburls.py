"""The root URLs under bench/websettings.py: production's, with the web ceiling in front.

`GET /api/bench/ceiling` is the API's own view class (bearer JWT verified, requests:read
needed, JSON rendered) that reads no database: what the same server, configured as production
is, answers per second when the database costs nothing. bench/api.py measures the API against it.
"""

from typing import Any

from django.urls import path
from rest_framework.request import Request as DrfRequest
from rest_framework.response import Response

from executions.api.base import READ, ApiView, caller
from orquestador import urls as production

handler400 = production.handler400
handler403 = production.handler403
handler404 = production.handler404
handler500 = production.handler500


class CeilingView(ApiView):
    required_permissions = {"GET": READ}

    def get(self, request: DrfRequest, **kwargs: Any) -> Response:
        return Response({"subject": caller(request).subject, "ok": True})


urlpatterns = [
    path("api/bench/ceiling", CeilingView.as_view(), name="bench-ceiling"),
    *production.urlpatterns,
]
