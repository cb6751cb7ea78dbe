"""Operators with and without the reconciliation permissions, and the capability the cases use."""

import pytest
from django.contrib.auth.models import Permission, User

from actions.catalog import parse_catalog
from actions.registry import ADAPTERS, build_registry, use_registry

CHARGE_OUTPUT_SCHEMA = {
    "type": "object",
    "required": ["chargeId", "status"],
    "properties": {"chargeId": {"type": "string"}, "status": {"enum": ["paid", "declined"]}},
}


def charge_catalog(base_url: str = "http://127.0.0.1:9/charges") -> dict:
    """The catalog document for payments.charge@1, served by http.json at `base_url`."""
    return {
        "contracts": {
            "payments.charge@1": {
                "effect": "NON_IDEMPOTENT_WRITE",
                "max_attempts": 2,
                "timeout_seconds": 2,
                "input_schema": {"type": "object", "required": ["amount"]},
                "output_schema": CHARGE_OUTPUT_SCHEMA,
            }
        },
        "routes": {
            "payments.charge@1": {
                "adapter": "http.json",
                "url": base_url,
                "method": "POST",
                "lookup_url": base_url + "/by-key/{key}",
            }
        },
    }


@pytest.fixture
def charge_registry():
    """payments.charge@1 configured in this process (nothing listens on its URL)."""
    catalog = parse_catalog(charge_catalog(), adapters=ADAPTERS, lease_seconds=60, environ={})
    with use_registry(build_registry(catalog)) as registry:
        yield registry


def _user(username: str, *codenames: str, staff: bool = True) -> User:
    user = User.objects.create_user(username=username, password="pw-" + username, is_staff=staff)
    if codenames:
        user.user_permissions.add(*Permission.objects.filter(codename__in=codenames))
    return User.objects.get(pk=user.pk)  # fresh, so no permission cache


VIEW = (
    "view_reconciliationcase",
    "view_blockedrequest",
    "view_request",
    "view_execution",
    "view_actionexecution",
    "view_auditevent",
    "view_flow",
    "view_workerprocess",
)
RESOLVE = (
    "fetch_provider_evidence",
    "resolve_write_happened",
    "resolve_write_not_happened",
    "abandon_execution",
)


@pytest.fixture
def operator(db) -> User:
    """Staff with every reconciliation permission."""
    return _user("olga", *VIEW, *RESOLVE)


@pytest.fixture
def viewer(db) -> User:
    """Staff who may read cases but resolve none."""
    return _user("victor", *VIEW)


@pytest.fixture
def make_user(db):
    return _user
