"""The admin's plain pages, for when it cannot show itself: a request refused for a NUL character,
and the outage page (docs/adr/0011-the-admin-refuses-nul-and-pages-its-outages.md).

Both render `templates/admin/plain_page.html` without the request (no context processor, session,
user or static file), so they need neither the database nor a static manifest, and they show
nothing of the exception; the API keeps its JSON. `RefuseNulMiddleware` answers 400 before any
view runs for a NUL (which PostgreSQL text cannot hold) in the path, any query parameter's name
or value, any posted form field or any cookie of an admin page.
"""

from collections.abc import Callable, Iterable

from django.http import HttpRequest, HttpResponse
from django.template.loader import render_to_string

ADMIN_PREFIX = "/admin/"  # where orquestador/urls.py mounts the admin
SHOWN_NAME_CHARS = 80  # characters of a refused parameter's name shown on the page
FORM_TYPES = ("application/x-www-form-urlencoded", "multipart/form-data")


def is_admin(request: HttpRequest) -> bool:
    return request.path.startswith(ADMIN_PREFIX)


def plain_page(
    *,
    status: int,
    title: str,
    lines: Iterable[str],
    link: tuple[str, str] | None = None,
    refresh: int = 0,
) -> HttpResponse:
    """A self-contained HTML page: a title, a few sentences, a link (address, text), and a
    reload every `refresh` seconds when it is not 0."""
    context = {"status": status, "title": title, "lines": list(lines), "refresh": refresh}
    if link is not None:
        context["link_url"], context["link_text"] = link
    html = render_to_string("admin/plain_page.html", context)
    return HttpResponse(html, status=status, content_type="text/html; charset=utf-8")


def outage_page(request: HttpRequest, *, retry_after: int) -> HttpResponse:
    """503 for the admin while the database cannot be reached; a GET reloads itself."""
    again = request.method == "GET"
    response = plain_page(
        status=503,
        title="The database cannot be reached",
        lines=(
            "The admin cannot read or write anything right now: the database is unavailable "
            "(stopped, restarting, or the connection was lost).",
            "Nothing was changed: anything you submitted was not applied. Submit it again once "
            "the admin is back.",
            f"This page tries again every {retry_after} s."
            if again
            else "Go back and submit again in a few seconds.",
        ),
        link=(request.get_full_path(), "Try again now") if again else None,
        refresh=retry_after if again else 0,
    )
    response["Retry-After"] = str(retry_after)
    return response


def _nul_in(request: HttpRequest) -> str | None:
    """Where the request holds a NUL, in words; None when nowhere."""
    if "\x00" in request.path:
        return "the address"
    if any("\x00" in name or "\x00" in value for name, value in request.COOKIES.items()):
        return "a cookie"  # the session's key is looked up in the database
    fields = [("query parameter", request.GET)]
    content_type = request.content_type or ""
    if request.method == "POST" and content_type.startswith(FORM_TYPES):
        fields.append(("form field", request.POST))
    for kind, data in fields:
        for name, values in data.lists():
            if "\x00" in name or any("\x00" in value for value in values):
                shown = name.replace("\x00", "%00")
                if len(shown) > SHOWN_NAME_CHARS:
                    shown = shown[: SHOWN_NAME_CHARS - 1] + "…"
                return f"the {kind} “{shown}”"
    return None


class RefuseNulMiddleware:
    """400, as a plain page, for an admin request holding a NUL anywhere the database would see."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if is_admin(request):
            where = _nul_in(request)
            if where is not None:
                return plain_page(
                    status=400,
                    title="A NUL character cannot be searched for or filtered on",
                    lines=(
                        f"{where[0].upper()}{where[1:]} holds a NUL character (%00). Nothing "
                        "here can store it or look for it, so the request was refused and "
                        "nothing was changed.",
                        "Remove it and try again.",
                    ),
                    link=None
                    if "\x00" in request.path
                    else (request.path, "Open the page without its parameters"),
                )
        return self.get_response(request)
