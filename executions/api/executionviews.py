"""The API's HTTP interface for executions: read, cancel, deliver an event, and the providers'
signed callbacks. Like every view, no business rules: parse, call one selector or service, render.
"""

import re

from django.utils.timezone import get_current_timezone as current_zone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.permissions import AllowAny
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request as DrfRequest
from rest_framework.response import Response
from rest_framework.views import APIView

from orquestador import errors
from orquestador.auth import EXECUTIONS_RESUME, REQUESTS_WRITE
from orquestador.errors import CodedError

from ..queue.cancel import execution_cancel
from ..queue.limits import throttled_each
from ..queue.waits import waiting_for
from . import selectors
from .base import (
    INVALID_BODY,
    METHOD_NOT_ALLOWED,
    ApiView,
    JsonOnly,
    caller,
    error_response,
    operation,
    path_id,
    read_one_view,
    validated,
)
from .callbacks import MAX_CALLBACK_BYTES, callback_receive
from .pagejson import encoded, execution_item
from .resumes import MAX_KEPT_EVENTS, execution_resume
from .serializers import (
    CallbackSerializer,
    ExecutionCancelSerializer,
    ExecutionEventSerializer,
    ExecutionViewSerializer,
)

ExecutionDetailView = read_one_view(
    "execution",
    selectors.execution_get,
    ExecutionViewSerializer,
    "Read an execution",
    "Its status and, once decided, the business outcome and target state; a "
    "stable errorCode when it failed. Needs requests:read or requests:read:tenant.",
    render=lambda found: encoded(
        execution_item(
            found, waiting_for(found), current_zone(), throttled_each([found]).get(found.id)
        )
    ),
)


class ExecutionCancelView(ApiView):
    required_permissions = {"POST": (REQUESTS_WRITE,)}

    @operation(
        "executions_cancel",
        "Cancel an execution",
        "A durable, fenced write that needs no worker: whoever holds the execution "
        "is locked out of every later write. PENDING, RETRY_WAIT, SUSPENDED and RUNNING "
        "executions end CANCELLED and release the request when none of their writes succeeded "
        "or is still pending; when their writes all succeeded and their transition compensates "
        "them, they go back to PENDING and a worker undoes them (COMPENSATED); otherwise they "
        "go to RECONCILIATION_REQUIRED with the request "
        "still blocked, for an operator. The reason is kept in the audit trail. Needs "
        "requests:write, on the caller's own executions.",
        request=ExecutionCancelSerializer,
        parameters=[path_id("execution_id", "execution")],
        responses={
            202: ExecutionViewSerializer,
            404: error_response("NOT_FOUND: no such execution, or not one of the caller's."),
            409: error_response(
                "NOT_CANCELLABLE: the execution already ended (SUCCEEDED, FAILED, CANCELLED, "
                "COMPENSATED) or "
                "is in RECONCILIATION_REQUIRED, which an operator settles instead."
            ),
        },
    )
    def post(self, request: DrfRequest, execution_id: str) -> Response:
        found = selectors.execution_get_writable(
            principal=caller(request), execution_id=execution_id
        )
        body = validated(ExecutionCancelSerializer, request)
        execution_cancel(
            execution_id=found.id,
            actor=caller(request).subject,
            reason=body["reason"],
            principal=caller(request).qualified,
        )
        found.refresh_from_db()
        return Response(ExecutionViewSerializer(found).data, status=status.HTTP_202_ACCEPTED)


class ExecutionEventsView(ApiView):
    required_permissions = {"POST": (EXECUTIONS_RESUME,)}

    @operation(
        "executions_events_create",
        "Send an event to a waiting execution",
        "Resumes an execution SUSPENDED on a wait for this event: in one "
        "transaction the wait's checkpoint records the payload as its output, the execution "
        "becomes PENDING for the workers, and EXECUTION_RESUMED records the caller. An event "
        "for a wait the execution has not reached yet (it is PENDING, RETRY_WAIT or RUNNING and "
        f"the wait lies ahead) is kept and used there (202; at most {MAX_KEPT_EVENTS} kept per "
        "execution). Sending the same eventId with the same body again answers 200 with the "
        "execution as it is now. Needs executions:resume; any execution of the caller's tenant.",
        request=ExecutionEventSerializer,
        parameters=[path_id("execution_id", "execution")],
        responses={
            200: OpenApiResponse(
                ExecutionViewSerializer, description="A replay: this eventId was already taken."
            ),
            202: OpenApiResponse(ExecutionViewSerializer, description="Taken."),
            404: error_response("NOT_FOUND: no such execution in the caller's tenant."),
            409: error_response(
                "NOT_WAITING: the execution waits for no event, for another event, or for an "
                "asynchronous provider's callback, and no wait for this event lies ahead (or "
                f"{MAX_KEPT_EVENTS} events are already kept)."
            ),
            422: error_response(
                "EVENT_INVALID: the payload breaks the wait's payloadSchema; `problems` lists "
                "each with its path. IDEMPOTENCY_KEY_REUSED: this eventId was sent with another "
                "event or payload."
            ),
        },
    )
    def post(self, request: DrfRequest, execution_id: str) -> Response:
        body = validated(ExecutionEventSerializer, request)
        execution, taken = execution_resume(
            principal=caller(request),
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
            401: error_response("UNAUTHENTICATED: a missing or wrong X-Signature."),
            404: error_response("NOT_FOUND: no call of this capability has this externalKey."),
            405: METHOD_NOT_ALLOWED,
            409: error_response(
                "NOT_WAITING: the call is not waiting for its callback (any more)."
            ),
            422: error_response("OUTPUT_INVALID: the output breaks the contract's output schema."),
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
