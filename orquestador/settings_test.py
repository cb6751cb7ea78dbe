"""Settings for the test suite.

The suite drives the schema as the migration role (pytest-django creates, migrates and flushes the
test database with it). What the runtime role may and may not do is tested through connections
made with DATABASE_URL's credentials against the test database, and through real `runworker` and
web processes, which run as the runtime role exactly as in production.
"""

from .settings import *  # noqa: F403
from .settings import DATABASES, MIGRATION_DATABASE_URL, env

if not MIGRATION_DATABASE_URL:
    raise environ.ImproperlyConfigured(  # noqa: F405
        "MIGRATION_DATABASE_URL is required by the test suite; run the README's test command."
    )

# The suite drives the schema as the migration role. A real process that a test starts with these
# settings (to arm a crash point) says TEST_SETTINGS_ROLE=runtime and keeps the production role.
if env.str("TEST_SETTINGS_ROLE", default="migration") != "runtime":
    DATABASES["default"] = {
        **env.db_url_config(MIGRATION_DATABASE_URL),
        "ENGINE": "orquestador.postgresql",
        "CONN_MAX_AGE": 0,
    }
# The crash points of executions/queue/faultpoints.py may be armed (ORQUESTADOR_FAULT_POINT) only
# here.
FAULT_POINTS_ENABLED = True
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
