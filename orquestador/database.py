"""What the web process answers while PostgreSQL cannot be reached
(docs/api.md#when-the-database-is-down).

`DatabaseUnavailableMiddleware`, and the 500 handler for an error raised outside a view, turn a
connection-level failure (no SQLSTATE, class 08, the server shutting down or starting up) into
`503 {"code": "DATABASE_UNAVAILABLE", "detail"}` with a Retry-After, an HTML page under the admin
(orquestador/adminpages.py); any other database error stays a 500. Nothing was written: every
write is one transaction. `/healthz` never touches the database; `/readyz` says why with
`reason()`. The warning is logged at most once per `LOG_EVERY_SECONDS`.
"""

import logging
import threading
import time
from collections.abc import Callable

import psycopg
from django import db
from django.http import HttpRequest, HttpResponse, JsonResponse

from . import adminpages, errors

logger = logging.getLogger("orquestador.database")

RETRY_AFTER_SECONDS = 5  # seconds a client is told to wait before it retries
LOG_EVERY_SECONDS = 30.0  # seconds between two warnings of the same outage

# SQLSTATEs that mean the server is not there for us (besides class 08, connection exception).
_UNAVAILABLE_STATES = {
    "57P01": "the server is shutting down",  # admin_shutdown (also pg_terminate_backend)
    "57P02": "the server crashed and is restarting",  # crash_shutdown
    "57P03": "the server is starting up or shutting down",  # cannot_connect_now
}

_last_logged = 0.0
_log_lock = threading.Lock()


def _cause(exc: BaseException) -> BaseException:
    """The driver's exception under Django's wrapper (Django chains it as the cause)."""
    return exc.__cause__ if isinstance(exc, db.Error) and exc.__cause__ is not None else exc


def is_unavailable(exc: BaseException) -> bool:
    """Whether `exc` says the database cannot be reached (rather than a query went wrong)."""
    cause = _cause(exc)
    if isinstance(cause, psycopg.InterfaceError | db.InterfaceError):
        return True  # the connection is closed or broken
    if not isinstance(cause, psycopg.OperationalError):
        return False
    state = cause.sqlstate
    return state is None or state.startswith("08") or state in _UNAVAILABLE_STATES


def reason(exc: BaseException) -> str:
    """Why, in words safe for any caller: no host, port, role or server message."""
    cause = _cause(exc)
    state = getattr(cause, "sqlstate", None)
    if state in _UNAVAILABLE_STATES:
        return _UNAVAILABLE_STATES[state]
    if isinstance(cause, psycopg.InterfaceError | db.InterfaceError):
        return "the connection to the database is closed"
    if state is None or state.startswith("08"):
        return "cannot connect to the database, or the connection was lost"
    if state.startswith("28"):
        return "the database refused the configured credentials"
    return f"database error {type(cause).__name__}"


def note_outage(exc: BaseException) -> None:
    """Log the outage: once, then at most every LOG_EVERY_SECONDS while it lasts."""
    global _last_logged
    now = time.monotonic()
    with _log_lock:
        if _last_logged and now - _last_logged < LOG_EVERY_SECONDS:
            return
        _last_logged = now
    logger.warning("database unavailable: %s", reason(exc))


def unavailable_response(exc: BaseException, request: HttpRequest | None = None) -> HttpResponse:
    """The 503: JSON, or the outage page for an admin `request`."""
    note_outage(exc)
    if request is not None and adminpages.is_admin(request):
        return adminpages.outage_page(request, retry_after=RETRY_AFTER_SECONDS)
    response = JsonResponse(
        {
            "code": errors.DATABASE_UNAVAILABLE,
            "detail": "the database cannot be reached right now; nothing was changed, retry later",
        },
        status=503,
    )
    response["Retry-After"] = str(RETRY_AFTER_SECONDS)
    return response


class DatabaseUnavailableMiddleware:
    """Answers 503 DATABASE_UNAVAILABLE for a view that could not reach the database."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if is_unavailable(exception):
            return unavailable_response(exception, request)
        return None
