"""The WSGI application, as every web server loads it (gunicorn, runserver).

The URLs load here, at start, so a setting they check (a JWT key the API refuses) stops the
server before it answers anything. A process that serves the worker endpoint runs executions with
its database role, so, like `runworker`, it refuses to start unless DATABASE_URL is a restricted
runtime role. Bodies sent chunked are read under the same limit as any other
(orquestador/bodies.py) before Django sees them. Tracing starts here when the OTEL_* variables
ask for it (orquestador/tracing.py): after the settings, before the middleware is built.
"""

import os

import django
from django.core.exceptions import ImproperlyConfigured
from django.core.handlers.wsgi import WSGIHandler

from orquestador import tracing
from orquestador.bodies import ChunkedBodies

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "orquestador.settings")
django.setup(set_prefix=False)  # get_wsgi_application() without its handler, yet
try:
    tracing.setup(service="orquestador-web")
except tracing.TracingConfigError as exc:
    raise ImproperlyConfigured(str(exc)) from None
application = ChunkedBodies(WSGIHandler())


def _check_endpoint_role() -> None:
    from django.conf import settings
    from django.core.exceptions import ImproperlyConfigured
    from django.db import connection

    from orquestador.dbroles import restricted_role_message, unrestricted_reasons

    if not settings.WORKER_ENDPOINT_ENABLED or settings.USING_MIGRATION_ROLE:
        return
    try:
        reasons = unrestricted_reasons(connection=connection)
    finally:
        connection.close()  # never hand a connection opened here to a forked worker
    if reasons:
        raise ImproperlyConfigured(
            "WORKER_ENDPOINT_ENABLED is true: " + restricted_role_message(reasons)
        )


def _load_urls() -> None:
    from django.urls import get_resolver

    get_resolver().url_patterns  # noqa: B018  (imports every URL module and its checks)


_load_urls()
_check_endpoint_role()
