"""Bearer-token authentication: JWTs validated locally with PyJWT (docs/api.md#authentication-
and-scopes). The principal is the caller as the token states it: `sub` owns what it creates,
JWT_TENANT_CLAIM is its tenant, JWT_SCOPE_CLAIM its permissions.

Invariants: the key decides the algorithm (a provider's key found by `kid`, orquestador/jwks.py),
never the token, and any other (`none` included) is refused before the signature is looked at;
`exp`, `iss`, `aud`, `sub` and the tenant are required, `exp` and `nbf` enforced with a small
leeway and every date a JSON number (RFC 7519's NumericDate); refusals never echo the token nor
log it; a verified token is remembered until its `exp` (tokencache.py), a refused one never is.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.serialization import load_pem_public_key
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from rest_framework import exceptions
from rest_framework.authentication import BaseAuthentication, get_authorization_header
from rest_framework.permissions import BasePermission
from rest_framework.request import Request as DrfRequest
from rest_framework.views import APIView

from . import jwks, tokencache

# Permissions carried in the `scope` claim.
REQUESTS_WRITE = "requests:write"
REQUESTS_READ = "requests:read"
REQUESTS_READ_TENANT = "requests:read:tenant"  # read every request of the caller's tenant
FLOWS_ADMIN = "flows:admin"
# Send events to the waiting executions of the caller's tenant (an approver need not own them).
EXECUTIONS_RESUME = "executions:resume"
WEBHOOKS_ADMIN = "webhooks:admin"  # manage the webhook subscriptions of the caller's tenant
PERMISSIONS = (
    REQUESTS_WRITE,
    REQUESTS_READ,
    REQUESTS_READ_TENANT,
    FLOWS_ADMIN,
    EXECUTIONS_RESUME,
    WEBHOOKS_ADMIN,
)

LEEWAY_SECONDS = 30  # seconds of clock skew tolerated on exp, nbf and iat
MAX_TOKEN_BYTES = 8192  # bytes; longer bearer values are refused unread
MAX_IDENTITY_LENGTH = 255  # characters of sub and tenant: the owner and scope columns
MIN_SECRET_BYTES = 32  # bytes of JWT_SECRET: HS256 needs a key at least as long as its hash
MIN_RSA_BITS = 2048  # bits of an RSA JWT_PUBLIC_KEY
REQUIRED_CLAIMS = ("exp", "iss", "aud", "sub")  # and the tenant claim JWT_TENANT_CLAIM names
DATE_CLAIMS = ("exp", "nbf", "iat")  # RFC 7519 NumericDates: JSON numbers, never strings
WWW_AUTHENTICATE = 'Bearer realm="orquestador"'


class TokenInvalid(Exception):
    """The bearer token is refused; the message says why and is safe to show."""


@dataclass(frozen=True)
class Principal:
    """The authenticated caller: owner (`sub`), tenant and permissions."""

    subject: str
    tenant: str
    permissions: frozenset[str]

    # DRF and Django treat `request.user` as a user object; these make the principal one.
    is_authenticated = True
    is_anonymous = False

    def has(self, permission: str) -> bool:
        return permission in self.permissions

    @property
    def qualified(self) -> str:
        """`sub@tenant`: how audit payloads and adapters name the principal."""
        return f"{self.subject}@{self.tenant}"

    def snapshot(self) -> dict:
        """Who accepted something, as stored in `execution.actor_snapshot`."""
        return {
            "subject": self.subject,
            "scope": self.tenant,
            "roles": sorted(self.permissions),
        }


@dataclass(frozen=True)
class Verifier:
    key: bytes | rsa.RSAPublicKey | ec.EllipticCurvePublicKey  # HS256's secret, or a public key
    algorithm: str


def configured_verifier() -> Verifier | jwks.KeySet:
    """The key and the one algorithm the configured JWT settings accept, or the provider's key
    set (JWT_JWKS_URL: nothing is fetched until a token needs it)."""
    if settings.JWT_JWKS_URL:
        return _key_set(
            settings.JWT_JWKS_URL,
            settings.JWT_JWKS_CACHE_SECONDS,
            bool(settings.JWT_SECRET or settings.JWT_PUBLIC_KEY),
        )
    return _verifier(settings.JWT_SECRET, settings.JWT_PUBLIC_KEY)


def _key_set(url: str, cache_seconds: int, static_key_too: bool) -> jwks.KeySet:
    if static_key_too:
        raise ImproperlyConfigured(
            "Set JWT_JWKS_URL or one of JWT_SECRET and JWT_PUBLIC_KEY, not both: the keys come "
            "from the identity provider or from the settings."
        )
    problem = jwks.url_problem(url)
    if problem is not None:
        raise ImproperlyConfigured(f"JWT_JWKS_URL {problem}.")
    if not isinstance(cache_seconds, int) or cache_seconds < 1:
        raise ImproperlyConfigured("JWT_JWKS_CACHE_SECONDS must be a whole number of seconds >= 1.")
    return jwks.key_set(url, float(cache_seconds))


@functools.lru_cache(maxsize=4)
def _claim_names(tenant_claim: str, scope_claim: str) -> tuple[str, tuple[str, ...]]:
    scope_claims = tuple(name.strip() for name in scope_claim.split(",") if name.strip())
    if not tenant_claim.strip() or not scope_claims:
        raise ImproperlyConfigured("JWT_TENANT_CLAIM and JWT_SCOPE_CLAIM must name claims.")
    return tenant_claim.strip(), scope_claims


@functools.lru_cache(maxsize=4)
def _verifier(secret: str, public_key: str) -> Verifier:
    if secret and public_key:
        raise ImproperlyConfigured(
            "Set only one of JWT_SECRET (HS256) and JWT_PUBLIC_KEY (RS256/ES256), not both."
        )
    if secret:
        if len(secret.encode("utf-8")) < MIN_SECRET_BYTES:
            raise ImproperlyConfigured(
                f"JWT_SECRET must be at least {MIN_SECRET_BYTES} bytes long for HS256."
            )
        return Verifier(key=secret.encode("utf-8"), algorithm="HS256")
    if not public_key:
        raise ImproperlyConfigured(
            "Neither JWT_SECRET (HS256) nor JWT_PUBLIC_KEY (RS256/ES256) is set; the API "
            "cannot validate tokens."
        )
    try:
        key = load_pem_public_key(public_key.encode("utf-8"))
    except ValueError as exc:
        raise ImproperlyConfigured(
            "JWT_PUBLIC_KEY is not a PEM public key (-----BEGIN PUBLIC KEY-----)."
        ) from exc
    if isinstance(key, rsa.RSAPublicKey):
        if key.key_size < MIN_RSA_BITS:
            raise ImproperlyConfigured(f"JWT_PUBLIC_KEY: RSA keys need {MIN_RSA_BITS}+ bits.")
        return Verifier(key=key, algorithm="RS256")
    if isinstance(key, ec.EllipticCurvePublicKey) and isinstance(key.curve, ec.SECP256R1):
        return Verifier(key=key, algorithm="ES256")
    raise ImproperlyConfigured("JWT_PUBLIC_KEY must be an RSA key (RS256) or a P-256 key (ES256).")


def principal_from_token(token: str) -> Principal:
    """Validate `token` against the configured key, issuer and audience; return its caller."""
    source = configured_verifier()
    tenant_claim, scope_claims = _claim_names(settings.JWT_TENANT_CLAIM, settings.JWT_SCOPE_CLAIM)
    if len(token) > MAX_TOKEN_BYTES:
        raise TokenInvalid(f"the token is longer than {MAX_TOKEN_BYTES} bytes")
    # Verified under these settings (and, from a provider, this set of its keys), not expired:
    # the same principal (orquestador/tokencache.py).
    keys = source if isinstance(source, Verifier) else (source.url, source.current())
    config = (keys, settings.JWT_ISSUER, settings.JWT_AUDIENCE, tenant_claim, scope_claims)
    known = tokencache.remembered(token, config)
    if known is not None:
        return known
    try:
        header = jwt.get_unverified_header(token)
    except jwt.InvalidTokenError as exc:
        raise TokenInvalid("the token is not a well-formed JWT") from exc
    algorithm = header.get("alg")
    if algorithm is None:
        raise TokenInvalid("the token's header names no algorithm (alg)")
    verifier = source if isinstance(source, Verifier) else _provider_key(source, header)
    if algorithm != verifier.algorithm:
        raise TokenInvalid(
            f"the token's algorithm {str(algorithm)[:20]!r} is not accepted; "
            f"this server accepts {verifier.algorithm}"
            + ("" if source is verifier else " for this key (kid)")
        )
    try:
        claims = jwt.decode(
            token,
            verifier.key,
            algorithms=[verifier.algorithm],
            audience=settings.JWT_AUDIENCE,
            issuer=settings.JWT_ISSUER,
            leeway=LEEWAY_SECONDS,
            options={
                "require": [*REQUIRED_CLAIMS, tenant_claim],
                "enforce_minimum_key_length": True,
            },
        )
    except jwt.ExpiredSignatureError as exc:
        raise TokenInvalid("the token has expired") from exc
    except jwt.ImmatureSignatureError as exc:
        raise TokenInvalid("the token is not valid yet (nbf or iat in the future)") from exc
    except jwt.MissingRequiredClaimError as exc:
        raise TokenInvalid(f"the token has no {exc.claim!r} claim") from exc
    except jwt.InvalidIssuerError as exc:
        raise TokenInvalid("the token's issuer (iss) is not accepted") from exc
    except jwt.InvalidAudienceError as exc:
        raise TokenInvalid("the token's audience (aud) is not accepted") from exc
    except jwt.exceptions.InvalidSubjectError as exc:
        raise TokenInvalid("the token's 'sub' claim must be a non-empty string") from exc
    except jwt.InvalidSignatureError as exc:
        raise TokenInvalid("the token's signature does not verify") from exc
    except jwt.InvalidTokenError as exc:
        raise TokenInvalid("the token is not a valid JWT") from exc
    for claim in DATE_CLAIMS:
        # PyJWT reads a date with int(), so "1760000000" and true would pass for numbers.
        value = claims.get(claim, 0)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise TokenInvalid(f"the token's {claim!r} claim must be a number (a NumericDate)")
    principal = _principal(claims, tenant_claim, scope_claims)
    tokencache.remember(token, config, principal, claims["exp"])
    return principal


def _provider_key(keys: jwks.KeySet, header: dict) -> Verifier:
    """The provider's key the header's `kid` names, with the one algorithm that key verifies."""
    algorithm = header["alg"]
    if algorithm not in jwks.ALGORITHMS:  # none, HS256, ...: refused before any key is sought
        raise TokenInvalid(
            f"the token's algorithm {str(algorithm)[:20]!r} is not accepted; "
            f"this server accepts {', '.join(jwks.ALGORITHMS)} by the provider's keys"
        )
    kid = header.get("kid")
    if not isinstance(kid, str) or not kid or len(kid) > jwks.MAX_KID_LENGTH:
        raise TokenInvalid("the token's header names no key of the identity provider (kid)")
    found = keys.key(kid)
    if found is None:
        raise TokenInvalid("the token's key (kid) is not one the identity provider publishes")
    return Verifier(key=found.key, algorithm=found.algorithm)


def _principal(claims: dict, tenant_claim: str, scope_claims: tuple[str, ...]) -> Principal:
    identity = {}
    for claim in ("sub", tenant_claim):
        value = claims.get(claim)
        if not isinstance(value, str) or not value.strip():
            raise TokenInvalid(f"the token's {claim!r} claim must be a non-empty string")
        if len(value) > MAX_IDENTITY_LENGTH or not value.isprintable():
            raise TokenInvalid(
                f"the token's {claim!r} claim must be at most {MAX_IDENTITY_LENGTH} "
                "printable characters"
            )
        identity[claim] = value
    permissions: set[str] = set()
    for claim in scope_claims:
        # A space-separated string (scope, Entra ID's scp) or a list of strings (roles).
        scope = claims.get(claim, "")
        if isinstance(scope, str):
            permissions.update(scope.split())
        elif isinstance(scope, list) and all(isinstance(item, str) for item in scope):
            permissions.update(part for item in scope for part in item.split())
        else:
            raise TokenInvalid(
                f"the token's {claim!r} claim must be a space-separated string or a list of strings"
            )
    return Principal(
        subject=identity["sub"],
        tenant=identity[tenant_claim],
        permissions=frozenset(permissions),
    )


def token_encode(*, subject: str, tenant: str, scope: str, ttl_seconds: int) -> str:
    """An HS256 token signed with JWT_SECRET, for local use (`manage.py minttoken`)."""
    if not settings.JWT_SECRET:
        raise ImproperlyConfigured("JWT_SECRET is not set; tokens are signed with it (HS256).")
    verifier = configured_verifier()
    if not isinstance(verifier, Verifier) or not isinstance(verifier.key, bytes):
        raise ImproperlyConfigured("JWT_SECRET is not set; tokens are signed with it (HS256).")
    tenant_claim, scope_claims = _claim_names(settings.JWT_TENANT_CLAIM, settings.JWT_SCOPE_CLAIM)
    now = int(time.time())
    claims = {
        "iss": settings.JWT_ISSUER,
        "aud": settings.JWT_AUDIENCE,
        "sub": subject,
        tenant_claim: tenant,
        scope_claims[0]: scope,
        "iat": now,
        "nbf": now,
        "exp": now + ttl_seconds,
    }
    return jwt.encode(claims, verifier.key, algorithm=verifier.algorithm)


class BearerAuthentication(BaseAuthentication):
    """DRF authentication from `Authorization: Bearer <JWT>`."""

    def authenticate(self, request: DrfRequest) -> tuple[Principal, str] | None:
        header = get_authorization_header(request).split()
        if not header:
            return None  # no credentials: the permission check answers 401
        if header[0].lower() != b"bearer":
            raise exceptions.AuthenticationFailed("the Authorization header must be 'Bearer <JWT>'")
        if len(header) != 2:
            raise exceptions.AuthenticationFailed("the Authorization header must be 'Bearer <JWT>'")
        try:
            token = header[1].decode("ascii")
        except UnicodeDecodeError as exc:
            raise exceptions.AuthenticationFailed("the token is not a well-formed JWT") from exc
        try:
            return principal_from_token(token), token
        except TokenInvalid as exc:
            raise exceptions.AuthenticationFailed(str(exc)) from exc

    def authenticate_header(self, request: DrfRequest) -> str:
        return WWW_AUTHENTICATE


class HasPermission(BasePermission):
    """Allow an authenticated principal holding one of `view.required_permissions`.

    No credentials at all is NotAuthenticated (401); a principal without the permission is
    PermissionDenied (403, FORBIDDEN).
    """

    def has_permission(self, request: DrfRequest, view: APIView) -> bool:
        principal = request.user
        if not isinstance(principal, Principal):
            raise exceptions.NotAuthenticated("an 'Authorization: Bearer <JWT>' header is required")
        method = "GET" if request.method == "HEAD" else request.method
        required = view.required_permissions.get(method)
        if required is None:
            return True  # a method the view does not serve: its handler answers 405
        if any(principal.has(permission) for permission in required):
            return True
        needed = " or ".join(repr(permission) for permission in required)
        raise exceptions.PermissionDenied(
            f"this call needs the {needed} permission in the token's scope"
        )
