"""Django's error views (400, 403, 404) for paths no DRF view answered.

Under /api/ and /internal/ every answer is JSON `{"code", "detail"}`, whichever server runs the
application (a Host header that is not allowed, a body over Django's upload limit, a CSRF
refusal, an unknown path); elsewhere (the admin) Django's plain pages. Nothing here shows the
exception: these pages are what a stranger sees.
"""

import sys
from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views import defaults

from . import database, errors


def _json(request: HttpRequest) -> bool:
    return request.path.startswith(errors.JSON_PREFIXES)


def bad_request(request: HttpRequest, exception: Exception) -> HttpResponse:
    if _json(request):
        return JsonResponse(
            {"code": errors.INVALID_BODY, "detail": "the request was refused as malformed"},
            status=400,
        )
    return defaults.bad_request(request, exception)


def permission_denied(request: HttpRequest, exception: Exception) -> HttpResponse:
    if _json(request):
        return JsonResponse({"code": errors.FORBIDDEN, "detail": "forbidden"}, status=403)
    return defaults.permission_denied(request, exception)


def page_not_found(
    request: HttpRequest, exception: Exception | None = None, **_: Any
) -> HttpResponse:
    if _json(request):
        return JsonResponse({"code": errors.NOT_FOUND, "detail": "not found"}, status=404)
    return defaults.page_not_found(request, exception)


def server_error(request: HttpRequest) -> HttpResponse:
    # Django calls this inside its `except`: a database that cannot be reached is a 503
    # DATABASE_UNAVAILABLE on every path (orquestador/database.py), not a fault of ours.
    exc = sys.exc_info()[1]
    if exc is not None and database.is_unavailable(exc):
        return database.unavailable_response(exc, request)
    if _json(request):
        return JsonResponse(
            {"code": errors.INTERNAL_ERROR, "detail": "internal error; it has been logged"},
            status=500,
        )
    return defaults.server_error(request)
