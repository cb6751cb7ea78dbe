"""Operators sign in with a real OpenID Connect provider (django-oauth-toolkit on loopback,
tests/support/idp) in headless Chromium, with Django's password form off: the login page offers
only the provider, the sign-in runs the authorization code flow with PKCE, the operator gets the
reconciliation group from the provider's groups claim, resolves a case, and the audit names them
by the provider's issuer and subject. The group removed at the provider, the next sign-in takes
the permission away."""

import pytest
from django.contrib.auth.models import Group, Permission, User
from django.contrib.sessions.backends.db import SessionStore
from selenium.common.exceptions import WebDriverException
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as ec
from selenium.webdriver.support.ui import WebDriverWait

from executions.models import AuditEvent, AuditType, Execution, ExecutionStatus
from orquestador import oidcconfig
from orquestador.models import OperatorIdentity
from tests.integration.reconciliation.conftest import RESOLVE, VIEW, charge_registry  # noqa: F401
from tests.integration.reconciliation.factories import audit, reconciliation_case
from tests.support.idp import IdentityProvider

from .conftest import POLL_SECONDS, WAIT_SECONDS, csp_violations
from .test_reconciliation import case_page, navigate

pytestmark = [
    pytest.mark.browser,
    pytest.mark.process,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("charge_registry"),
]

CLIENT_ID = "orquestador-admin"
CLIENT_SECRET = "admin-client-secret-0123456789abcdef"
PASSWORD = "correct horse battery staple"
OPERATORS = "Reconciliation operators"


@pytest.fixture
def idp(tmp_path):
    provider = IdentityProvider(tmp_path / "idp").start()
    try:
        yield provider
    finally:
        provider.stop()


@pytest.fixture
def sso(settings, idp, live_server):
    """The admin signs in with `idp` only, its directory group mapped onto OPERATORS."""
    idp.control("web-client", CLIENT_ID, CLIENT_SECRET, f"{live_server.url}/admin/oidc/callback/")
    group = Group.objects.create(name=OPERATORS)
    group.permissions.add(*Permission.objects.filter(codename__in=VIEW + RESOLVE))
    settings.ADMIN_SIGN_IN = oidcconfig.admin_sign_in(
        issuer=idp.issuer,
        client_id=CLIENT_ID,
        client_secret=CLIENT_SECRET,
        groups_claim="groups",
        group_map=f"orq-operators={OPERATORS},orq-readers=Reconciliation readers",
        password_login=False,
    )
    settings.AUTHENTICATION_BACKENDS = ["orquestador.signin.ProviderBackend"]  # as settings.py
    return idp


def _wait(browser) -> WebDriverWait:
    return WebDriverWait(
        browser, WAIT_SECONDS, POLL_SECONDS, ignored_exceptions=(WebDriverException,)
    )


def _sign_in(browser, wait, live_server, idp, *, at_provider: bool) -> None:
    """From the admin's login page through the provider and back to the admin's index."""
    browser.get(f"{live_server.url}/admin/login/?next=/admin/")
    link = wait.until(ec.element_to_be_clickable((By.CSS_SELECTOR, "#provider-sign-in a")))
    assert link.text == f"Sign in with 127.0.0.1:{idp.port}"
    navigate(browser, wait, link)
    if at_provider:  # the provider's own form; later its session signs the operator in silently
        wait.until(ec.presence_of_element_located((By.ID, "idp-login")))
        browser.find_element(By.ID, "id_username").send_keys("ines")
        browser.find_element(By.ID, "id_password").send_keys(PASSWORD)
        navigate(browser, wait, browser.find_element(By.ID, "idp-submit"))
    wait.until(ec.presence_of_element_located((By.ID, "user-tools")))
    assert browser.current_url == f"{live_server.url}/admin/"


def test_sign_in__groups_from_the_provider__audit_names_issuer_and_subject(
    browser, live_server, sso, screenshots
):
    idp = sso
    wait = _wait(browser)
    subject = idp.control(
        "user",
        "ines",
        PASSWORD,
        "--email",
        "ines@example.com",
        "--group",
        "orq-operators",
        "--group",
        "unmapped",
    )
    case = reconciliation_case()
    audit(
        case.request,
        case,
        AuditType.RECONCILIATION_EVIDENCE,
        actionId="charge",
        happened=True,
        output={"chargeId": "ch_1", "status": "paid"},
        outputValid=True,
        outputProblems=[],
        detail="",
        operator="olga",
    )

    # The login page offers the provider alone: no password form, no script of its own.
    browser.get(f"{live_server.url}/admin/login/")
    screenshots(browser, "login")
    assert browser.find_elements(By.ID, "id_password") == []
    assert csp_violations(browser) == []

    _sign_in(browser, wait, live_server, idp, at_provider=True)
    screenshots(browser, "signed-in")
    identity = OperatorIdentity.objects.select_related("user").get()
    assert (identity.issuer, identity.subject) == (idp.issuer, subject)
    user = identity.user
    assert user.username == "ines" and user.is_staff and not user.is_superuser
    assert [g.name for g in user.groups.all()] == [OPERATORS]
    assert not user.has_usable_password()

    case_page(browser, wait, live_server, case)
    browser.find_element(By.ID, "happened_reason").send_keys("The provider shows the charge.")
    navigate(browser, wait, browser.find_element(By.ID, "submit-happened"))
    wait.until(ec.text_to_be_present_in_element((By.CSS_SELECTOR, ".messagelist"), "resolved 1"))
    screenshots(browser, "resolved")
    assert Execution.objects.get(pk=case.pk).status == ExecutionStatus.PENDING
    resolved = AuditEvent.objects.get(execution_id=case.pk, type=AuditType.RECONCILIATION_RESOLVED)
    assert resolved.actor == "ines"
    assert resolved.payload["operatorIdentity"] == {"issuer": idp.issuer, "subject": subject}

    # Out of the directory's operators group: the next sign-in takes the permission away.
    idp.control("user", "ines", PASSWORD, "--group", "unmapped")
    navigate(browser, wait, browser.find_element(By.CSS_SELECTOR, "#logout-form button"))
    _sign_in(browser, wait, live_server, idp, at_provider=False)
    screenshots(browser, "signed-in-again")
    user = User.objects.get(pk=user.pk)
    assert list(user.groups.all()) == []
    assert not user.has_perm("reconciliation.resolve_write_happened")
    assert "have permission to view or edit anything" in browser.find_element(By.ID, "content").text
    browser.get(f"{live_server.url}/admin/reconciliation/reconciliationcase/")
    assert "403 Forbidden" in browser.page_source
    assert OperatorIdentity.objects.count() == 1  # the same person, the same account


def test_sign_in__provider_down__said_on_the_login_page(browser, live_server, sso):
    idp = sso
    wait = _wait(browser)
    idp.stop()
    browser.get(f"{live_server.url}/admin/login/")
    navigate(browser, wait, browser.find_element(By.CSS_SELECTOR, "#provider-sign-in a"))
    told = wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, ".messagelist .error")))
    assert "cannot be reached" in told.text
    assert browser.current_url.startswith(f"{live_server.url}/admin/login/")


def test_session__disabled_at_the_provider__ends_at_its_renewal(browser, live_server, sso):
    idp = sso
    wait = _wait(browser)
    idp.control("user", "ines", PASSWORD, "--group", "orq-operators")
    _sign_in(browser, wait, live_server, idp, at_provider=True)
    browser.get(f"{live_server.url}/admin/reconciliation/reconciliationcase/")
    wait.until(ec.presence_of_element_located((By.ID, "changelist")))

    # Disabled at the provider (a departed employee); the renewal time comes (fifteen minutes
    # after the sign-in, made now): the next page asks the provider, which refuses.
    idp.control("user", "ines", PASSWORD, "--group", "orq-operators", "--inactive")
    session = SessionStore(session_key=browser.get_cookie("sessionid")["value"])
    session["oidc_id_token_expiration"] = 0
    session.save()
    browser.get(f"{live_server.url}/admin/reconciliation/reconciliationcase/")
    told = wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, ".messagelist .error")))
    assert "did not complete (login_required)" in told.text
    assert browser.current_url.startswith(f"{live_server.url}/admin/login/")
    browser.get(f"{live_server.url}/admin/reconciliation/reconciliationcase/")
    assert browser.current_url.startswith(f"{live_server.url}/admin/login/")  # signed out here
