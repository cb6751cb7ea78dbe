"""The admin's plain pages: a NUL anywhere in an admin request is a 400 page, never a 500, on every
registered changelist and every filter parameter it declares; while the database cannot be
reached the admin answers an HTML 503 page, and everything else keeps its JSON 503. Every page,
plain ones included, carries the Content-Security-Policy and no inline script."""

import contextlib
import json
import socket
from collections.abc import Iterator

import psycopg
import pytest
from django.contrib import admin
from django.db import connection
from django.test import Client
from django.urls import reverse

from orquestador import database
from tests.support.csp import assert_policy_held

pytestmark = pytest.mark.django_db

NUL = "\x00"
# Parameters every changelist reads besides its filters: search, order, page, errors, popups.
CHANGELIST_PARAMETERS = ("q", "o", "p", "e", "all", "_to_field", "_popup", "_changelist_filters")
REGISTERED = sorted(admin.site._registry.items(), key=lambda item: item[0]._meta.label)


def _changelist(model) -> str:
    return reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_changelist")


def _parameters(model_admin, request) -> list[str]:
    """Every filter parameter the changelist declares, the changelist's own, and every field's
    name as a lookup (the admin reads unknown parameters as field lookups)."""
    changelist = model_admin.get_changelist_instance(request)
    declared = {name for spec in changelist.filter_specs for name in spec.expected_parameters()}
    fields = {field.name for field in model_admin.model._meta.concrete_fields}
    return sorted(declared | fields | {f"{f}__exact" for f in fields} | set(CHANGELIST_PARAMETERS))


def _assert_refused(response) -> None:
    assert response.status_code == 400, response.content[:300]
    assert response["Content-Type"].startswith("text/html")
    assert "A NUL character cannot be searched for or filtered on" in response.content.decode()


@pytest.fixture
def superuser_client(admin_user) -> Client:
    client = Client(raise_request_exception=False)
    client.force_login(admin_user)
    return client


@pytest.mark.parametrize(
    ("model", "model_admin"), REGISTERED, ids=[m._meta.label for m, _ in REGISTERED]
)
def test_nul__in_any_parameter_of_any_changelist__is_a_400_page(
    model, model_admin, superuser_client, admin_user, rf
):
    url = _changelist(model)
    request = rf.get(url)
    request.user = admin_user
    for name in _parameters(model_admin, request):
        # Without the NUL the same parameter reaches the changelist and is answered.
        assert superuser_client.get(url, {name: "1"}).status_code < 500, name
        for value in (NUL, f"a{NUL}b"):
            _assert_refused(superuser_client.get(url, {name: value}))
        _assert_refused(superuser_client.get(url, {name: "1", "q": f"x{NUL}"}))
    _assert_refused(superuser_client.get(url, {f"flow{NUL}": "1"}))  # in a name


def test_nul__the_page_names_the_parameter_and_links_to_the_page_without_it(superuser_client):
    url = reverse("admin:reconciliation_reconciliationcase_changelist")
    response = superuser_client.get(url, {"status": "RECONCILIATION_REQUIRED", "flow": f"b{NUL}"})
    _assert_refused(response)
    page = response.content.decode()
    assert "The query parameter “flow” holds a NUL character (%00)" in page
    assert f'href="{url}"' in page


def test_nul__in_the_path_or_a_posted_field__is_a_400_page(superuser_client):
    for name in ("executions_flow", "executions_request", "reconciliation_workerprocess"):
        path = reverse(f"admin:{name}_changelist") + "%00/change/"
        _assert_refused(superuser_client.get(path))
    queue = reverse("admin:reconciliation_reconciliationcase_changelist")
    posted = superuser_client.post(
        queue, {"action": "abandon_execution", "_selected_action": f"1{NUL}", "reason": "r"}
    )
    _assert_refused(posted)
    assert "form field “_selected_action”" in posted.content.decode()


def test_nul__in_the_session_cookie__is_a_400_page():
    client = Client(raise_request_exception=False)
    client.cookies["sessionid"] = f"abcdefgh{NUL}"
    _assert_refused(client.get(reverse("admin:index")))


def test_nul__outside_the_admin__is_left_to_its_own_answer():
    response = Client().get("/healthz", {"x": NUL})
    assert response.status_code == 200 and response.json() == {"status": "ok"}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def database_refused() -> Iterator[None]:
    """The web process's database connection pointed at a loopback port nobody listens on: every
    connection is refused, as while PostgreSQL is stopped."""
    settings_dict = connection.settings_dict
    saved = settings_dict["HOST"], settings_dict["PORT"]
    connection.close()
    settings_dict["HOST"], settings_dict["PORT"] = "127.0.0.1", str(_free_port())
    try:
        yield
    finally:
        connection.close()
        settings_dict["HOST"], settings_dict["PORT"] = saved


@pytest.mark.django_db(transaction=True)
def test_outage__the_admin_answers_an_html_503_page(admin_user):
    client = Client(raise_request_exception=False)
    client.force_login(admin_user)
    queue = reverse("admin:reconciliation_reconciliationcase_changelist")
    with database_refused():
        page = client.get(queue, {"status": "all"})
        login = Client(raise_request_exception=False).post(
            reverse("admin:login"), {"username": "olga", "password": "pw"}
        )
    for response in (page, login):
        assert response.status_code == 503
        assert response["Content-Type"].startswith("text/html")
        assert response["Retry-After"] == str(database.RETRY_AFTER_SECONDS)
        text = response.content.decode()
        assert "<h1>The database cannot be reached</h1>" in text
        assert "Nothing was changed" in text
        assert "DATABASE_UNAVAILABLE" not in text and "Traceback" not in text
        assert "127.0.0.1" not in text  # nothing of the server is shown
    # A page read reloads itself; a refused form post does not post again.
    assert f'<meta http-equiv="refresh" content="{database.RETRY_AFTER_SECONDS}">' in page.text
    assert f'href="{queue}?status=all"' in page.text
    assert "http-equiv" not in login.text
    # Back: the same client is served again.
    assert client.get(queue).status_code == 200


def test_outage__outside_the_admin_the_503_stays_json(rf):
    refused = psycopg.OperationalError("connection refused")
    for path in ("/api/v1/requests", "/metrics", "/internal/worker/execute"):
        response = database.unavailable_response(refused, rf.get(path))
        assert response.status_code == 503
        assert response["Content-Type"] == "application/json"
        assert json.loads(response.content)["code"] == "DATABASE_UNAVAILABLE"


@pytest.mark.parametrize(
    ("model", "model_admin"), REGISTERED, ids=[m._meta.label for m, _ in REGISTERED]
)
def test_csp__on_every_changelist_and_add_page(
    model, model_admin, superuser_client, admin_user, rf
):
    listed = superuser_client.get(_changelist(model))
    assert listed.status_code == 200
    assert_policy_held(listed)
    request = rf.get(_changelist(model))
    request.user = admin_user
    if model_admin.has_add_permission(request):
        add = reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_add")
        added = superuser_client.get(add)
        assert added.status_code == 200
        assert_policy_held(added)


def test_csp__on_the_index_login_and_plain_pages(superuser_client):
    assert_policy_held(superuser_client.get(reverse("admin:index")))
    assert_policy_held(Client().get(reverse("admin:login")))
    refused = superuser_client.get(reverse("admin:index") + "?q=%00")
    assert refused.status_code == 400
    assert_policy_held(refused)
