"""The OpenAPI schema says what the server enforces (drf-spectacular post-processing).

Request bodies are strict: the parser and the serializers refuse any field they do not know, so
every request body's component gets `additionalProperties: false`, and a generated client never
sends what the server would refuse.
"""

from typing import Any


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
# says when): the execution view's `waitingFor`, while SUSPENDED only.
OPTIONAL_VIEW_FIELDS = {"ExecutionView": ("waitingFor",)}


def optional_view_fields(result: dict[str, Any], **_: Any) -> dict[str, Any]:
    """POSTPROCESSING_HOOKS entry: drop OPTIONAL_VIEW_FIELDS from their views' `required`."""
    components = result.get("components", {}).get("schemas", {})
    for name, fields in OPTIONAL_VIEW_FIELDS.items():
        required = components.get(name, {}).get("required")
        if required:
            components[name]["required"] = [f for f in required if f not in fields]
    return result
