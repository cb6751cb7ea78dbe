"""Settings, read from the environment (django-environ; a `.env` file is read when present).

Secrets have no defaults: a missing one stops the process at start with its name.
`.env.example` lists every variable with its default and what it does.
"""

import sys
from pathlib import Path

import environ

from orquestador import bearer, oidcconfig
from orquestador.workerconfig import ENV_DEFAULTS as worker_defaults
from orquestador.workerconfig import WorkerConfigError, database_pooler

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env()
environ.Env.read_env(BASE_DIR / ".env", overwrite=False)


def _required(name: str) -> str:
    value = env.str(name, default="")
    if not value:
        raise environ.ImproperlyConfigured(
            f"{name} is required and not set; see .env.example for what it does."
        )
    return value


FLAG_WORDS = {"true": True, "1": True, "yes": True, "on": True}
FLAG_WORDS |= {"false": False, "0": False, "no": False, "off": False, "": False}


def _flag(name: str, *, default: bool) -> bool:
    """A true/false variable; anything else stops the start with its name, not a silent false."""
    raw = env.str(name, default="true" if default else "false")
    value = FLAG_WORDS.get(raw.strip().lower())
    if value is None:
        raise environ.ImproperlyConfigured(
            f"{name} must be true or false (got {raw[:20]!r}); see .env.example."
        )
    return value


# ------------------------------------------------------------------------------
# Core
# ------------------------------------------------------------------------------
SECRET_KEY = _required("SECRET_KEY")
DEBUG = _flag("DEBUG", default=False)
ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["localhost", "127.0.0.1"])
# A wildcard would let any Host header through to the host-dependent parts of Django (password
# reset links, absolute URLs); name the hosts instead.
if not ALLOWED_HOSTS or any(host.strip() in ("*", ".") for host in ALLOWED_HOSTS):
    raise environ.ImproperlyConfigured(
        "ALLOWED_HOSTS must name the host names this server answers to (comma-separated); a "
        "wildcard or an empty list is refused (see .env.example)."
    )
# Error pages and error reports (the debug page too, if DEBUG is ever turned on) mask secrets:
# passwords inside *_URL values and the process environment (orquestador/errorreports.py).
DEFAULT_EXCEPTION_REPORTER_FILTER = "orquestador.errorreports.SecretMaskingFilter"

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "orquestador",
    "executions",
    "actions",
    "reconciliation",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # Outside every middleware that answers a page itself, so those pages carry it too.
    "orquestador.csp.ContentSecurityPolicyMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    # More parameters than Django reads: a 400 and a WARNING, before anything reads them.
    "orquestador.fieldlimits.RefuseTooManyFieldsMiddleware",
    # An admin request holding a NUL is refused here, before anything reads the database.
    "orquestador.adminpages.RefuseNulMiddleware",
    # Outermost of those that can meet the database: its process_exception runs last.
    "orquestador.database.DatabaseUnavailableMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    # A provider's session is checked again when its ID token's renewal time has passed.
    "orquestador.signin.SessionRefresh",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "orquestador.urls"
WSGI_APPLICATION = "orquestador.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "orquestador.signin.login_options",
            ],
        },
    },
]

# ------------------------------------------------------------------------------
# Database: two roles (docs/operations.md#two-database-roles)
# ------------------------------------------------------------------------------
# DATABASE_URL is the restricted runtime role (DML only). MIGRATION_DATABASE_URL owns the schema
# and is used only by the commands below; every other command runs as the runtime role.
MIGRATION_COMMANDS = frozenset({"migrate", "grantruntime"})
DATABASE_URL = _required("DATABASE_URL")
MIGRATION_DATABASE_URL = env.str("MIGRATION_DATABASE_URL", default="")

_command = sys.argv[1] if len(sys.argv) > 1 and Path(sys.argv[0]).name == "manage.py" else ""
USING_MIGRATION_ROLE = bool(MIGRATION_DATABASE_URL) and _command in MIGRATION_COMMANDS

DATABASES = {
    "default": env.db_url_config(MIGRATION_DATABASE_URL if USING_MIGRATION_ROLE else DATABASE_URL),
}
# Django's, with the fixed statements bound and prepared by the server
# (orquestador/postgresql/base.py).
DATABASES["default"]["ENGINE"] = "orquestador.postgresql"
DATABASES["default"]["CONN_MAX_AGE"] = env.int("DATABASE_CONN_MAX_AGE", default=60)  # seconds
DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
# A database that does not answer fails a request in this long instead of holding it (a URL's own
# ?connect_timeout= wins).
DATABASE_CONNECT_TIMEOUT = 5  # seconds
DATABASES["default"].setdefault("OPTIONS", {}).setdefault(
    "connect_timeout", DATABASE_CONNECT_TIMEOUT
)
# Behind a transaction pooler (DATABASE_POOLER=transaction: PgBouncer with pool_mode=transaction)
# consecutive transactions of one connection may run on different server sessions, so nothing
# may rely on session state: no server-side cursors, no prepared statements. Empty: a direct
# connection (or a session pooler), and nothing changes. executions/worker/pooling.py says more.
try:
    DATABASE_POOLER = database_pooler(env.str("DATABASE_POOLER", default=""))
except WorkerConfigError as exc:
    raise environ.ImproperlyConfigured(str(exc)) from None
if DATABASE_POOLER == "transaction":
    DATABASES["default"]["DISABLE_SERVER_SIDE_CURSORS"] = True
    DATABASES["default"].setdefault("OPTIONS", {})["prepare_threshold"] = None
# The role that grantruntime grants to: always the user named in DATABASE_URL.
RUNTIME_DATABASE_USER = env.db_url_config(DATABASE_URL)["USER"]

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# ------------------------------------------------------------------------------
# Authentication, i18n, static
# ------------------------------------------------------------------------------
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

# Operators sign in with OpenID Connect when ADMIN_OIDC_ISSUER_URL is set (orquestador/signin.py,
# docs/operations.md#single-sign-on); ADMIN_PASSWORD_LOGIN=false leaves the provider the only way.
try:
    ADMIN_SIGN_IN = oidcconfig.admin_sign_in(
        issuer=env.str("ADMIN_OIDC_ISSUER_URL", default=""),
        client_id=env.str("ADMIN_OIDC_CLIENT_ID", default=""),
        client_secret=env.str("ADMIN_OIDC_CLIENT_SECRET", default=""),
        groups_claim=env.str("ADMIN_OIDC_GROUPS_CLAIM", default="groups"),
        group_map=env.str("ADMIN_OIDC_GROUP_MAP", default=""),
        password_login=_flag("ADMIN_PASSWORD_LOGIN", default=True),
    )
except oidcconfig.OidcConfigError as exc:
    raise environ.ImproperlyConfigured(f"{exc}; see .env.example.") from None
# The provider's backend is always listed (it authenticates nothing unless the provider's callback
# calls it); Django's password check only while password sign-in is on.
AUTHENTICATION_BACKENDS = [
    *(["django.contrib.auth.backends.ModelBackend"] if ADMIN_SIGN_IN.password_login else []),
    "orquestador.signin.ProviderBackend",
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
# Dates and times shown in the admin: UTC to the second, everywhere (orquestador/formats/).
FORMAT_MODULE_PATH = ["orquestador.formats"]
# The two-person rule: a replay of a non-idempotent write is proposed by one operator and applied
# only when another approves it (reconciliation/approvals.py); the automatic prober never replays
# a write on its own (RECONCILIATION.md#two-person-rule).
RECONCILIATION_TWO_PERSON = _flag("RECONCILIATION_TWO_PERSON", default=False)
USE_I18N = True
USE_TZ = True
STATIC_URL = "static/"
# Static files (the admin's) are served by the application itself (whitenoise), straight from the
# installed apps, so every server and `scripts/start` show a styled admin without a collect step.
# STATIC_ROOT (unset by default) is only where `collectstatic` writes, for a front proxy to serve.
STATIC_ROOT = env.str("STATIC_ROOT", default="") or None
WHITENOISE_USE_FINDERS = True
WHITENOISE_AUTOREFRESH = False

# ------------------------------------------------------------------------------
# TLS (deployment choices, off by default so plain-HTTP loopback setups keep working)
# ------------------------------------------------------------------------------
# Behind a TLS-terminating proxy that sets X-Forwarded-Proto, trust it for request.is_secure().
if _flag("SECURE_PROXY_SSL_HEADER", default=False):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SECURE_SSL_REDIRECT = _flag("SECURE_SSL_REDIRECT", default=False)
SESSION_COOKIE_SECURE = _flag("SESSION_COOKIE_SECURE", default=False)
CSRF_COOKIE_SECURE = _flag("CSRF_COOKIE_SECURE", default=False)
SECURE_HSTS_SECONDS = env.int("SECURE_HSTS_SECONDS", default=0)  # seconds; 0: no HSTS header
SECURE_HSTS_INCLUDE_SUBDOMAINS = _flag("SECURE_HSTS_INCLUDE_SUBDOMAINS", default=False)
SECURE_HSTS_PRELOAD = _flag("SECURE_HSTS_PRELOAD", default=False)
CSRF_TRUSTED_ORIGINS = env.list("CSRF_TRUSTED_ORIGINS", default=[])
# Probes answer over plain HTTP even when everything else is redirected to https.
SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$"]

# ------------------------------------------------------------------------------
# Feature switches (docs/worker-protocol.md, docs/api.md, docs/operations.md)
# ------------------------------------------------------------------------------
REQUEST_API_ENABLED = _flag("REQUEST_API_ENABLED", default=False)
FLOW_ADMIN_ENABLED = _flag("FLOW_ADMIN_ENABLED", default=False)
SIMULATION_MODE = _flag("SIMULATION_MODE", default=False)
INTEGRATIONS_FILE = env.str("INTEGRATIONS_FILE", default="")

# JWT (docs/api.md#authentication-and-scopes): validated locally; HS256 with JWT_SECRET,
# RS256/ES256 with JWT_PUBLIC_KEY, or the identity provider's keys from JWT_JWKS_URL.
JWT_SECRET = env.str("JWT_SECRET", default="")
JWT_PUBLIC_KEY = env.str("JWT_PUBLIC_KEY", default="").replace("\\n", "\n")
JWT_JWKS_URL = env.str("JWT_JWKS_URL", default="")
JWT_JWKS_CACHE_SECONDS = env.int("JWT_JWKS_CACHE_SECONDS", default=300)  # seconds
JWT_ISSUER = env.str("JWT_ISSUER", default="orquestador")
JWT_AUDIENCE = env.str("JWT_AUDIENCE", default="orquestador-api")
JWT_TENANT_CLAIM = env.str("JWT_TENANT_CLAIM", default="tenant")
JWT_SCOPE_CLAIM = env.str("JWT_SCOPE_CLAIM", default="scope")  # several: comma-separated
# The API must not start unable to authenticate anyone (orquestador/auth.py checks the key itself).
if (REQUEST_API_ENABLED or FLOW_ADMIN_ENABLED) and not (
    JWT_SECRET or JWT_PUBLIC_KEY or JWT_JWKS_URL
):
    raise environ.ImproperlyConfigured(
        "REQUEST_API_ENABLED or FLOW_ADMIN_ENABLED is true, but none of JWT_SECRET (HS256), "
        "JWT_PUBLIC_KEY (RS256/ES256) and JWT_JWKS_URL (the identity provider's keys) is set; "
        "set one of them (see .env.example)."
    )
if JWT_JWKS_URL:
    if JWT_SECRET or JWT_PUBLIC_KEY:
        raise environ.ImproperlyConfigured(
            "JWT_JWKS_URL is set, and so is JWT_SECRET or JWT_PUBLIC_KEY: the keys come from the "
            "identity provider or from the settings, not both; unset one."
        )
    if _problem := oidcconfig.url_problem("JWT_JWKS_URL", JWT_JWKS_URL, query=True):
        raise environ.ImproperlyConfigured(_problem)
    if JWT_JWKS_CACHE_SECONDS < 1:
        raise environ.ImproperlyConfigured("JWT_JWKS_CACHE_SECONDS must be at least 1 (seconds).")

# Worker (docs/worker-protocol.md#configuration). Raw strings here; their defaults and their
# validation (once, at start, with messages that name the variable) live in
# orquestador/workerconfig.py.
WORKER_ENV = {name: env.str(name, default=default) for name, default in worker_defaults.items()}

# The crash-point hook (executions/queue/faultpoints.py) is for the test suite's crash-point matrix
# and never runs in production: no environment variable reads this; only settings_test.py sets it.
FAULT_POINTS_ENABLED = False

# The worker endpoint (executions/worker/endpoint.py), mounted at /internal/worker/ only when
# enabled. It runs principal-less packages as the system identity, so it never starts without its
# token; `WORKER_RUNTIME=remote` presents the same token.
WORKER_ENDPOINT_ENABLED = _flag("WORKER_ENDPOINT_ENABLED", default=False)
WORKER_ENDPOINT_TOKEN = env.str("WORKER_ENDPOINT_TOKEN", default="")
if WORKER_ENDPOINT_ENABLED and not WORKER_ENDPOINT_TOKEN:
    raise environ.ImproperlyConfigured(
        "WORKER_ENDPOINT_ENABLED is true, but WORKER_ENDPOINT_TOKEN is not set; the worker "
        "endpoint runs packages as the system identity and admits only callers presenting that "
        f"token (at least {bearer.MIN_TOKEN_LENGTH} characters, see .env.example)."
    )
if WORKER_ENDPOINT_TOKEN and (
    _problem := bearer.token_problem("WORKER_ENDPOINT_TOKEN", WORKER_ENDPOINT_TOKEN)
):
    raise environ.ImproperlyConfigured(f"{_problem} (see .env.example).")

# Metrics (docs/operations.md#metrics): GET /metrics and the worker's endpoint ask for this bearer
# token when set.
METRICS_TOKEN = env.str("METRICS_TOKEN", default="")
if METRICS_TOKEN and (_problem := bearer.token_problem("METRICS_TOKEN", METRICS_TOKEN)):
    raise environ.ImproperlyConfigured(
        f"{_problem}, or empty to leave the metrics endpoints open (see .env.example)."
    )

# Webhooks (docs/api.md#webhooks). Targets are https:// and public unless the two switches say
# otherwise: they exist for tests on loopback receivers, never for production.
WEBHOOK_ALLOW_HTTP = _flag("WEBHOOK_ALLOW_HTTP", default=False)
WEBHOOK_ALLOW_PRIVATE_NETWORKS = _flag("WEBHOOK_ALLOW_PRIVATE_NETWORKS", default=False)
WEBHOOK_TIMEOUT_SECONDS = env.float("WEBHOOK_TIMEOUT_SECONDS", default=10.0)  # seconds
WEBHOOK_MAX_AGE_HOURS = env.float("WEBHOOK_MAX_AGE_HOURS", default=24.0)  # hours
WEBHOOK_SECRET_OVERLAP_HOURS = env.float("WEBHOOK_SECRET_OVERLAP_HOURS", default=24.0)  # hours
# The first retry's ceiling; each later one doubles it (full jitter), up to an hour.
WEBHOOK_RETRY_BASE_SECONDS = env.float("WEBHOOK_RETRY_BASE_SECONDS", default=5.0)  # seconds
for _name, _value in (
    ("WEBHOOK_TIMEOUT_SECONDS", WEBHOOK_TIMEOUT_SECONDS),
    ("WEBHOOK_MAX_AGE_HOURS", WEBHOOK_MAX_AGE_HOURS),
    ("WEBHOOK_SECRET_OVERLAP_HOURS", WEBHOOK_SECRET_OVERLAP_HOURS),
    ("WEBHOOK_RETRY_BASE_SECONDS", WEBHOOK_RETRY_BASE_SECONDS),
):
    if not 0 < _value <= 10_000:
        raise environ.ImproperlyConfigured(
            f"{_name} must be a number above 0 and at most 10000 (got {_value}); see .env.example."
        )

# ------------------------------------------------------------------------------
# REST framework
# ------------------------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [],
    "DEFAULT_PERMISSION_CLASSES": [],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["rest_framework.parsers.JSONParser"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "UNAUTHENTICATED_USER": None,
    "EXCEPTION_HANDLER": "orquestador.api_errors.exception_handler",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "orquestador API",
    "DESCRIPTION": "Submit transitions on requests and poll their executions.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "executions.api.schema.strict_request_bodies",
        "executions.api.schema.optional_view_fields",
    ],
}

# ------------------------------------------------------------------------------
# Logging: one JSON object per line (orquestador/jsonlog.py)
# ------------------------------------------------------------------------------
LOG_LEVEL = env.str("LOG_LEVEL", default="INFO")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"json": {"()": "orquestador.jsonlog.JsonFormatter"}},
    "handlers": {"stderr": {"class": "orquestador.jsonlog.LineHandler", "formatter": "json"}},
    "root": {"handlers": ["stderr"], "level": LOG_LEVEL},
    "loggers": {"django.db.backends": {"level": "WARNING"}},
}
