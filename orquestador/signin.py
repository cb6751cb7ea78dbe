"""Operators sign in to the admin with OpenID Connect (authorization code with PKCE), through
mozilla-django-oidc: its views, backend and session refresh, with the provider's endpoints read
from discovery when first needed (never at start), the ID token's iss and aud checked, the user
found by (issuer, subject) and their Django groups set from the token at every sign-in.

Invariant: nothing here runs unless ADMIN_OIDC_ISSUER_URL is set; a provider that is down fails a
sign-in with a message on the login page, never a 500 (docs/adr/0027).
"""

import logging
import threading
import time
from typing import Any
from urllib.parse import urlsplit

import requests  # noqa: TID251  the sign-in library's own client (docs/adr/0027)
from django.conf import settings
from django.contrib import messages
from django.contrib.auth import get_user_model
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser, Group
from django.core.exceptions import SuspiciousOperation
from django.db import transaction
from django.db.models.functions import Now
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import reverse
from django.utils.crypto import get_random_string
from mozilla_django_oidc import auth as oidc_auth
from mozilla_django_oidc import middleware as oidc_middleware
from mozilla_django_oidc import views as oidc_views

from .models import OperatorIdentity
from .oidcconfig import AdminSignIn

logger = logging.getLogger(__name__)

DISCOVERY_PATH = "/.well-known/openid-configuration"
DISCOVERY_TTL_SECONDS = 3600  # a provider's endpoints rarely move; its keys are fetched per sign-in
TIMEOUT_SECONDS = 10  # each call to the provider
SCOPES = "openid email profile"
# Preferred first; the provider's discovery says which it signs ID tokens with.
SIGNING_ALGORITHMS = ("RS256", "ES256", "PS256", "EdDSA", "RS384", "RS512", "ES384", "ES512")
# Where the library puts what it needs in the session, under our own URL names.
FIXED = {
    "OIDC_USE_PKCE": True,
    "OIDC_PKCE_CODE_CHALLENGE_METHOD": "S256",
    "OIDC_RP_SCOPES": SCOPES,
    "OIDC_TIMEOUT": TIMEOUT_SECONDS,
    "OIDC_AUTHENTICATION_CALLBACK_URL": "oidc_authentication_callback",
    "OIDC_STORE_ID_TOKEN": False,
    "OIDC_STORE_ACCESS_TOKEN": False,
    "LOGIN_REDIRECT_URL": "admin:index",
    "LOGIN_REDIRECT_URL_FAILURE": "admin:login",
}
ENDPOINTS = {
    "OIDC_OP_AUTHORIZATION_ENDPOINT": "authorization_endpoint",
    "OIDC_OP_TOKEN_ENDPOINT": "token_endpoint",
    "OIDC_OP_USER_ENDPOINT": "userinfo_endpoint",
    "OIDC_OP_JWKS_ENDPOINT": "jwks_uri",
}


class ProviderUnavailable(Exception):
    """The provider's discovery document could not be read or does not describe it."""


def config() -> AdminSignIn:
    value: AdminSignIn = settings.ADMIN_SIGN_IN
    return value


def provider_name(issuer: str) -> str:
    return urlsplit(issuer).netloc


_discovered: dict[str, tuple[float, dict[str, Any]]] = {}
_discovery_lock = threading.Lock()


def discovery(issuer: str | None = None) -> dict[str, Any]:
    """The provider's discovery document, cached DISCOVERY_TTL_SECONDS; ProviderUnavailable when
    it cannot be read and none is cached (an expired one is kept while the provider is down)."""
    issuer = issuer or config().issuer
    now = time.monotonic()
    cached = _discovered.get(issuer)
    if cached and now - cached[0] < DISCOVERY_TTL_SECONDS:
        return cached[1]
    with _discovery_lock:
        try:
            document = _fetch_discovery(issuer)
        except ProviderUnavailable:
            if cached:
                logger.warning("provider discovery failed; its last document kept: %s", issuer)
                return cached[1]
            raise
        _discovered[issuer] = (now, document)
        return document


def _fetch_discovery(issuer: str) -> dict[str, Any]:
    url = issuer.rstrip("/") + DISCOVERY_PATH
    try:
        response = requests.get(url, timeout=TIMEOUT_SECONDS)
        response.raise_for_status()
        document = response.json()
    except (requests.RequestException, ValueError) as exc:
        raise ProviderUnavailable(f"{url}: {exc}") from exc
    if not isinstance(document, dict):
        raise ProviderUnavailable(f"{url} answered no JSON object")
    # OpenID Connect Discovery 4.3: the document's issuer is the one asked for.
    if str(document.get("issuer", "")).rstrip("/") != issuer.rstrip("/"):
        raise ProviderUnavailable(
            f"{url} names issuer {str(document.get('issuer'))[:100]!r}, not {issuer!r}"
        )
    missing = [
        key for key in ENDPOINTS.values() if key != "userinfo_endpoint" and key not in document
    ]
    if missing:
        raise ProviderUnavailable(f"{url} lacks {', '.join(missing)}")
    return document


def signing_algorithm(document: dict[str, Any]) -> str:
    offered = document.get("id_token_signing_alg_values_supported") or ["RS256"]
    for algorithm in SIGNING_ALGORITHMS:
        if algorithm in offered:
            return algorithm
    raise ProviderUnavailable(f"the provider signs ID tokens with none of {SIGNING_ALGORITHMS}")


def provider_setting(name: str) -> Any:
    """An endpoint or the signing algorithm, from discovery."""
    if name == "OIDC_RP_SIGN_ALGO":
        return signing_algorithm(discovery())
    return discovery().get(ENDPOINTS[name])


def sign_in_setting(name: str, *default: Any) -> Any:
    """The library's settings, made from ADMIN_OIDC_*. The library reads the provider's ones only
    in its __init__s, whose assignments _Discovered drops: None for them here."""
    cfg = config()
    if name in ENDPOINTS or name == "OIDC_RP_SIGN_ALGO":
        return None
    if name == "OIDC_RP_CLIENT_ID":
        return cfg.client_id
    if name == "OIDC_RP_CLIENT_SECRET":
        return cfg.client_secret
    if name in FIXED:
        return FIXED[name]
    return oidc_views.import_from_settings(name, *default)


class _Discovered:
    """An attribute the library sets in __init__, read from discovery only when used, so making a
    view, backend or middleware never calls the provider."""

    def __init__(self, setting: str) -> None:
        self.setting = setting

    def __get__(self, instance: object, owner: type | None = None) -> Any:
        if self.setting in ENDPOINTS or self.setting == "OIDC_RP_SIGN_ALGO":
            return provider_setting(self.setting)
        return sign_in_setting(self.setting)

    def __set__(self, instance: object, value: Any) -> None:
        pass  # the library's __init__ assigns it; discovery answers instead


class _ProviderSettings:
    get_settings = staticmethod(sign_in_setting)
    OIDC_OP_AUTH_ENDPOINT = _Discovered("OIDC_OP_AUTHORIZATION_ENDPOINT")
    OIDC_OP_AUTHORIZATION_ENDPOINT = _Discovered("OIDC_OP_AUTHORIZATION_ENDPOINT")
    OIDC_OP_TOKEN_ENDPOINT = _Discovered("OIDC_OP_TOKEN_ENDPOINT")
    OIDC_OP_USER_ENDPOINT = _Discovered("OIDC_OP_USER_ENDPOINT")
    OIDC_OP_JWKS_ENDPOINT = _Discovered("OIDC_OP_JWKS_ENDPOINT")
    OIDC_RP_SIGN_ALGO = _Discovered("OIDC_RP_SIGN_ALGO")
    OIDC_RP_CLIENT_ID = _Discovered("OIDC_RP_CLIENT_ID")
    OIDC_RP_CLIENT_SECRET = _Discovered("OIDC_RP_CLIENT_SECRET")
    OIDC_RP_IDP_SIGN_KEY = None  # keys come from the provider's JWKS, by kid


def _refuse(request: HttpRequest, text: str) -> HttpResponse:
    messages.error(request, text)
    return HttpResponseRedirect(reverse("admin:login"))


def _require_enabled() -> AdminSignIn:
    cfg = config()
    if not cfg.enabled:
        raise Http404("no identity provider is configured (ADMIN_OIDC_ISSUER_URL)")
    return cfg


class AuthenticationRequest(_ProviderSettings, oidc_views.OIDCAuthenticationRequestView):
    """GET /admin/oidc/authenticate/: off to the provider, with state, nonce and PKCE."""

    def get(self, request: HttpRequest) -> HttpResponse:
        cfg = _require_enabled()
        try:
            discovery()
        except ProviderUnavailable as exc:
            logger.warning("sign-in refused: the provider is unavailable: %s", exc)
            return _refuse(
                request,
                f"{provider_name(cfg.issuer)} cannot be reached, so nobody can sign in with it "
                "now; try again later.",
            )
        return super().get(request)


class AuthenticationCallback(_ProviderSettings, oidc_views.OIDCAuthenticationCallbackView):
    """GET /admin/oidc/callback/: the code exchanged (with the PKCE verifier) and the user signed
    in; any failure is a message on the login page."""

    def get(self, request: HttpRequest) -> HttpResponse:
        _require_enabled()
        try:
            return super().get(request)
        except (requests.RequestException, ProviderUnavailable, SuspiciousOperation) as exc:
            logger.warning("sign-in failed at the provider's callback: %s", exc)
            return self.login_failure()

    def login_failure(self) -> HttpResponse:
        error = self.request.GET.get("error", "")
        detail = f" ({error[:60]})" if error else ""
        return _refuse(
            self.request,
            f"Signing in with {provider_name(config().issuer)} did not complete{detail}.",
        )


def login_options(request: HttpRequest) -> dict[str, Any]:
    """The login page's choices (templates/admin/login.html)."""
    cfg = config()
    return {
        "sign_in_provider": provider_name(cfg.issuer) if cfg.enabled else "",
        "sign_in_password": cfg.password_login,
    }


class ProviderBackend(_ProviderSettings, oidc_auth.OIDCAuthenticationBackend):
    """The user of a verified ID token: found by (issuer, subject), made staff on first sign-in,
    groups set from the token each time. Permissions are Django's (ModelBackend)."""

    def __init__(self) -> None:  # the library's reads the endpoints: here they come when used
        self.UserModel = get_user_model()

    def get_user(self, user_id: Any) -> AbstractBaseUser | None:
        # Django's, which the library's replaces: a user made inactive loses a session already
        # open, not only the next sign-in.
        return ModelBackend.get_user(self, user_id)

    def authenticate(self, request: HttpRequest | None, **kwargs: Any) -> AbstractBaseUser | None:
        # Only the provider's callback passes the verifier: a code posted anywhere else (a
        # password form with ?code=&state=) is never exchanged.
        if "code_verifier" not in kwargs or not config().enabled:
            return None
        user: AbstractBaseUser | None = super().authenticate(request, **kwargs)
        return user

    def verify_token(self, token: str, **kwargs: Any) -> dict[str, Any]:
        # The library checks signature, expiry and nonce; the issuer and audience are checked
        # here (OpenID Connect Core 3.1.3.7).
        payload: dict[str, Any] = super().verify_token(token, **kwargs)
        issuer = discovery()["issuer"]
        if payload.get("iss") != issuer:
            raise SuspiciousOperation(f"ID token from issuer {str(payload.get('iss'))[:100]!r}")
        audience = payload.get("aud")
        audiences = audience if isinstance(audience, list) else [audience]
        if config().client_id not in audiences:
            raise SuspiciousOperation("ID token not addressed to this client (aud)")
        return payload

    def get_userinfo(
        self, access_token: str, id_token: str, payload: dict[str, Any]
    ) -> dict[str, Any]:
        # The verified ID token's claims: groups travel there (Keycloak's mapper, Entra ID's
        # groups claim, Auth0's action), and no second call to the provider is needed.
        return payload

    def verify_claims(self, claims: dict[str, Any]) -> bool:
        return bool(claims.get("sub")) and bool(claims.get("iss"))

    def filter_users_by_claims(self, claims: dict[str, Any]) -> Any:
        return self.UserModel.objects.filter(
            provider_identity__issuer=claims["iss"], provider_identity__subject=claims["sub"]
        )

    def describe_user_by_claims(self, claims: dict[str, Any]) -> str:
        return f"subject {claims.get('sub')!r} at {claims.get('iss')!r}"

    def create_user(self, claims: dict[str, Any]) -> AbstractBaseUser:
        with transaction.atomic():
            user = self.UserModel.objects.create_user(
                _free_username(self.UserModel, claims),
                email=str(claims.get("email") or ""),
                is_staff=True,
            )
            OperatorIdentity.objects.create(user=user, issuer=claims["iss"], subject=claims["sub"])
        logger.info("operator created on first sign-in: %s", self.describe_user_by_claims(claims))
        return self.update_user(user, claims)

    def update_user(self, user: Any, claims: dict[str, Any]) -> Any:
        cfg = config()
        names = _mapped_groups(claims.get(cfg.groups_claim), cfg.group_map)
        groups = list(Group.objects.filter(name__in=names))
        for missing in sorted(set(names) - {group.name for group in groups}):
            logger.warning(
                "ADMIN_OIDC_GROUP_MAP names Django group %r, which does not exist", missing
            )
        with transaction.atomic():
            user.groups.set(groups)
            if not user.is_staff:
                user.is_staff = True
                user.save(update_fields=["is_staff"])
            OperatorIdentity.objects.filter(user=user).update(last_sign_in_at=Now())
        return user


def _mapped_groups(value: Any, group_map: dict[str, tuple[str, ...]]) -> set[str]:
    """The Django groups of the token's groups claim (a list, or one space-separated string)."""
    if isinstance(value, str):
        value = value.split()
    if not isinstance(value, list):
        return set()
    return {
        django for group in value if isinstance(group, str) for django in group_map.get(group, ())
    }


def _free_username(model: Any, claims: dict[str, Any]) -> str:
    """The provider's name for the user, suffixed when a local account already has it: a
    provider's "admin" never becomes the local "admin"."""
    field = model._meta.get_field(model.USERNAME_FIELD)
    base = str(claims.get("preferred_username") or claims.get("email") or claims["sub"])
    base = base[: field.max_length - 9]
    name = base
    while model.objects.filter(**{model.USERNAME_FIELD: name}).exists():
        name = f"{base}~{get_random_string(8, 'abcdefghijkmnpqrstuvwxyz23456789')}"
    return name


class SessionRefresh(_ProviderSettings, oidc_middleware.SessionRefresh):
    """Sends a signed-in operator's browser back to the provider (prompt=none) once the ID
    token's renewal time passes: a session ended at the provider ends here then."""

    exempt_urls: frozenset[str] = frozenset()  # process_request passes over /admin/oidc/ itself

    def process_request(self, request: HttpRequest) -> HttpResponse | None:
        if not config().enabled or not request.path.startswith("/admin/"):
            return None
        if request.path.startswith("/admin/oidc/") or isinstance(request.user, AnonymousUser):
            return None
        try:
            response: HttpResponse | None = super().process_request(request)
        except ProviderUnavailable as exc:
            # Before any document was read (a restart while the provider is down): the session
            # goes on until the provider answers again.
            logger.warning("session refresh skipped: the provider is unavailable: %s", exc)
            return None
        return response
