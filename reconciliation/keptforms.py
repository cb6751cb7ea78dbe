"""A refused form of the case page, kept across a redirect (post/redirect/get): the address is
the case's own again, a reload does not post again, and the form comes back as the operator
typed it. The post's fields wait in the session under the case's id until that case's page is
next shown (once); the page rebinds them to a fresh form, which says its errors again, and the
refusal's message waits in Django's messages."""

from typing import Any

from django.http import HttpRequest, HttpResponseRedirect, QueryDict
from django.urls import reverse

SESSION_KEY = "reconciliation.refused_form"
NOT_KEPT = ("csrfmiddlewaretoken",)  # a fresh page carries its own token


def keep(request: HttpRequest, execution_id: Any, name: str) -> HttpResponseRedirect:
    """Keep the posted form `name` (a resolution's name, or "decide") for the case's page, and
    send the browser there."""
    request.session[SESSION_KEY] = {
        "case": str(execution_id),
        "name": name,
        "data": {key: values for key, values in request.POST.lists() if key not in NOT_KEPT},
    }
    url = reverse("admin:reconciliation_reconciliationcase_change", args=[execution_id])
    return HttpResponseRedirect(url)


def take(request: HttpRequest, execution_id: Any) -> tuple[str, QueryDict] | None:
    """The form kept for this case, as its name and posted data, once; None when none is."""
    kept = request.session.get(SESSION_KEY)
    if not kept or kept.get("case") != str(execution_id):
        return None  # another case's stays for that case's page
    del request.session[SESSION_KEY]
    data = QueryDict(mutable=True)
    for key, values in kept["data"].items():
        data.setlist(key, values)
    return kept["name"], data
