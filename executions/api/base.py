"""What every API view shares: bearer authentication and permissions, JSON in and out only, the
strict body readers, the Idempotency-Key rule, the OpenAPI description of the errors any
operation can answer with, and the one view that reads an object by its id."""

import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any, cast

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.renderers import BaseRenderer
from rest_framework.request import Request as DrfRequest
from rest_framework.response import Response
from rest_framework.views import APIView

from orquestador import errors
from orquestador.auth import (
    REQUESTS_READ,
    REQUESTS_READ_TENANT,
    BearerAuthentication,
    HasPermission,
    Principal,
)
from orquestador.errors import CodedError

from .pagejson import PageRenderer
from .parsers import StrictJSONParser, check_declared_length, loads
from .serializers import ErrorSerializer

READ = (REQUESTS_READ, REQUESTS_READ_TENANT)
# Idempotency-Key: 1 to 255 visible ASCII characters, spaces allowed inside.
IDEMPOTENCY_KEY = re.compile(r"[\x21-\x7e](?:[\x20-\x7e]{0,253}[\x21-\x7e])?")
IDEMPOTENCY_KEY_SCHEMA = {
    "type": "string",
    "minLength": 1,
    "maxLength": 255,
    "pattern": "^" + IDEMPOTENCY_KEY.pattern + "$",
}


class BearerScheme(OpenApiAuthenticationExtension):
    target_class = BearerAuthentication
    name = "bearerAuth"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {"type": "http", "scheme": "bearer", "bearerFormat": "JWT"}


class JsonOnly(DefaultContentNegotiation):
    """Answer JSON whatever the Accept header says: there is no other representation."""

    def select_renderer(
        self,
        request: DrfRequest,
        renderers: Iterable[BaseRenderer],
        format_suffix: str | None = None,
    ) -> tuple[BaseRenderer, str]:
        renderer = next(iter(renderers))
        return renderer, renderer.media_type


class ApiView(APIView):
    authentication_classes = [BearerAuthentication]
    permission_classes = [HasPermission]
    parser_classes = [StrictJSONParser]
    # JSONRenderer, which sends a body written as JSON text (pagejson.py) as it is.
    renderer_classes = [PageRenderer]
    content_negotiation_class = JsonOnly
    metadata_class = None  # OPTIONS is not served: 405
    # Permissions by HTTP method; holding any one of a method's permissions is enough.
    required_permissions: dict[str, tuple[str, ...]] = {}

    @property
    def allowed_methods(self) -> list[str]:
        """What the Allow header of a 405 lists: the methods served, so never OPTIONS."""
        return [m for m in super().allowed_methods if m != "OPTIONS"]


def caller(request: DrfRequest) -> Principal:
    """Who is calling: HasPermission, which every ApiView runs first, admits only a Principal."""
    return cast(Principal, request.user)


def json_body(request: DrfRequest) -> Any:
    """The parsed JSON body, or INVALID_BODY when it is missing or not sent as JSON."""
    if request.stream is None:
        raise CodedError(errors.INVALID_BODY, "the body is empty; send a JSON object")
    media_type = request.content_type.split(";", 1)[0].strip().lower()
    if media_type != "application/json":
        raise CodedError(
            errors.INVALID_BODY, "the body must be JSON, sent with Content-Type: application/json"
        )
    # Before anything reads it: a body over Django's own upload limit would otherwise be an HTML
    # 400.
    check_declared_length(request.META.get("CONTENT_LENGTH"))
    # What StrictJSONParser makes of it, without DRF's parser negotiation around it (the media
    # type is checked above), which cost an acceptance more than the parsing.
    return loads(request._request.body)


def validated(serializer_class: type[serializers.Serializer], request: DrfRequest) -> dict:
    serializer = serializer_class(data=json_body(request))
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data


def idempotency_key(request: DrfRequest) -> str | None:
    # request.headers would build a dict of every header to find this one.
    value = request.META.get("HTTP_IDEMPOTENCY_KEY")
    if value is None:
        return None
    if not IDEMPOTENCY_KEY.fullmatch(value):
        raise CodedError(
            errors.INVALID_BODY,
            "Idempotency-Key header: must be 1 to 255 visible ASCII characters",
        )
    return value


# -- OpenAPI: the errors each operation can answer with -----------------------------------------


def error_response(description: str, serializer: type = ErrorSerializer) -> OpenApiResponse:
    return OpenApiResponse(response=serializer, description=description)


INVALID_BODY = error_response(
    "INVALID_BODY: malformed JSON, a body that is not a JSON object or not sent as "
    "application/json, an unknown field, a missing field or one of the wrong type (the detail "
    "names it), or a body over 1 MiB."
)
UNAUTHENTICATED = error_response(
    "UNAUTHENTICATED: no bearer token, or one that is malformed, expired, not yet valid, forged, "
    "for another issuer or audience, signed with another algorithm, or missing a claim. "
    "Answered with WWW-Authenticate: Bearer."
)
FORBIDDEN = error_response("FORBIDDEN: the token's scope lacks the permission this call needs.")
METHOD_NOT_ALLOWED = error_response("METHOD_NOT_ALLOWED: the path does not serve this method.")
WWW_AUTHENTICATE = OpenApiParameter(
    "WWW-Authenticate", OpenApiTypes.STR, OpenApiParameter.HEADER, response=[401]
)


def path_id(name: str, what: str) -> OpenApiParameter:
    return OpenApiParameter(
        name,
        OpenApiTypes.UUID,
        OpenApiParameter.PATH,
        description=f"The {what}'s id. Anything that is not one of the caller's is a 404.",
    )


def operation(
    operation_id: str,
    summary: str,
    description: str,
    *,
    responses: dict[int, Any],
    parameters: Sequence[OpenApiParameter] = (),
    **schema: Any,
) -> Callable:
    """`extend_schema` for a bearer-authenticated operation: `responses` and `parameters` are its
    own, and every such operation also answers 401 (with WWW-Authenticate), 403 and 405, and 400
    when it takes a body."""
    common = {401: UNAUTHENTICATED, 403: FORBIDDEN, 405: METHOD_NOT_ALLOWED}
    if schema.get("request") is not None:  # request=None: an operation without a body
        common[400] = INVALID_BODY
    return extend_schema(
        operation_id=operation_id,
        summary=summary,
        description=description,
        parameters=[*parameters, WWW_AUTHENTICATE],
        responses=dict(sorted({**common, **responses}.items())),
        **schema,
    )


def read_one_view(
    what: str,
    select: Callable[..., Any],
    serializer: type[serializers.Serializer],
    summary: str,
    description: str,
    render: Callable[[Any], Any] | None = None,
) -> type[ApiView]:
    """The view of `GET /api/v1/<what>s/<id>`: one `what` the caller may read, found by
    `select(principal=..., <what>_id=...)` and answered as `serializer` describes it (built by
    `render` when given: the same JSON, see render.py); anything else is a 404."""
    field = f"{what}_id"
    answer = render or (lambda found: serializer(found).data)

    class ReadOneView(ApiView):
        required_permissions = {"GET": READ}

        @operation(
            f"{what}s_retrieve",
            summary,
            description,
            parameters=[path_id(field, what)],
            responses={
                200: serializer,
                404: error_response(f"NOT_FOUND: no such {what}, or not one the caller may read."),
            },
        )
        def get(self, request: DrfRequest, **ids: str) -> Response:
            found = select(principal=caller(request), **{field: ids[field]})
            return Response(answer(found))

    ReadOneView.__name__ = ReadOneView.__qualname__ = f"{what.capitalize()}DetailView"
    return ReadOneView
