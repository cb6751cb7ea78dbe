"""One renderer for every API error: `{"code", "detail"}` with the status its code stands for.

DRF's own exceptions (authentication, permissions, parsing, validation, routing) and the project's
error values (every refusal is an `errors.CodedError`, whichever app raises it) all come through
`exception_handler`, which therefore knows nothing of the apps.
Details are safe text written for the client; nothing internal (SQL, stack, tokens) goes out.
A fault of ours is logged with its traceback and answered with a bare `INTERNAL_ERROR`.
"""

import logging
from typing import Any

from django.http import Http404, HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from rest_framework import exceptions, status
from rest_framework.response import Response

from . import errors

logger = logging.getLogger(__name__)

STATUS_BY_CODE = {
    errors.UNAUTHENTICATED: status.HTTP_401_UNAUTHORIZED,
    errors.FORBIDDEN: status.HTTP_403_FORBIDDEN,
    errors.NOT_FOUND: status.HTTP_404_NOT_FOUND,
    errors.METHOD_NOT_ALLOWED: status.HTTP_405_METHOD_NOT_ALLOWED,
    errors.HEADERS_TOO_LARGE: status.HTTP_431_REQUEST_HEADER_FIELDS_TOO_LARGE,
    errors.INVALID_BODY: status.HTTP_400_BAD_REQUEST,
    errors.INVALID_QUERY: status.HTTP_400_BAD_REQUEST,
    errors.INVALID_CURSOR: status.HTTP_400_BAD_REQUEST,
    errors.DATA_INVALID: status.HTTP_422_UNPROCESSABLE_ENTITY,
    errors.DATA_TOO_LARGE: status.HTTP_422_UNPROCESSABLE_ENTITY,
    errors.UNKNOWN_TRANSITION: status.HTTP_422_UNPROCESSABLE_ENTITY,
    errors.TRANSITION_NOT_ALLOWED: status.HTTP_422_UNPROCESSABLE_ENTITY,
    errors.IDEMPOTENCY_KEY_REUSED: status.HTTP_422_UNPROCESSABLE_ENTITY,
    errors.FLOW_INVALID: status.HTTP_422_UNPROCESSABLE_ENTITY,
    errors.REVISION_CONFLICT: status.HTTP_409_CONFLICT,
    errors.REQUEST_BLOCKED: status.HTTP_409_CONFLICT,
    errors.FLOW_CONFLICT: status.HTTP_409_CONFLICT,
    errors.NOT_CANCELLABLE: status.HTTP_409_CONFLICT,
    errors.NOT_WAITING: status.HTTP_409_CONFLICT,
    errors.WEBHOOK_URL_REFUSED: status.HTTP_422_UNPROCESSABLE_ENTITY,
    errors.WEBHOOK_LIMIT_REACHED: status.HTTP_409_CONFLICT,
    errors.EVENT_INVALID: status.HTTP_422_UNPROCESSABLE_ENTITY,
    errors.OUTPUT_INVALID: status.HTTP_422_UNPROCESSABLE_ENTITY,  # a provider's callback
    errors.INTERNAL_ERROR: status.HTTP_500_INTERNAL_SERVER_ERROR,
    errors.DATABASE_UNAVAILABLE: status.HTTP_503_SERVICE_UNAVAILABLE,
}

# DRF exceptions, by class, to the code they are answered with (first match wins).
_DRF_CODES: tuple[tuple[type[exceptions.APIException], str], ...] = (
    (exceptions.NotAuthenticated, errors.UNAUTHENTICATED),
    (exceptions.AuthenticationFailed, errors.UNAUTHENTICATED),
    (exceptions.PermissionDenied, errors.FORBIDDEN),
    (exceptions.NotFound, errors.NOT_FOUND),
    (exceptions.MethodNotAllowed, errors.METHOD_NOT_ALLOWED),
    (exceptions.ParseError, errors.INVALID_BODY),
    (exceptions.UnsupportedMediaType, errors.INVALID_BODY),
    (exceptions.ValidationError, errors.INVALID_BODY),
)


def error_body(code: str, detail: str, **extra: Any) -> dict[str, Any]:
    return {"code": code, "detail": detail, **extra}


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """DRF's EXCEPTION_HANDLER: render `exc` as `{"code", "detail"}`, or None for a fault."""
    headers: dict[str, str] = {}
    extra: dict[str, Any] = {}
    if isinstance(exc, errors.CodedError):
        code, detail, extra = exc.code, exc.detail, exc.extra
    elif isinstance(exc, Http404):
        code, detail = errors.NOT_FOUND, "not found"
    elif isinstance(exc, exceptions.APIException):
        drf_code = next((c for cls, c in _DRF_CODES if isinstance(exc, cls)), None)
        if drf_code is None:
            return None
        code, detail = drf_code, _drf_detail(exc)
        # Set by DRF's view on a 401 from an authenticator that names its scheme.
        auth_header = getattr(exc, "auth_header", None)
        if auth_header:
            headers["WWW-Authenticate"] = auth_header
        if isinstance(exc, exceptions.MethodNotAllowed):
            view = context.get("view")
            if view is not None:
                headers["Allow"] = ", ".join(view.allowed_methods)
    else:
        return None
    status_code = STATUS_BY_CODE.get(code)
    if status_code is None:
        # A refusal whose code has no status here yet: still the caller's 4xx, and our note.
        logger.error("error code %s has no HTTP status in STATUS_BY_CODE", code)
        status_code = status.HTTP_400_BAD_REQUEST
    return Response(error_body(code, detail, **extra), status=status_code, headers=headers)


def _drf_detail(exc: exceptions.APIException) -> str:
    if isinstance(exc, exceptions.ParseError):
        return f"the body is not valid JSON: {exc.detail}"
    if isinstance(exc, exceptions.UnsupportedMediaType):
        return "the body must be JSON, sent with Content-Type: application/json"
    if isinstance(exc, exceptions.ValidationError):
        return "; ".join(_flatten(exc.detail)) or "the body is invalid"
    return str(exc.detail)


def _flatten(detail: Any, path: str = "") -> list[str]:
    """Serializer errors as `field: message` lines, nested fields joined with dots."""
    if isinstance(detail, dict):
        lines: list[str] = []
        for name, inner in detail.items():
            field = "" if name == "non_field_errors" else str(name)
            lines += _flatten(inner, f"{path}.{field}" if path and field else path or field)
        return lines
    if isinstance(detail, list):
        return [line for inner in detail for line in _flatten(inner, path)]
    return [f"{path}: {detail}" if path else str(detail)]


@csrf_exempt
def not_found(request: HttpRequest, *args: Any, **kwargs: Any) -> JsonResponse:
    """Any unknown URL under /api/: a JSON 404, whatever the method."""
    return JsonResponse(error_body(errors.NOT_FOUND, "no such API endpoint"), status=404)
