"""Error pages show no secret: a Host header that is not allowed, a fault, with DEBUG on or off.

The test settings carry real credentials (DATABASE_URL and MIGRATION_DATABASE_URL name real roles
with passwords, SECRET_KEY, JWT_SECRET): every page below is searched for each of them.
"""

import os

import environ
import pytest
from django.conf import settings
from django.test import Client, override_settings

from orquestador.errorreports import SecretMaskingFilter, mask_url_credentials

pytestmark = pytest.mark.django_db


def _secrets() -> list[str]:
    found = [settings.SECRET_KEY]
    for name in ("DATABASE_URL", "MIGRATION_DATABASE_URL"):
        found.append(environ.Env.db_url_config(os.environ[name])["PASSWORD"])
    return [s for s in found if s]


def _assert_no_secret(content: bytes) -> None:
    text = content.decode(errors="replace")
    for secret in _secrets():
        assert secret not in text


def test_foreign_host__debug_page_masks_every_url_password_and_key():
    client = Client(raise_request_exception=False)
    with override_settings(DEBUG=True, JWT_SECRET="j" * 40):
        response = client.get("/healthz", HTTP_HOST="evil.example")
    assert response.status_code == 400
    text = response.content.decode()
    assert "DisallowedHost" in text  # the debug page itself, not a plain 400
    assert (
        "MIGRATION_DATABASE_URL" in text and f"{SecretMaskingFilter.cleansed_substitute}@" in text
    )
    _assert_no_secret(response.content)
    assert "j" * 40 not in text


def test_foreign_host__without_debug_is_a_plain_400():
    response = Client().get("/healthz", HTTP_HOST="evil.example")
    assert response.status_code == 400
    assert b"DATABASE_URL" not in response.content
    _assert_no_secret(response.content)


def test_foreign_host__on_the_api_is_json_with_a_code():
    response = Client().get("/api/v1/requests/x", HTTP_HOST="evil.example")
    assert response.status_code == 400
    assert response.json()["code"] == "INVALID_BODY"


@pytest.mark.parametrize("path", ["/api/nothing/here", "/internal/nothing"])
def test_unknown_api_path__is_json_not_found(path):
    response = Client().post(path, data=b"{}", content_type="application/json")
    assert response.status_code == 404
    assert response.json()["code"] == "NOT_FOUND"


def test_filter__hides_the_process_environment_in_meta_and_url_passwords_everywhere(rf):
    request = rf.get("/", HTTP_X_TRACE="postgres://u:hunter2@h/db")
    request.META.update({name: value for name, value in os.environ.items()})
    safe = SecretMaskingFilter().get_safe_request_meta(request)
    for name in os.environ:
        if not name.startswith("HTTP_"):
            assert safe[name] == SecretMaskingFilter.cleansed_substitute, name
    assert safe["HTTP_X_TRACE"] == f"postgres://{SecretMaskingFilter.cleansed_substitute}@h/db"
    assert safe["PATH_INFO"] == "/"


def test_filter__masks_frame_variables_holding_urls_with_credentials():
    def fault() -> None:
        dsn = "postgres://owner:s3cret-pw@db:5432/app"  # noqa: F841 (read from the frame)
        conninfo = {"url": "https://user:tok-en@example.test/x"}  # noqa: F841
        raise RuntimeError("boom")

    try:
        fault()
    except RuntimeError as exc:
        tb = exc.__traceback__
        while tb.tb_next is not None:
            tb = tb.tb_next
        shown = dict(SecretMaskingFilter().get_traceback_frame_variables(None, tb.tb_frame))
    assert "s3cret-pw" not in repr(shown["dsn"])
    assert "tok-en" not in repr(shown["conninfo"])


def test_mask_url_credentials__any_scheme_anywhere():
    text = "a redis://:pw1@r:6379/0 and amqp://guest:pw2@mq// and https://example.test/"
    masked = mask_url_credentials(text)
    assert "pw1" not in masked and "pw2" not in masked
    assert "https://example.test/" in masked
