"""The OpenAPI 3 schema at /api/schema/ lists every endpoint with every status it answers."""

import io
import re

import pytest
from django.core.management import call_command
from django.test import Client

pytestmark = pytest.mark.django_db

LIST = {"200", "400", "401", "403", "405"}
EXPECTED = {
    ("/api/v1/requests", "get"): LIST,
    ("/api/v1/requests", "post"): {"201", "400", "401", "403", "404", "405", "422"},
    ("/api/v1/executions", "get"): LIST,
    ("/api/v1/executions/{execution_id}/actions", "get"): {"200", "401", "403", "404", "405"},
    ("/api/v1/requests/{request_id}", "get"): {"200", "401", "403", "404", "405"},
    ("/api/v1/requests/{request_id}/transitions", "post"): {
        "202",
        "400",
        "401",
        "403",
        "404",
        "405",
        "409",
        "422",
    },
    ("/api/v1/executions/{execution_id}", "get"): {"200", "401", "403", "404", "405"},
    ("/api/v1/executions/{execution_id}/cancel", "post"): {
        "202",
        "400",
        "401",
        "403",
        "404",
        "405",
        "409",
    },
    ("/api/v1/executions/{execution_id}/events", "post"): {
        "200",
        "202",
        "400",
        "401",
        "403",
        "404",
        "405",
        "409",
        "422",
    },
    ("/api/v1/flows", "get"): {"200", "401", "403", "405"},
    ("/api/v1/flows", "post"): {"200", "201", "400", "401", "403", "405", "409", "422"},
    ("/api/v1/webhooks", "get"): {"200", "401", "403", "405"},
    ("/api/v1/webhooks", "post"): {"201", "400", "401", "403", "405", "409", "422"},
    ("/api/v1/webhooks/{webhook_id}", "get"): {"200", "401", "403", "404", "405"},
    ("/api/v1/webhooks/{webhook_id}", "delete"): {"204", "401", "403", "404", "405"},
    ("/api/v1/webhooks/{webhook_id}/rotate-secret", "post"): {"200", "401", "403", "404", "405"},
    ("/api/v1/webhooks/{webhook_id}/ping", "post"): {"202", "401", "403", "404", "405"},
}


# Authenticated by the provider's HMAC signature, not by a bearer token.
SIGNED = {
    ("/api/v1/callbacks/{name}", "post"): {"200", "400", "401", "404", "405", "409", "422"},
}


@pytest.fixture
def schema(api) -> dict:
    response = Client().get("/api/schema/", {"format": "json"})
    assert response.status_code == 200
    return response.json()


def test_schema__is_openapi_3_with_bearer_auth(schema):
    assert schema["openapi"].startswith("3.")
    assert schema["components"]["securitySchemes"]["bearerAuth"] == {
        "type": "http",
        "scheme": "bearer",
        "bearerFormat": "JWT",
    }


def test_schema__every_endpoint_with_its_error_statuses(schema):
    found = {
        (path, method): set(operation["responses"])
        for path, operations in schema["paths"].items()
        for method, operation in operations.items()
    }
    assert found == {**EXPECTED, **SIGNED}
    for path, method in SIGNED:
        operation = schema["paths"][path][method]
        assert operation.get("security") in (None, [])
        assert any(p["name"] == "X-Signature" for p in operation["parameters"])
    for (path, method), statuses in EXPECTED.items():
        operation = schema["paths"][path][method]
        assert operation["security"] == [{"bearerAuth": []}]
        for status in statuses - {"200", "201", "202", "204"}:
            response = operation["responses"][status]
            assert response["description"], (path, method, status)
            ref = response["content"]["application/json"]["schema"]["$ref"]
            assert ref.endswith(("/Error", "/FlowInvalid")), ref
        assert "WWW-Authenticate" in operation["responses"]["401"]["headers"]


def test_schema__error_descriptions_name_the_codes(schema):
    transitions = schema["paths"]["/api/v1/requests/{request_id}/transitions"]["post"]
    responses = transitions["responses"]
    assert "REVISION_CONFLICT" in responses["409"]["description"]
    assert "REQUEST_BLOCKED" in responses["409"]["description"]
    for code in ("UNKNOWN_TRANSITION", "TRANSITION_NOT_ALLOWED", "IDEMPOTENCY_KEY_REUSED"):
        assert code in responses["422"]["description"]
    assert "Location" in responses["202"]["headers"]
    assert any(p["name"] == "Idempotency-Key" for p in transitions["parameters"])
    create = schema["paths"]["/api/v1/requests"]["post"]["responses"]
    assert "DATA_TOO_LARGE" in create["422"]["description"]
    assert "NOT_FOUND" in create["404"]["description"]


def test_schema__views_have_exactly_the_public_fields(schema):
    components = schema["components"]["schemas"]
    assert set(components["ExecutionView"]["properties"]) == {
        "id",
        "requestId",
        "transitionId",
        "status",
        "outcome",
        "targetState",
        "errorCode",
        "attempts",
        "createdAt",
        "finishedAt",
        "waitingFor",
        "throttled",
    }
    assert set(components["WaitingFor"]["properties"]) == {"actionId", "event", "deadline"}
    assert "waitingFor" not in components["ExecutionView"]["required"]  # only while SUSPENDED
    assert set(components["Throttled"]["properties"]) == {"actionId", "capability", "until"}
    assert "throttled" not in components["ExecutionView"]["required"]  # only while held back
    assert set(components["RequestView"]["properties"]) == {
        "id",
        "flowKey",
        "flowVersion",
        "state",
        "revision",
        "data",
        "blocked",
        "createdAt",
        "updatedAt",
    }
    assert set(components["FlowInvalid"]["properties"]) == {"code", "detail", "problems"}


def test_schema__generates_without_warnings_and_validates(api):
    out = io.StringIO()
    call_command(
        "spectacular", "--validate", "--fail-on-warn", "--format", "openapi-json", stdout=out
    )
    assert '"openapi"' in out.getvalue()


# --- The schema says what the server enforces ----------------------------------------------------


def test_schema__request_bodies_refuse_unknown_fields_as_the_server_does(schema):
    components = schema["components"]["schemas"]
    bodies = {
        operation["requestBody"]["content"]["application/json"]["schema"]["$ref"].split("/")[-1]
        for operations in schema["paths"].values()
        for operation in operations.values()
        if "requestBody" in operation
    }
    assert bodies == {
        "RequestCreate",
        "TransitionAccept",
        "ExecutionCancel",
        "ExecutionEvent",
        "Callback",
        "FlowDefinition",
        "WebhookCreate",
    }
    for name in bodies:
        assert components[name]["additionalProperties"] is False, name


def test_schema__names_are_one_to_100_characters_without_nul(schema):
    components = schema["components"]["schemas"]
    for component, field in (
        ("RequestCreate", "flowKey"),
        ("TransitionAccept", "transitionId"),
        ("FlowDefinition", "key"),
        ("FlowDefinition", "initialState"),
    ):
        spec = components[component]["properties"][field]
        assert (spec["minLength"], spec["maxLength"]) == (1, 100), (component, field)
        assert re.search(spec["pattern"], "a") and not re.search(spec["pattern"], "a\x00")
    assert components["ExecutionCancel"]["properties"]["reason"]["minLength"] == 1


def test_schema__idempotency_key_has_the_servers_pattern_and_length(schema):
    operation = schema["paths"]["/api/v1/requests/{request_id}/transitions"]["post"]
    (header,) = [p for p in operation["parameters"] if p["name"] == "Idempotency-Key"]
    assert header["in"] == "header"
    assert header["schema"]["maxLength"] == 255
    assert header["schema"]["minLength"] == 1
    assert header["schema"]["pattern"].startswith("^[\\x21-\\x7e]")


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("options", "/api/v1/requests"),
        ("delete", "/api/v1/requests"),
        ("options", "/api/v1/flows"),
        ("put", "/api/v1/flows"),
    ],
)
def test_allow_header__lists_exactly_the_methods_served(alice, admin, method, path):
    response = getattr(admin.client, method)(path, **admin.headers)
    assert response.status_code == 405
    allowed = {m.strip() for m in response["Allow"].split(",")}
    assert "OPTIONS" not in allowed
    documented = {
        m.upper() for m in Client().get("/api/schema/", {"format": "json"}).json()["paths"][path]
    }
    assert documented <= allowed <= documented | {"HEAD"}


def test_schema__lists_have_their_pages_filters_and_steps(schema):
    components = schema["components"]["schemas"]
    for page, view in (("RequestPage", "RequestView"), ("ExecutionPage", "ExecutionView")):
        assert set(components[page]["properties"]) == {"results", "next"}
        assert set(components[page]["required"]) == {"results", "next"}
        assert components[page]["properties"]["results"]["items"]["$ref"].endswith(view)
        assert components[page]["properties"]["next"]["nullable"] is True
    assert set(components["ExecutionAction"]["properties"]) == {
        "actionId",
        "capability",
        "version",
        "effect",
        "status",
        "attempts",
        "startedAt",
        "finishedAt",
        "errorCode",
        "compensates",
    }
    assert set(components["ExecutionAction"]["required"]) == set(
        components["ExecutionAction"]["properties"]
    )

    def parameters(path: str) -> dict:
        found = schema["paths"][path]["get"]["parameters"]
        return {p["name"]: p for p in found if p["in"] == "query"}

    assert set(parameters("/api/v1/requests")) == {
        "flowKey",
        "state",
        "blocked",
        "createdAfter",
        "createdBefore",
        "updatedAfter",
        "limit",
        "cursor",
    }
    executions = parameters("/api/v1/executions")
    assert set(executions) == {
        "status",
        "requestId",
        "transitionId",
        "errorCode",
        "createdAfter",
        "createdBefore",
        "finishedAfter",
        "limit",
        "cursor",
    }
    assert "SUCCEEDED" in executions["status"]["schema"]["enum"]
    assert executions["createdAfter"]["schema"] == {"type": "string", "format": "date-time"}
    limit = executions["limit"]["schema"]
    assert (limit["minimum"], limit["maximum"], limit["default"]) == (1, 200, 50)
    description = schema["paths"]["/api/v1/executions"]["get"]["responses"]["400"]["description"]
    assert "INVALID_QUERY" in description and "INVALID_CURSOR" in description
