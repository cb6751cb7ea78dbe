"""The project's PostgreSQL backend for Django (see base.py) and the one call its users make."""

from typing import Any

from django.db import connection


def fixed_cursor(*, prepare: bool = False) -> Any:
    """A cursor of the default connection for a fixed statement, prepared on its connection if
    `prepare` (base.py says how it differs); Django's own cursor under a settings module that
    names another ENGINE."""
    make = getattr(connection, "fixed_cursor", None)
    return make(prepare=prepare) if make is not None else connection.cursor()
