"""The operators' sign-in settings (ADMIN_OIDC_*, ADMIN_PASSWORD_LOGIN) as settings.py reads them:
checked once at start, each problem named with its variable (docs/operations.md#single-sign-on).

Pure: no Django, no network. The provider itself is first asked at the first sign-in, so a
provider that is down never stops the admin from starting (orquestador/signin.py).
"""

from dataclasses import dataclass, field
from urllib.parse import urlsplit

LOOPBACK_HOSTS = ("127.0.0.1", "localhost")


class OidcConfigError(ValueError):
    """A sign-in setting that cannot work; the message names the variable."""


def url_problem(name: str, url: str, *, query: bool = False) -> str | None:
    """Why `url` cannot be a provider's address, or None: https, or http on loopback only (the
    rule of both ADMIN_OIDC_ISSUER_URL and JWT_JWKS_URL; a key set's URL may carry a `query`, as
    Entra ID's `?appid=` does)."""
    parts = urlsplit(url)
    if not parts.hostname or parts.scheme not in ("https", "http"):
        return f"{name} must be an absolute https:// URL (got {url[:80]!r})"
    if parts.scheme == "http" and parts.hostname not in LOOPBACK_HOSTS:
        return (
            f"{name} must be https:// (http:// is accepted on 127.0.0.1 and localhost only, for "
            f"development and tests; got {url[:80]!r})"
        )
    if (parts.query and not query) or parts.fragment:
        return f"{name} takes no query or fragment (got {url[:80]!r})"
    return None


def parse_group_map(text: str) -> dict[str, tuple[str, ...]]:
    """`idp-group=Django group,…` → {idp group: (Django groups…)}; one provider group may map to
    several Django groups by appearing more than once."""
    mapping: dict[str, tuple[str, ...]] = {}
    for item in text.split(","):
        if not item.strip():
            continue
        provider_group, sep, django_group = item.partition("=")
        provider_group, django_group = provider_group.strip(), django_group.strip()
        if not sep or not provider_group or not django_group:
            raise OidcConfigError(
                "ADMIN_OIDC_GROUP_MAP is a comma-separated list of idp-group=Django group "
                f"(got {item.strip()[:80]!r})"
            )
        mapping[provider_group] = (*mapping.get(provider_group, ()), django_group)
    return mapping


@dataclass(frozen=True)
class AdminSignIn:
    issuer: str  # "" when the provider sign-in is off
    client_id: str
    client_secret: str = field(repr=False)
    groups_claim: str
    group_map: dict[str, tuple[str, ...]]
    password_login: bool

    @property
    def enabled(self) -> bool:
        return bool(self.issuer)


def admin_sign_in(
    *,
    issuer: str,
    client_id: str,
    client_secret: str,
    groups_claim: str,
    group_map: str,
    password_login: bool,
) -> AdminSignIn:
    """The settings as one value, or OidcConfigError naming what cannot work."""
    issuer = issuer.strip()
    if issuer:
        if problem := url_problem("ADMIN_OIDC_ISSUER_URL", issuer):
            raise OidcConfigError(problem)
        missing = [
            name
            for name, value in (
                ("ADMIN_OIDC_CLIENT_ID", client_id),
                ("ADMIN_OIDC_CLIENT_SECRET", client_secret),
            )
            if not value
        ]
        if missing:
            raise OidcConfigError(
                f"ADMIN_OIDC_ISSUER_URL is set, but {' and '.join(missing)} "
                f"{'is' if len(missing) == 1 else 'are'} not: the admin is a confidential "
                "client of the provider"
            )
        if not groups_claim.strip():
            raise OidcConfigError("ADMIN_OIDC_GROUPS_CLAIM must name a claim (default: groups)")
    elif not password_login:
        raise OidcConfigError(
            "ADMIN_PASSWORD_LOGIN is false, but ADMIN_OIDC_ISSUER_URL is not set: nobody could "
            "sign in to the admin"
        )
    return AdminSignIn(
        issuer=issuer,  # as given: Auth0's ends with "/", Keycloak's does not
        client_id=client_id,
        client_secret=client_secret,
        groups_claim=groups_claim.strip(),
        group_map=parse_group_map(group_map),
        password_login=password_login,
    )
