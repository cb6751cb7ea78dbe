"""API tokens from a real OpenID Connect provider (django-oauth-toolkit on loopback,
tests/support/idp): a client gets them by client credentials, gunicorn verifies them with the
provider's JWKS (JWT_JWKS_URL), and when the provider rotates its signing key mid-test the API
goes on accepting tokens signed with the new key and the old one, without a restart."""

import jwt
import pytest
import requests

from tests.support.idp import IdentityProvider
from tests.support.web import gunicorn_process
from tests.support.worker import wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.process]

TIMEOUT = 10  # seconds per HTTP call
CLIENT_ID, SECRET = "acme-billing", "acme-billing-secret-0123456789abcdef"
SCOPE = "requests:read requests:write"


def _status(base: str, token: str) -> int:
    headers = {"Authorization": f"Bearer {token}"}
    return requests.get(f"{base}/api/v1/requests", headers=headers, timeout=TIMEOUT).status_code


def test_client_credentials__key_rotated_at_the_provider__old_and_new_tokens_accepted(
    process_env, tmp_path
):
    idp = IdentityProvider(tmp_path / "idp").start()
    try:
        idp.control("service-client", CLIENT_ID, SECRET, "acme")
        with gunicorn_process(
            process_env,
            tmp_path / "web.log",
            JWT_SECRET="",
            JWT_JWKS_URL=f"{idp.issuer}/.well-known/jwks.json",
            JWT_ISSUER=idp.issuer,
            JWT_AUDIENCE="orquestador-api",
            # The provider here signs with a new key as soon as it publishes it (Keycloak and
            # Entra ID publish first); a short cache takes it up within seconds.
            JWT_JWKS_CACHE_SECONDS="2",
        ) as base:
            old_token = idp.client_credentials(CLIENT_ID, SECRET, SCOPE)
            old_kid = jwt.get_unverified_header(old_token)["kid"]
            claims = jwt.decode(old_token, options={"verify_signature": False})
            assert (claims["sub"], claims["tenant"], claims["scope"]) == (CLIENT_ID, "acme", SCOPE)
            assert _status(base, old_token) == 200
            forged = jwt.encode(
                {**claims, "tenant": "globex"},
                "x" * 32,
                algorithm="HS256",
                headers={"kid": old_kid},
            )
            assert _status(base, forged) == 401  # the key's algorithm, never the token's

            kids = idp.rotate()
            new_token = idp.client_credentials(CLIENT_ID, SECRET, SCOPE)
            new_kid = jwt.get_unverified_header(new_token)["kid"]
            assert new_kid != old_kid and set(kids) == {old_kid, new_kid}
            wait_until(
                lambda: _status(base, new_token) == 200,
                timeout=90,  # the cache's 2 s, or the once-a-minute refetch for an unknown kid
                what="a token signed with the rotated key accepted",
            )
            assert _status(base, old_token) == 200  # the old key is still published
    finally:
        idp.stop()
