"""The provider's claims: ID tokens carry the user's name, e-mail and groups (as Keycloak's group
mapper or Entra ID's groups claim do), and access tokens are JWTs signed with the active key,
named by its `kid`, with the client's tenant and scopes (as the API reads them)."""

import os
import time
import uuid

from jwcrypto import jwk, jwt
from oauth2_provider.oauth2_validators import OAuth2Validator
from oauth2_provider.settings import oauth2_settings

API_AUDIENCE = os.environ.get("IDP_API_AUDIENCE", "orquestador-api")


class Validator(OAuth2Validator):
    oidc_claim_scope = None  # every claim below, whatever the scopes asked

    # prompt=none (a relying party checking the session again): oauthlib leaves these to the
    # deployment. The authorization view answers login_required itself to a visitor with no
    # session here, so a request that reaches these has a signed-in user; first-party clients
    # need no consent.
    def validate_silent_login(self, request):
        return True

    def validate_silent_authorization(self, request):
        return bool(request.client.skip_authorization)

    def get_additional_claims(self, request):
        user = request.user
        return {
            "preferred_username": user.username,
            "email": user.email,
            "groups": sorted(user.groups.values_list("name", flat=True)),
        }


def access_token(request) -> str:
    """oauthlib's token_generator: one signed access token for `request`."""
    from .models import ClientClaims

    key = jwk.JWK.from_pem(oauth2_settings.OIDC_RSA_PRIVATE_KEY.encode())
    now = int(time.time())
    client = request.client
    user = getattr(request, "user", None)
    claims = {
        "iss": oauth2_settings.OIDC_ISS_ENDPOINT,
        "aud": API_AUDIENCE,
        "sub": str(user.pk) if user is not None else client.client_id,
        "client_id": client.client_id,
        "iat": now,
        "exp": now + int(request.expires_in),
        "jti": str(uuid.uuid4()),
        "scope": " ".join(request.scopes or ()),
    }
    extra = ClientClaims.objects.filter(application=client).first()
    if extra is not None:
        claims["tenant"] = extra.tenant
    token = jwt.JWT(header={"alg": "RS256", "kid": key.thumbprint(), "typ": "JWT"}, claims=claims)
    token.make_signed_token(key)
    return token.serialize()
