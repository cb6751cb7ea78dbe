"""The OpenAPI schema says what the server enforces (drf-spectacular post-processing), and is
served by a view whose refusals are JSON like every other under /api/.

Request bodies are strict: the parser and the serializers refuse any field they do not know, so
every request body's component gets `additionalProperties: false`, and a generated client never
sends what the server would refuse.
"""

from typing import Any

from drf_spectacular.views import SpectacularAPIView
from rest_framework import exceptions
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response

from .shapes import EXECUTION_VIEW


class SchemaView(SpectacularAPIView):
    """GET /api/schema/, in YAML or JSON as asked (`?format=`, Accept).

    drf-spectacular's view renders a refusal with the schema's renderer (`?format=` naming none
    was a 404 in YAML), and an Accept none of its renderers satisfies (a browser's) was DRF's
    406, which has no code here: a 500. Refusals are JSON here, and such an Accept gets the
    default, YAML."""

    def perform_content_negotiation(self, request: Request, force: bool = False) -> Any:
        try:
            return super().perform_content_negotiation(request, force)
        except exceptions.NotAcceptable:
            return super().perform_content_negotiation(request, force=True)

    def finalize_response(
        self, request: Request, response: Response, *args: Any, **kwargs: Any
    ) -> Response:
        if isinstance(response, Response) and response.status_code >= 400:
            request.accepted_renderer = JSONRenderer()
            request.accepted_media_type = JSONRenderer.media_type
        return super().finalize_response(request, response, *args, **kwargs)


def strict_request_bodies(result: dict[str, Any], **_: Any) -> dict[str, Any]:
    """POSTPROCESSING_HOOKS entry: `additionalProperties: false` on every request body."""
    components = result.get("components", {}).get("schemas", {})
    for operations in result.get("paths", {}).values():
        for operation in operations.values():
            content = operation.get("requestBody", {}).get("content", {})
            for media in content.values():
                name = media.get("schema", {}).get("$ref", "").rpartition("/")[2]
                if name in components:
                    components[name]["additionalProperties"] = False
    return result


# View fields that are present only in some states, so not `required` (the field's description
# says when): the execution view's nested objects (executions/api/shapes.py), `waitingFor` while
# SUSPENDED only and `throttled` while a route limit holds it back.
OPTIONAL_VIEW_FIELDS = {"ExecutionView": tuple(nested.key for nested in EXECUTION_VIEW.nested)}


def optional_view_fields(result: dict[str, Any], **_: Any) -> dict[str, Any]:
    """POSTPROCESSING_HOOKS entry: drop OPTIONAL_VIEW_FIELDS from their views' `required`."""
    components = result.get("components", {}).get("schemas", {})
    for name, fields in OPTIONAL_VIEW_FIELDS.items():
        required = components.get(name, {}).get("required")
        if required:
            components[name]["required"] = [f for f in required if f not in fields]
    return result
