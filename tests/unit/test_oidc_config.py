"""The operators' sign-in settings (orquestador/oidcconfig.py): what starts, and every refusal,
each naming its variable; the settings module itself refuses to load with a bad one."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from orquestador.oidcconfig import OidcConfigError, admin_sign_in, parse_group_map

ROOT = Path(__file__).resolve().parents[2]
GOOD = {
    "issuer": "https://sso.example.com/realms/acme",
    "client_id": "orquestador-admin",
    "client_secret": "s3cret",
    "groups_claim": "groups",
    "group_map": "",
    "password_login": True,
}


@pytest.mark.parametrize(
    "issuer",
    [
        "https://sso.example.com/realms/acme",
        "https://acme.eu.auth0.com/",
        "http://127.0.0.1:8080/o",
        "http://localhost:8080/realms/dev",
    ],
)
def test_issuer__https_or_loopback_http__accepted(issuer):
    assert admin_sign_in(**{**GOOD, "issuer": issuer}).issuer == issuer  # kept as the provider says


@pytest.mark.parametrize(
    ("issuer", "message"),
    [
        ("http://sso.example.com/realms/acme", "must be https://"),
        ("http://10.0.0.5/o", "must be https://"),
        ("http://127.0.0.1.example.com/o", "must be https://"),
        ("sso.example.com", "absolute https:// URL"),
        ("ftp://sso.example.com", "absolute https:// URL"),
        ("https://sso.example.com/o?tenant=x", "no query or fragment"),
    ],
)
def test_issuer__refused_with_its_name(issuer, message):
    with pytest.raises(OidcConfigError, match=message) as refused:
        admin_sign_in(**{**GOOD, "issuer": issuer})
    assert "ADMIN_OIDC_ISSUER_URL" in str(refused.value)


def test_client__both_halves_required():
    with pytest.raises(OidcConfigError, match="ADMIN_OIDC_CLIENT_SECRET is not"):
        admin_sign_in(**{**GOOD, "client_secret": ""})
    with pytest.raises(OidcConfigError, match="ADMIN_OIDC_CLIENT_ID and ADMIN_OIDC_CLIENT_SECRET"):
        admin_sign_in(**{**GOOD, "client_id": "", "client_secret": ""})


def test_password_login_off__needs_a_provider():
    assert not admin_sign_in(**{**GOOD, "password_login": False}).password_login
    with pytest.raises(OidcConfigError, match="nobody could sign in"):
        admin_sign_in(**{**GOOD, "issuer": "", "password_login": False})


def test_no_provider__nothing_else_checked():
    sign_in = admin_sign_in(**{**GOOD, "issuer": "", "client_id": "", "client_secret": ""})
    assert not sign_in.enabled and sign_in.password_login


def test_group_map__pairs_and_one_group_onto_several():
    assert parse_group_map(
        "orq-operators=Reconciliation operators, orq-readers=Reconciliation readers,"
        "orq-operators=Reconciliation readers,"
    ) == {
        "orq-operators": ("Reconciliation operators", "Reconciliation readers"),
        "orq-readers": ("Reconciliation readers",),
    }
    assert parse_group_map("") == {}


@pytest.mark.parametrize("text", ["orq-operators", "=Operators", "orq-operators=", "a=b,c"])
def test_group_map__malformed_item_named(text):
    with pytest.raises(OidcConfigError, match="ADMIN_OIDC_GROUP_MAP"):
        parse_group_map(text)


def test_secret_not_in_repr():
    assert "s3cret" not in repr(admin_sign_in(**GOOD))


def test_settings__a_bad_value_stops_the_start_with_its_name():
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "orquestador.settings",
        "SECRET_KEY": "x" * 50,
        "DATABASE_URL": "postgres://nobody@127.0.0.1:1/none",
        "ADMIN_OIDC_ISSUER_URL": "http://sso.example.com/realms/acme",
        "ADMIN_OIDC_CLIENT_ID": "orquestador-admin",
        "ADMIN_OIDC_CLIENT_SECRET": "s3cret",
    }
    started = subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert started.returncode != 0
    assert "ImproperlyConfigured: ADMIN_OIDC_ISSUER_URL must be https://" in started.stderr
