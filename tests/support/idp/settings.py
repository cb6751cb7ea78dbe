"""Settings of the test identity provider: django-oauth-toolkit with OpenID Connect, as companies
run it, on its own sqlite database under IDP_DIR. Its RSA keys are files there: `active.pem`
signs, each `inactive-*.pem` is still published in the JWKS (a rotation, tests/support/idp)."""

import os
from pathlib import Path

IDP_DIR = Path(os.environ["IDP_DIR"])
ISSUER = os.environ["IDP_ISSUER"]  # http://127.0.0.1:PORT/o

SECRET_KEY = os.environ["IDP_SECRET_KEY"]
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1"]
ROOT_URLCONF = "tests.support.idp.urls"
WSGI_APPLICATION = "tests.support.idp.wsgi.application"
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "oauth2_provider",
    "tests.support.idp",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [Path(__file__).parent / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": IDP_DIR / "idp.sqlite3"}}
LOGIN_URL = "/accounts/login/"
# Cookies are per host, not per port: the admin under test is on 127.0.0.1 too.
SESSION_COOKIE_NAME = "idp_sessionid"
CSRF_COOKIE_NAME = "idp_csrftoken"
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"stderr": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["stderr"], "level": "WARNING"},
}

# The API's permissions, which a client may be given, and the sign-in's.
SCOPES = {
    "openid": "OpenID Connect",
    "email": "e-mail address",
    "profile": "profile",
    "requests:read": "read requests",
    "requests:write": "submit transitions",
}
OAUTH2_PROVIDER = {
    "OIDC_ENABLED": True,
    "OIDC_ISS_ENDPOINT": ISSUER,
    "OIDC_RSA_PRIVATE_KEY": (IDP_DIR / "active.pem").read_text(),
    "OIDC_RSA_PRIVATE_KEYS_INACTIVE": [
        path.read_text() for path in sorted(IDP_DIR.glob("inactive-*.pem"))
    ],
    "PKCE_REQUIRED": True,
    "SCOPES": SCOPES,
    "DEFAULT_SCOPES": ["openid"],
    "OAUTH2_VALIDATOR_CLASS": "tests.support.idp.claims.Validator",
    # API tokens as JWTs signed with the active key (DOT's own are opaque): claims.access_token.
    "ACCESS_TOKEN_GENERATOR": "tests.support.idp.claims.access_token",
    "REFRESH_TOKEN_GENERATOR": "oauthlib.oauth2.rfc6749.tokens.random_token_generator",
    "ACCESS_TOKEN_EXPIRE_SECONDS": 600,
}
