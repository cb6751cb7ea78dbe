"""What an error report may show: Django's debug page and error e-mails, whatever DEBUG says
(docs/operations.md#error-pages).

This filter masks the credentials of every URL-shaped value (`scheme://user:password@host`
becomes `scheme://********@host`) in settings (any `*_URL`), META and traceback variables; hides
every META entry copied from the process environment (only the request's own CGI and HTTP
entries show; HTTP_AUTHORIZATION and cookies stay masked as Django does); and masks any variable
or setting whose name looks secret (KEY, TOKEN, SECRET, PASS, CREDENTIAL, DSN, ...).
"""

import os
import re
from collections.abc import ItemsView
from typing import Any

from django.template.defaultfilters import pprint
from django.views.debug import SafeExceptionReporterFilter

# user:password@ in any URL-shaped text, e.g. postgres://owner:s3cret@db:5432/app
_URL_CREDENTIALS = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^/@\s]*)@")
# What a request's own META holds besides the process environment (PEP 3333, CGI).
_REQUEST_META = re.compile(
    r"^(HTTP_.*|CONTENT_TYPE|CONTENT_LENGTH|PATH_INFO|QUERY_STRING|REMOTE_ADDR|REMOTE_HOST|"
    r"REMOTE_USER|REQUEST_METHOD|SCRIPT_NAME|SERVER_NAME|SERVER_PORT|SERVER_PROTOCOL|"
    r"SERVER_SOFTWARE|GATEWAY_INTERFACE|RAW_URI|CSRF_COOKIE|wsgi\..*|gunicorn\..*)$"
)
_HIDDEN_NAMES = re.compile(
    r"API|AUTH|TOKEN|KEY|SECRET|PASS|SIGNATURE|HTTP_COOKIE|CREDENTIAL|DSN",
    flags=re.IGNORECASE,
)


def mask_url_credentials(text: str) -> str:
    """`postgres://user:pw@host/db` -> `postgres://********@host/db` (any scheme, anywhere)."""
    return _URL_CREDENTIALS.sub(
        lambda m: f"{m['scheme']}{SafeExceptionReporterFilter.cleansed_substitute}@", text
    )


class SecretMaskingFilter(SafeExceptionReporterFilter):
    hidden_settings = _HIDDEN_NAMES

    def cleanse_setting(self, key: Any, value: Any) -> Any:
        cleansed = super().cleanse_setting(key, value)
        return _masked(cleansed)

    def get_safe_request_meta(self, request: Any) -> dict[str, Any]:
        if not hasattr(request, "META"):
            return {}
        environment = set(os.environ)
        safe: dict[str, Any] = {}
        for name, value in request.META.items():
            if name in environment and not _REQUEST_META.match(name):
                safe[name] = self.cleansed_substitute
            else:
                safe[name] = self.cleanse_setting(name, value)
        return safe

    def get_traceback_frame_variables(self, request: Any, tb_frame: Any) -> ItemsView[str, Any]:
        variables = super().get_traceback_frame_variables(request, tb_frame)
        return {
            name: self.cleansed_substitute if _HIDDEN_NAMES.search(name) else _shown(value)
            for name, value in variables
        }.items()


class _Shown:
    """A value as the debug page prints it (its pprint), with URL credentials masked."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text


def _shown(value: Any) -> Any:
    if isinstance(value, str | int | float | bool | type(None)):
        return _masked(value)
    return _Shown(mask_url_credentials(pprint(value)))


def _masked(value: Any) -> Any:
    """Mask URL credentials in text, and in the items of plain containers of text."""
    if isinstance(value, str):
        return mask_url_credentials(value)
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {k: _masked(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_masked(v) for v in value)
    return value
