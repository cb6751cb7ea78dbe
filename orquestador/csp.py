"""A Content-Security-Policy on every answer (the admin's pages, its pictures and plain pages
included), as Django 5.2 has none of its own: scripts only from this origin, never inline.

Styles allow 'unsafe-inline': the pictures carry per-request style sheets inside their SVG and a
few pages a style attribute, which no nonce can cover, and a style runs no script. What is drawn
is made and escaped on the server (executions/pictures/svgsafety.py), so a style cannot be
injected through flow text either.
"""

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse

HEADER = "Content-Security-Policy"
POLICY = "; ".join(
    (
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self' 'unsafe-inline'",
        "img-src 'self'",
        "object-src 'none'",
        "base-uri 'none'",
        "form-action 'self'",
        "frame-ancestors 'none'",  # as X-Frame-Options: DENY says, for browsers that read this
    )
)


class ContentSecurityPolicyMiddleware:
    """Sets POLICY on every response that has no policy of its own."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        response.headers.setdefault(HEADER, POLICY)
        return response
