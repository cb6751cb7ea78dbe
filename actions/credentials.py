"""Credentials: read from the environment variables a route names, at the moment of each call.

The catalog holds variable names only (`headers_from_env`), so a value never reaches the
catalog, the database, a result or a log line; rotating a credential needs no reload of the file.
"""

import os
from collections.abc import Mapping


class MissingCredential(Exception):
    """A variable named in headers_from_env is not set (it was when the catalog loaded)."""

    def __init__(self, variable: str) -> None:
        self.variable = variable
        super().__init__(f"environment variable {variable} is not set")


def credential_headers(names: Mapping[str, str]) -> dict[str, str]:
    """Header name -> value, read now from the environment variables in `names`."""
    headers = {}
    for header, variable in names.items():
        value = os.environ.get(variable, "")
        if not value:
            raise MissingCredential(variable)
        headers[header] = value
    return headers
