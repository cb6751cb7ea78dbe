"""The one exception handler: every refusal is `{"code", "detail"}` with its status."""

import logging

from rest_framework import exceptions

from orquestador import errors
from orquestador.api_errors import STATUS_BY_CODE, exception_handler
from orquestador.errors import CodedError


def test_every_api_code__has_its_documented_status():
    assert STATUS_BY_CODE[errors.UNAUTHENTICATED] == 401
    assert STATUS_BY_CODE[errors.FORBIDDEN] == 403
    assert STATUS_BY_CODE[errors.NOT_FOUND] == 404
    assert STATUS_BY_CODE[errors.INVALID_BODY] == 400
    for code in (
        errors.DATA_INVALID,
        errors.DATA_TOO_LARGE,
        errors.UNKNOWN_TRANSITION,
        errors.TRANSITION_NOT_ALLOWED,
        errors.IDEMPOTENCY_KEY_REUSED,
        errors.FLOW_INVALID,
    ):
        assert STATUS_BY_CODE[code] == 422
    for code in (errors.REVISION_CONFLICT, errors.REQUEST_BLOCKED, errors.FLOW_CONFLICT):
        assert STATUS_BY_CODE[code] == 409


def test_a_code_without_a_status__is_still_a_4xx_and_is_logged(caplog):
    with caplog.at_level(logging.ERROR, logger="orquestador.api_errors"):
        response = exception_handler(CodedError("SOMETHING_NEW", "refused"), {})
    assert response.status_code == 400
    assert response.data == {"code": "SOMETHING_NEW", "detail": "refused"}
    assert "SOMETHING_NEW" in caplog.text


def test_validation_errors__are_flattened_to_named_fields():
    exc = exceptions.ValidationError({"a": ["is required"], "b": {"c": ["must be a string"]}})
    response = exception_handler(exc, {})
    assert response.status_code == 400
    assert response.data["code"] == "INVALID_BODY"
    assert response.data["detail"] == "a: is required; b.c: must be a string"


def test_an_unexpected_drf_exception__is_left_to_the_500_handler():
    assert exception_handler(exceptions.Throttled(), {}) is None
    assert exception_handler(RuntimeError("boom"), {}) is None
