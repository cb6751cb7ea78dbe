"""Too many parameters (Django's DATA_UPLOAD_MAX_NUMBER_FIELDS) are the client's mistake: 400
INVALID_QUERY on the API, a plain 400 page in the admin, and one WARNING without a traceback, so
no client can fill the error log."""

import logging

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.test import Client

from .conftest import assert_error

pytestmark = pytest.mark.django_db


def too_many() -> str:
    return "&".join(f"p{i}=1" for i in range(settings.DATA_UPLOAD_MAX_NUMBER_FIELDS + 100))


def refusals(caplog) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_too_many_fields__in_an_api_query_is_invalid_query_and_one_warning(alice, caplog):
    caplog.set_level(logging.INFO)
    body = assert_error(
        alice.get(f"/api/v1/requests?{too_many()}"), 400, "INVALID_QUERY", "query string", "1000"
    )
    assert set(body) == {"code", "detail"}
    (record,) = refusals(caplog)
    assert record.levelno == logging.WARNING
    assert record.exc_info is None and record.exc_text is None
    assert "1000" in record.getMessage() and "/api/v1/requests" in record.getMessage()


def test_too_many_fields__unauthenticated_is_the_same_answer(api, caplog):
    caplog.set_level(logging.INFO)
    response = Client().get(f"/api/v1/requests?{too_many()}")
    assert_error(response, 400, "INVALID_QUERY")
    assert [(r.levelno, r.exc_info) for r in refusals(caplog)] == [(logging.WARNING, None)]


@pytest.fixture
def admin_client() -> Client:
    user = User.objects.create_superuser("root", password="x")
    client = Client()
    client.force_login(user)
    return client


@pytest.mark.parametrize("method", ["get", "post"])
def test_too_many_fields__in_the_admin_is_a_plain_400_page_and_one_warning(
    admin_client, caplog, method
):
    caplog.set_level(logging.INFO)
    page = "/admin/executions/execution/"
    if method == "get":
        response = admin_client.get(f"{page}?{too_many()}")
    else:
        response = admin_client.post(
            page, too_many(), content_type="application/x-www-form-urlencoded"
        )
    assert response.status_code == 400
    assert response["Content-Type"].startswith("text/html")
    assert "Too many" in response.content.decode()
    assert [(r.levelno, r.exc_info) for r in refusals(caplog)] == [(logging.WARNING, None)]


def test_too_many_fields__a_thousand_are_still_read(alice):
    fields = "&".join(f"p{i}=1" for i in range(settings.DATA_UPLOAD_MAX_NUMBER_FIELDS))
    # Within the limit the list's own rule answers: the first unknown parameter, named.
    assert_error(alice.get(f"/api/v1/requests?{fields}"), 400, "INVALID_QUERY", "p0")
