"""The API's HTTP interface: authenticate, parse, call one selector or service, render.

Views hold no business rules. Every error leaves as a value (`CodedError` or a DRF exception) and
is rendered by `orquestador.api_errors.exception_handler` as `{"code", "detail"}`. The OpenAPI
description of each operation lists every status it can answer with.
"""

import re
from typing import Any

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiExample,
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
)
from rest_framework import serializers, status
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.permissions import AllowAny
from rest_framework.renderers import BaseRenderer, JSONRenderer
from rest_framework.request import Request as DrfRequest
from rest_framework.response import Response
from rest_framework.views import APIView

from orquestador import errors
from orquestador.auth import (
    EXECUTIONS_RESUME,
    FLOWS_ADMIN,
    REQUESTS_READ,
    REQUESTS_READ_TENANT,
    REQUESTS_WRITE,
    BearerAuthentication,
    HasPermission,
)
from orquestador.errors import CodedError
from reconciliation.cancel import execution_cancel

from .. import selectors, services
from ..callbacks import MAX_CALLBACK_BYTES, callback_receive
from ..flows.publication import flow_publish
from ..resumes import MAX_KEPT_EVENTS, execution_resume
from .parsers import StrictJSONParser, check_declared_length
from .serializers import (
    CallbackSerializer,
    ErrorSerializer,
    ExecutionCancelSerializer,
    ExecutionEventSerializer,
    ExecutionViewSerializer,
    FlowDefinitionSerializer,
    FlowInvalidSerializer,
    FlowViewSerializer,
    RequestCreateSerializer,
    RequestViewSerializer,
    TransitionAcceptSerializer,
)

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
        self, request: DrfRequest, renderers: list[BaseRenderer], format_suffix: str | None = None
    ) -> tuple[BaseRenderer, str]:
        return renderers[0], renderers[0].media_type


class ApiView(APIView):
    authentication_classes = [BearerAuthentication]
    permission_classes = [HasPermission]
    parser_classes = [StrictJSONParser]
    renderer_classes = [JSONRenderer]
    content_negotiation_class = JsonOnly
    metadata_class = None  # OPTIONS is not served: 405
    # Permissions by HTTP method; holding any one of a method's permissions is enough.
    required_permissions: dict[str, tuple[str, ...]] = {}

    @property
    def allowed_methods(self) -> list[str]:
        """What the Allow header of a 405 lists: the methods served, so never OPTIONS."""
        return [m for m in super().allowed_methods if m != "OPTIONS"]


def json_body(request: DrfRequest) -> Any:
    """The parsed JSON body, or INVALID_BODY when it is missing or not sent as JSON."""
    if request.stream is None:
        raise CodedError(errors.INVALID_BODY, "the body is empty; send a JSON object")
    media_type = request.content_type.split(";", 1)[0].strip().lower()
    if media_type != "application/json":
        raise CodedError(
            errors.INVALID_BODY, "the body must be JSON, sent with Content-Type: application/json"
        )
    # Before DRF reads it: a body over Django's own upload limit would otherwise be an HTML 400.
    check_declared_length(request.META.get("CONTENT_LENGTH"))
    return request.data


def validated(serializer_class: type[serializers.Serializer], request: DrfRequest) -> dict:
    serializer = serializer_class(data=json_body(request))
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data


def idempotency_key(request: DrfRequest) -> str | None:
    value = request.headers.get("Idempotency-Key")
    if value is None:
        return None
    if not IDEMPOTENCY_KEY.fullmatch(value):
        raise CodedError(
            errors.INVALID_BODY,
            "Idempotency-Key header: must be 1 to 255 visible ASCII characters",
        )
    return value


# -- OpenAPI: the errors each operation can answer with -----------------------------------------


def _error(description: str, serializer: type = ErrorSerializer) -> OpenApiResponse:
    return OpenApiResponse(response=serializer, description=description)


INVALID_BODY = _error(
    "INVALID_BODY: malformed JSON, a body that is not a JSON object or not sent as "
    "application/json, an unknown field, a missing field or one of the wrong type (the detail "
    "names it), or a body over 1 MiB."
)
UNAUTHENTICATED = _error(
    "UNAUTHENTICATED: no bearer token, or one that is malformed, expired, not yet valid, forged, "
    "for another issuer or audience, signed with another algorithm, or missing a claim. "
    "Answered with WWW-Authenticate: Bearer."
)
FORBIDDEN = _error("FORBIDDEN: the token's scope lacks the permission this call needs.")
METHOD_NOT_ALLOWED = _error("METHOD_NOT_ALLOWED: the path does not serve this method.")
WWW_AUTHENTICATE = OpenApiParameter(
    "WWW-Authenticate", OpenApiTypes.STR, OpenApiParameter.HEADER, response=[401]
)


def _path_id(name: str, what: str) -> OpenApiParameter:
    return OpenApiParameter(
        name,
        OpenApiTypes.UUID,
        OpenApiParameter.PATH,
        description=f"The {what}'s id. Anything that is not one of the caller's is a 404.",
    )


# -- endpoints --------------------------------------------------------------------------------


class RequestCollectionView(ApiView):
    required_permissions = {"POST": (REQUESTS_WRITE,)}

    @extend_schema(
        operation_id="requests_create",
        summary="Create a request on a published flow",
        description="The request starts in the flow's initialState, owned by the token's sub in "
        "its tenant. Without flowVersion, the highest published version. Needs requests:write.",
        request=RequestCreateSerializer,
        examples=[
            OpenApiExample(
                "The demo flow",
                value={"flowKey": "onboarding", "data": {"applicant": "Ada", "amount": 120}},
                request_only=True,
            )
        ],
        parameters=[
            WWW_AUTHENTICATE,
            OpenApiParameter("Location", OpenApiTypes.STR, OpenApiParameter.HEADER, response=[201]),
        ],
        responses={
            201: RequestViewSerializer,
            400: INVALID_BODY,
            401: UNAUTHENTICATED,
            403: FORBIDDEN,
            404: _error("NOT_FOUND: no published flow has this flowKey (and flowVersion)."),
            405: METHOD_NOT_ALLOWED,
            422: _error(
                "DATA_INVALID: data does not satisfy the flow's dataSchema (the detail names "
                "the path); DATA_TOO_LARGE: data is over 256 KiB as compact UTF-8 JSON."
            ),
        },
    )
    def post(self, request: DrfRequest) -> Response:
        body = validated(RequestCreateSerializer, request)
        created = services.request_create(
            principal=request.user,
            flow_key=body["flowKey"],
            flow_version=body.get("flowVersion"),
            data=body["data"],
        )
        return Response(
            RequestViewSerializer(created).data,
            status=status.HTTP_201_CREATED,
            headers={"Location": f"/api/v1/requests/{created.id}"},
        )


class RequestDetailView(ApiView):
    required_permissions = {"GET": READ}

    @extend_schema(
        operation_id="requests_retrieve",
        summary="Read a request",
        description="Needs requests:read (the caller's own requests) or requests:read:tenant "
        "(every request of the caller's tenant).",
        parameters=[_path_id("request_id", "request"), WWW_AUTHENTICATE],
        responses={
            200: RequestViewSerializer,
            401: UNAUTHENTICATED,
            403: FORBIDDEN,
            404: _error("NOT_FOUND: no such request, or not one the caller may read."),
            405: METHOD_NOT_ALLOWED,
        },
    )
    def get(self, request: DrfRequest, request_id: str) -> Response:
        found = selectors.request_get(principal=request.user, request_id=request_id)
        return Response(RequestViewSerializer(found).data)


class TransitionCollectionView(ApiView):
    required_permissions = {"POST": (REQUESTS_WRITE,)}

    @extend_schema(
        operation_id="requests_transitions_create",
        summary="Accept a transition on a request",
        description="In one transaction: checks the transition exists and the request's state "
        "allows it, that the request is not blocked and is at expectedRevision; then increments "
        "the revision, blocks the request and creates a PENDING execution for the workers. "
        "With an Idempotency-Key, a retry of the same body on the same request returns the "
        "same execution (202), even after the request has moved on. Needs requests:write.",
        request=TransitionAcceptSerializer,
        examples=[
            OpenApiExample(
                "Submit a new request",
                value={"transitionId": "submit", "expectedRevision": 1},
                request_only=True,
            )
        ],
        parameters=[
            _path_id("request_id", "request"),
            OpenApiParameter(
                "Idempotency-Key",
                IDEMPOTENCY_KEY_SCHEMA,
                OpenApiParameter.HEADER,
                description="1 to 255 visible ASCII characters, unique per acceptance you mean.",
            ),
            WWW_AUTHENTICATE,
            OpenApiParameter(
                "Location",
                OpenApiTypes.STR,
                OpenApiParameter.HEADER,
                response=[202],
                description="/api/v1/executions/{executionId}",
            ),
        ],
        responses={
            202: ExecutionViewSerializer,
            400: INVALID_BODY,
            401: UNAUTHENTICATED,
            403: FORBIDDEN,
            404: _error("NOT_FOUND: no such request, or not one of the caller's."),
            405: METHOD_NOT_ALLOWED,
            409: _error(
                "REVISION_CONFLICT: expectedRevision is not the request's revision; "
                "REQUEST_BLOCKED: an execution holds the request until it finishes."
            ),
            422: _error(
                "UNKNOWN_TRANSITION: the flow has no such transition; TRANSITION_NOT_ALLOWED: "
                "the request's state is not one the transition starts from; "
                "IDEMPOTENCY_KEY_REUSED: the Idempotency-Key was used on this request with a "
                "different body."
            ),
        },
    )
    def post(self, request: DrfRequest, request_id: str) -> Response:
        body = validated(TransitionAcceptSerializer, request)
        execution, _created = services.transition_accept(
            principal=request.user,
            request_id=request_id,
            transition_id=body["transitionId"],
            expected_revision=body["expectedRevision"],
            idempotency_key=idempotency_key(request),
        )
        return Response(
            ExecutionViewSerializer(execution).data,
            status=status.HTTP_202_ACCEPTED,
            headers={"Location": f"/api/v1/executions/{execution.id}"},
        )


class ExecutionDetailView(ApiView):
    required_permissions = {"GET": READ}

    @extend_schema(
        operation_id="executions_retrieve",
        summary="Read an execution",
        description="Its status and, once decided, the business outcome and target state; a "
        "stable errorCode when it failed. Needs requests:read or requests:read:tenant.",
        parameters=[_path_id("execution_id", "execution"), WWW_AUTHENTICATE],
        responses={
            200: ExecutionViewSerializer,
            401: UNAUTHENTICATED,
            403: FORBIDDEN,
            404: _error("NOT_FOUND: no such execution, or not one the caller may read."),
            405: METHOD_NOT_ALLOWED,
        },
    )
    def get(self, request: DrfRequest, execution_id: str) -> Response:
        found = selectors.execution_get(principal=request.user, execution_id=execution_id)
        return Response(ExecutionViewSerializer(found).data)


class ExecutionCancelView(ApiView):
    required_permissions = {"POST": (REQUESTS_WRITE,)}

    @extend_schema(
        operation_id="executions_cancel",
        summary="Cancel an execution",
        description="A durable, fenced write that needs no worker: whoever holds the execution "
        "is locked out of every later write. PENDING, RETRY_WAIT, SUSPENDED and RUNNING "
        "executions end CANCELLED and release the request when none of their writes succeeded "
        "or is still pending; otherwise they go to RECONCILIATION_REQUIRED with the request "
        "still blocked, for an operator. The reason is kept in the audit trail. Needs "
        "requests:write, on the caller's own executions.",
        request=ExecutionCancelSerializer,
        parameters=[_path_id("execution_id", "execution"), WWW_AUTHENTICATE],
        responses={
            202: ExecutionViewSerializer,
            400: INVALID_BODY,
            401: UNAUTHENTICATED,
            403: FORBIDDEN,
            404: _error("NOT_FOUND: no such execution, or not one of the caller's."),
            405: METHOD_NOT_ALLOWED,
            409: _error(
                "NOT_CANCELLABLE: the execution already ended (SUCCEEDED, FAILED, CANCELLED) or "
                "is in RECONCILIATION_REQUIRED, which an operator settles instead."
            ),
        },
    )
    def post(self, request: DrfRequest, execution_id: str) -> Response:
        found = selectors.execution_get_writable(principal=request.user, execution_id=execution_id)
        body = validated(ExecutionCancelSerializer, request)
        execution_cancel(
            execution_id=found.id,
            actor=request.user.subject,
            reason=body["reason"],
            principal=request.user.qualified,
        )
        found.refresh_from_db()
        return Response(ExecutionViewSerializer(found).data, status=status.HTTP_202_ACCEPTED)


class ExecutionEventsView(ApiView):
    required_permissions = {"POST": (EXECUTIONS_RESUME,)}

    @extend_schema(
        operation_id="executions_events_create",
        summary="Send an event to a waiting execution",
        description="Resumes an execution SUSPENDED on a wait for this event: in one "
        "transaction the wait's checkpoint records the payload as its output, the execution "
        "becomes PENDING for the workers, and EXECUTION_RESUMED records the caller. An event "
        "for a wait the execution has not reached yet (it is PENDING, RETRY_WAIT or RUNNING and "
        f"the wait lies ahead) is kept and used there (202; at most {MAX_KEPT_EVENTS} kept per "
        "execution). Sending the same eventId with the same body again answers 200 with the "
        "execution as it is now. Needs executions:resume; any execution of the caller's tenant.",
        request=ExecutionEventSerializer,
        parameters=[_path_id("execution_id", "execution"), WWW_AUTHENTICATE],
        responses={
            200: OpenApiResponse(
                ExecutionViewSerializer, description="A replay: this eventId was already taken."
            ),
            202: OpenApiResponse(ExecutionViewSerializer, description="Taken."),
            400: INVALID_BODY,
            401: UNAUTHENTICATED,
            403: FORBIDDEN,
            404: _error("NOT_FOUND: no such execution in the caller's tenant."),
            405: METHOD_NOT_ALLOWED,
            409: _error(
                "NOT_WAITING: the execution waits for no event, for another event, or for an "
                "asynchronous provider's callback, and no wait for this event lies ahead (or "
                f"{MAX_KEPT_EVENTS} events are already kept)."
            ),
            422: _error(
                "EVENT_INVALID: the payload breaks the wait's payloadSchema; `problems` lists "
                "each with its path. IDEMPOTENCY_KEY_REUSED: this eventId was sent with another "
                "event or payload."
            ),
        },
    )
    def post(self, request: DrfRequest, execution_id: str) -> Response:
        body = validated(ExecutionEventSerializer, request)
        execution, taken = execution_resume(
            principal=request.user,
            execution_id=execution_id,
            event_id=body["eventId"],
            event=body["event"],
            payload=body["payload"],
        )
        return Response(
            ExecutionViewSerializer(execution).data,
            status=status.HTTP_202_ACCEPTED if taken else status.HTTP_200_OK,
        )


CAPABILITY_VERSION = re.compile(
    r"(?P<capability>[A-Za-z][A-Za-z0-9_.-]{0,199})@(?P<version>[1-9][0-9]{0,8})"
)


class CallbackView(APIView):
    """An asynchronous provider reports a call's output; authenticated by its HMAC signature."""

    authentication_classes: list = []
    permission_classes = [AllowAny]
    renderer_classes = [JSONRenderer]
    content_negotiation_class = JsonOnly
    metadata_class = None

    @extend_schema(
        operation_id="callbacks_create",
        summary="Report the output of an asynchronous call",
        description="For routes with async = true. The body is `{externalKey, output}`, signed "
        "with the route's callback secret: `X-Signature: sha256=<hex HMAC-SHA256 of the raw "
        "body>`; no JWT. The output is validated against the contract's output schema; the "
        "execution then continues. The same body again answers 200 and changes nothing.",
        auth=[],
        request=CallbackSerializer,
        parameters=[
            OpenApiParameter(
                "X-Signature", OpenApiTypes.STR, OpenApiParameter.HEADER, required=True
            ),
        ],
        responses={
            200: OpenApiResponse(description="Taken (or a replay of the same body)."),
            400: INVALID_BODY,
            401: _error("UNAUTHENTICATED: a missing or wrong X-Signature."),
            404: _error("NOT_FOUND: no call of this capability has this externalKey."),
            405: METHOD_NOT_ALLOWED,
            409: _error("NOT_WAITING: the call is not waiting for its callback (any more)."),
            422: _error("OUTPUT_INVALID: the output breaks the contract's output schema."),
        },
    )
    def post(self, request: DrfRequest, name: str) -> Response:
        match = CAPABILITY_VERSION.fullmatch(name)
        if match is None:
            raise CodedError(errors.NOT_FOUND, "not found")
        body = request.body
        if len(body) > MAX_CALLBACK_BYTES:
            raise CodedError(
                errors.INVALID_BODY, f"the body is larger than {MAX_CALLBACK_BYTES} bytes"
            )
        received = callback_receive(
            capability=match["capability"],
            version=int(match["version"]),
            body=body,
            signature=request.headers.get("X-Signature"),
        )
        return Response(
            {
                "executionId": received.execution_id,
                "actionId": received.action_id,
                "replay": received.replay,
            },
            status=status.HTTP_200_OK,
        )


class FlowCollectionView(ApiView):
    required_permissions = {"GET": (FLOWS_ADMIN,), "POST": (FLOWS_ADMIN,)}

    @extend_schema(
        operation_id="flows_list",
        summary="List published flow versions",
        description="Every published version, by key then version, for every tenant: flows "
        "are platform-wide. Needs flows:admin (a platform scope).",
        parameters=[WWW_AUTHENTICATE],
        responses={
            200: FlowViewSerializer(many=True),
            401: UNAUTHENTICATED,
            403: FORBIDDEN,
            405: METHOD_NOT_ALLOWED,
        },
    )
    def get(self, request: DrfRequest) -> Response:
        return Response(FlowViewSerializer(selectors.flow_list(), many=True).data)

    @extend_schema(
        operation_id="flows_publish",
        summary="Publish a flow version",
        description="The body is a flow definition (SPEC §4). A new key and version is stored "
        "(201); the same content again changes nothing (200). The version serves every tenant: "
        "flows are platform-wide. Needs flows:admin (a platform scope).",
        request=FlowDefinitionSerializer,
        parameters=[WWW_AUTHENTICATE],
        responses={
            200: OpenApiResponse(FlowViewSerializer, description="Already published as sent."),
            201: OpenApiResponse(FlowViewSerializer, description="Published."),
            400: INVALID_BODY,
            401: UNAUTHENTICATED,
            403: FORBIDDEN,
            405: METHOD_NOT_ALLOWED,
            409: _error("FLOW_CONFLICT: this key and version is published with other content."),
            422: _error(
                "FLOW_INVALID: the definition breaks SPEC §4; `problems` lists every problem "
                "with its path. Nothing is stored.",
                FlowInvalidSerializer,
            ),
        },
    )
    def post(self, request: DrfRequest) -> Response:
        definition = json_body(request)
        if not isinstance(definition, dict):
            raise CodedError(errors.INVALID_BODY, "the body must be a JSON object (a flow)")
        flow, created = flow_publish(definition=definition)
        return Response(
            FlowViewSerializer(flow).data,
            status=status.HTTP_201_CREATED if created else status.HTTP_200_OK,
        )
