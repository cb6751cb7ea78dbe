"""The API's HTTP interface for requests, their transitions and flows: authenticate, parse, call
one selector or service, render (the executions' views are in executionviews.py, what all views
share in base.py).

Views hold no business rules. Every error leaves as a value (`CodedError` or a DRF exception) and
is rendered by `orquestador.api_errors.exception_handler` as `{"code", "detail"}`. The OpenAPI
description of each operation lists every status it can answer with.
"""

from django.utils.timezone import get_current_timezone as current_zone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiExample, OpenApiParameter, OpenApiResponse
from rest_framework import status
from rest_framework.request import Request as DrfRequest
from rest_framework.response import Response

from orquestador import errors
from orquestador.auth import FLOWS_ADMIN, REQUESTS_WRITE
from orquestador.errors import CodedError

from ..flows.publication import flow_publish
from ..queue.waits import waiting_for
from . import selectors, services
from .acceptbody import accept_body
from .base import (
    IDEMPOTENCY_KEY_SCHEMA,
    READ,
    ApiView,
    caller,
    error_response,
    idempotency_key,
    json_body,
    operation,
    path_id,
    read_one_view,
    validated,
)
from .listviews import request_list_answer, request_list_operation
from .pagejson import encoded, execution_item, request_item
from .serializers import (
    ExecutionViewSerializer,
    FlowDefinitionSerializer,
    FlowInvalidSerializer,
    FlowViewSerializer,
    RequestCreateSerializer,
    RequestViewSerializer,
    TransitionAcceptSerializer,
)


class RequestCollectionView(ApiView):
    required_permissions = {"GET": READ, "POST": (REQUESTS_WRITE,)}

    @request_list_operation
    def get(self, request: DrfRequest) -> Response:
        return request_list_answer(request)

    @operation(
        "requests_create",
        "Create a request on a published flow",
        "The request starts in the flow's initialState, owned by the token's sub in "
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
            OpenApiParameter("Location", OpenApiTypes.STR, OpenApiParameter.HEADER, response=[201]),
        ],
        responses={
            201: RequestViewSerializer,
            404: error_response("NOT_FOUND: no published flow has this flowKey (and flowVersion)."),
            422: error_response(
                "DATA_INVALID: data does not satisfy the flow's dataSchema (the detail names "
                "the path); DATA_TOO_LARGE: data is over 256 KiB as compact UTF-8 JSON."
            ),
        },
    )
    def post(self, request: DrfRequest) -> Response:
        body = validated(RequestCreateSerializer, request)
        created = services.request_create(
            principal=caller(request),
            flow_key=body["flowKey"],
            flow_version=body.get("flowVersion"),
            data=body["data"],
        )
        return Response(
            RequestViewSerializer(created).data,
            status=status.HTTP_201_CREATED,
            headers={"Location": f"/api/v1/requests/{created.id}"},
        )


RequestDetailView = read_one_view(
    "request",
    selectors.request_get,
    RequestViewSerializer,
    "Read a request",
    "Needs requests:read (the caller's own requests) or requests:read:tenant "
    "(every request of the caller's tenant).",
    render=lambda found: encoded(request_item(found, current_zone())),
)


class TransitionCollectionView(ApiView):
    required_permissions = {"POST": (REQUESTS_WRITE,)}

    @operation(
        "requests_transitions_create",
        "Accept a transition on a request",
        "In one transaction: checks the transition exists and the request's state "
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
            path_id("request_id", "request"),
            OpenApiParameter(
                "Idempotency-Key",
                IDEMPOTENCY_KEY_SCHEMA,
                OpenApiParameter.HEADER,
                description="1 to 255 visible ASCII characters, unique per acceptance you mean.",
            ),
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
            404: error_response("NOT_FOUND: no such request, or not one of the caller's."),
            409: error_response(
                "REVISION_CONFLICT: expectedRevision is not the request's revision; "
                "REQUEST_BLOCKED: an execution holds the request until it finishes."
            ),
            422: error_response(
                "UNKNOWN_TRANSITION: the flow has no such transition; TRANSITION_NOT_ALLOWED: "
                "the request's state is not one the transition starts from; "
                "IDEMPOTENCY_KEY_REUSED: the Idempotency-Key was used on this request with a "
                "different body."
            ),
        },
    )
    def post(self, request: DrfRequest, request_id: str) -> Response:
        body = accept_body(request)
        execution, _created = services.transition_accept(
            principal=caller(request),
            request_id=request_id,
            transition_id=body["transitionId"],
            expected_revision=body["expectedRevision"],
            idempotency_key=idempotency_key(request),
        )
        answer = execution_item(execution, waiting_for(execution), current_zone(), None)
        return Response(
            encoded(answer),
            status=status.HTTP_202_ACCEPTED,
            headers={"Location": f"/api/v1/executions/{execution.id}"},
        )


class FlowCollectionView(ApiView):
    required_permissions = {"GET": (FLOWS_ADMIN,), "POST": (FLOWS_ADMIN,)}

    @operation(
        "flows_list",
        "List published flow versions",
        "Every published version, by key then version, for every tenant: flows "
        "are platform-wide. Needs flows:admin (a platform scope).",
        responses={
            200: FlowViewSerializer(many=True),
        },
    )
    def get(self, request: DrfRequest) -> Response:
        return Response(FlowViewSerializer(selectors.flow_list(), many=True).data)

    @operation(
        "flows_publish",
        "Publish a flow version",
        "The body is a flow definition (docs/flow-format.md). A new key and version is stored "
        "(201); the same content again changes nothing (200). The version serves every tenant: "
        "flows are platform-wide. Needs flows:admin (a platform scope).",
        request=FlowDefinitionSerializer,
        responses={
            200: OpenApiResponse(FlowViewSerializer, description="Already published as sent."),
            201: OpenApiResponse(FlowViewSerializer, description="Published."),
            409: error_response(
                "FLOW_CONFLICT: this key and version is published with other content."
            ),
            422: error_response(
                "FLOW_INVALID: the definition breaks the flow format (docs/flow-format.md); "
                "`problems` lists every problem with its path. Nothing is stored.",
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
