"""What a wait action's payloadSchema lets through: the problems of one payload, and the pointers
no valid payload can ever reach.

A flow's rules and updates may point into a wait action's output, which is the payload of the
event that resumes it; a pointer the payloadSchema rules out is refused when the flow is
published rather than found empty on somebody's request. Pure: no database, no I/O.
"""

from typing import Any

from orquestador.schemas import ValidationTooCostly, data_errors

from .problems import FlowProblem, short_detail


def payload_problems(schema: dict | bool, payload: Any) -> list[FlowProblem]:
    """Every way `payload` breaks a (checked) payloadSchema, each with its JSON path; one at `$`
    when validating it would cost more than the budget (orquestador.schemas)."""
    try:
        found = data_errors(schema, payload)
    except ValidationTooCostly as exc:
        return [FlowProblem("$", f"validating it against the payloadSchema {exc}")]
    return [
        FlowProblem(error.json_path, short_detail(error.message))
        for error in sorted(found, key=lambda e: e.json_path)
    ]


# Keywords under which a schema combines or redirects to others: what such a schema produces is
# not decided by looking at `type`, `properties` and `additionalProperties` alone.
_UNDECIDABLE = (
    "$ref",
    "$dynamicRef",
    "allOf",
    "anyOf",
    "oneOf",
    "not",
    "if",
    "then",
    "else",
    "dependentSchemas",
    "unevaluatedProperties",
    "unevaluatedItems",
)


def unproducible(schema: Any, tokens: list[str]) -> str | None:
    """Where a payload valid against `schema` can never have anything at `tokens`, say where.

    Decides only the plain cases (a `false` schema, a `type` that rules out what the pointer
    needs, an object closed by `additionalProperties: false`, an array index not a number or
    past `maxItems`); anything it cannot decide is taken as producible (None).
    """
    walked = ""
    for segment in tokens:
        here = f"{walked}/{segment}"
        if schema is False:
            return walked or "anything"
        if not isinstance(schema, dict) or any(key in schema for key in _UNDECIDABLE):
            return None
        if "enum" in schema or "const" in schema:
            return None
        declared = schema.get("type")
        if declared is None:
            types = {"object", "array"}
        else:
            types = {declared} if isinstance(declared, str) else set(declared)
        child_of_object = child_of_array = None
        if "object" in types:
            properties = schema.get("properties") or {}
            if segment in properties:
                child_of_object = properties[segment]
            elif schema.get("patternProperties") or (
                schema.get("additionalProperties", True) is not False
            ):
                return None  # an open object may hold it
        is_index = segment.isdigit() and (segment == "0" or not segment.startswith("0"))
        if "array" in types and is_index:
            max_items = schema.get("maxItems")
            if not (isinstance(max_items, int) and int(segment) >= max_items):
                prefix = schema.get("prefixItems") or []
                index = int(segment)
                child_of_array = prefix[index] if index < len(prefix) else schema.get("items", True)
        if child_of_object is not None and child_of_array is not None:
            return None
        child = child_of_object if child_of_object is not None else child_of_array
        if child is None:
            return here
        schema = child
        walked = here
    if schema is False:
        return walked or "anything"
    return None
