"""The project's PostgreSQL backend for Django (see base.py) and the one call its users make."""

from typing import Any

from django.db import connection


def fixed_cursor() -> Any:
    """A cursor of the default connection for a fixed statement that is the same plan whatever
    its values, bound by the server and prepared on its connection (base.py says when not);
    Django's own cursor under a settings module that names another ENGINE."""
    make = getattr(connection, "fixed_cursor", None)
    return make() if make is not None else connection.cursor()
