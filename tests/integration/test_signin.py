"""The provider's sign-in as Django sees it (orquestador/signin.py), without the provider: what
the backend refuses to do, how a user is named and grouped, and that nothing runs while no
issuer is set. The flow itself, against a real provider, is tests/browser/test_single_sign_on.py."""

import pytest
from django.contrib.auth.models import Group, User
from django.test import Client

from orquestador import oidcconfig, signin
from orquestador.models import OperatorIdentity

pytestmark = pytest.mark.django_db

ISSUER = "https://sso.example.com/realms/acme"
BACKEND = "orquestador.signin.ProviderBackend"


@pytest.fixture
def provider(settings):
    settings.ADMIN_SIGN_IN = oidcconfig.admin_sign_in(
        issuer=ISSUER,
        client_id="orquestador-admin",
        client_secret="s3cret",
        groups_claim="roles",
        group_map="orq-operators=Operators,orq-operators=Readers,orq-readers=Readers",
        password_login=True,
    )
    return settings.ADMIN_SIGN_IN


def test_a_user_made_inactive__loses_the_session_already_open(provider):
    user = User.objects.create_user("ines", is_staff=True)
    client = Client()
    client.force_login(user, backend=BACKEND)
    assert client.get("/admin/").status_code == 200
    User.objects.filter(pk=user.pk).update(is_active=False)
    assert signin.ProviderBackend().get_user(user.pk) is None  # the session names nobody now
    answer = client.get("/admin/")
    assert answer.status_code == 302 and answer["Location"].startswith("/admin/login/")


def test_backend__exchanges_a_code_only_for_the_callback(provider, rf):
    request = rf.get("/admin/login/", {"code": "stolen", "state": "s"})
    # No PKCE verifier: not the callback view calling, nothing is sent to the provider.
    assert signin.ProviderBackend().authenticate(request, username="a", password="b") is None


def test_first_sign_in__staff_under_a_free_name__groups_from_the_claim(provider):
    Group.objects.bulk_create([Group(name="Operators"), Group(name="Readers")])
    User.objects.create_user("admin", password="local-admin-password")
    claims = {
        "iss": ISSUER,
        "sub": "f3a1",
        "preferred_username": "admin",
        "roles": ["orq-operators", "other"],
    }
    backend = signin.ProviderBackend()

    user = backend.create_user(claims)

    assert user.username.startswith("admin~") and len(user.username) == len("admin~") + 8
    assert user.is_staff and not user.is_superuser and not user.has_usable_password()
    assert sorted(g.name for g in user.groups.all()) == ["Operators", "Readers"]
    assert OperatorIdentity.objects.get(user=user).as_audit() == {
        "issuer": ISSUER,
        "subject": "f3a1",
    }
    assert list(backend.filter_users_by_claims(claims)) == [user]
    assert list(backend.filter_users_by_claims({**claims, "iss": ISSUER + "2"})) == []

    backend.update_user(user, {**claims, "roles": "orq-readers"})  # a space-separated string too
    assert [g.name for g in user.groups.all()] == ["Readers"]
    backend.update_user(user, {**claims, "roles": None})
    assert list(user.groups.all()) == []


def test_no_issuer__no_provider_pages_and_the_password_form(client):
    assert client.get("/admin/oidc/authenticate/").status_code == 404
    page = client.get("/admin/login/").content.decode()
    assert 'id="id_password"' in page and "provider-sign-in" not in page
