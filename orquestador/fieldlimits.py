"""Too many parameters (DATA_UPLOAD_MAX_NUMBER_FIELDS) are the client's mistake, answered here.

Left to Django, `TooManyFieldsSent` is a SuspiciousOperation logged at ERROR with its traceback,
so any client could fill the error log. This middleware parses the query string (and, outside the
API, a posted form) first and answers 400 itself: INVALID_QUERY (or INVALID_BODY for a form) under
/api/ and /internal/, a plain page elsewhere; with one WARNING line saying why, no traceback.
"""

import logging
from collections.abc import Callable

from django.conf import settings
from django.core.exceptions import TooManyFieldsSent, TooManyFilesSent
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils.log import log_response

from . import errors
from .adminpages import FORM_TYPES, plain_page

logger = logging.getLogger(__name__)
SHOWN_PATH_CHARS = 200  # characters of the path the log line carries


class RefuseTooManyFieldsMiddleware:
    """400 for a request with more parameters than Django reads, before anything reads them."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        json = request.path.startswith(errors.JSON_PREFIXES)
        where = None
        try:
            request.GET  # noqa: B018  (parsed here, and kept for every later reader)
        except TooManyFieldsSent:
            where = "query string"
        form = request.method == "POST" and (request.content_type or "").startswith(FORM_TYPES)
        # The API reads JSON bodies only; a form there is refused by its parser, unread.
        if where is None and form and not json:
            try:
                request.POST  # noqa: B018
            except (TooManyFieldsSent, TooManyFilesSent):
                where = "form"
        if where is None:
            return self.get_response(request)
        limit = settings.DATA_UPLOAD_MAX_NUMBER_FIELDS
        detail = f"the {where} has more than {limit} parameters"
        if json:
            code = errors.INVALID_QUERY if where == "query string" else errors.INVALID_BODY
            response: HttpResponse = JsonResponse({"code": code, "detail": detail}, status=400)
        else:
            response = plain_page(
                status=400,
                title=f"Too many parameters in the {where}",
                lines=(
                    f"The request was refused: its {where} has more than {limit} parameters, "
                    "more than any page here sends. Nothing was changed.",
                ),
                link=(request.path, "Open the page without its parameters"),
            )
        # Logged once, by this line: Django's own "Bad Request" line is then left out.
        log_response(
            "request refused: %s %s: %s",
            request.method,
            request.path[:SHOWN_PATH_CHARS],
            detail,
            response=response,
            request=request,
            logger=logger,
            level="warning",
        )
        return response
