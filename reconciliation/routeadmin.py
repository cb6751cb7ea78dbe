"""The routes on the admin's Workers page, one row each (a route: the calls of one
capability@version, from every worker): its limits, calls in flight and in its current window,
parked executions, whether it is paused, until when, by whom and why; on each row a pause (for
how long, and why) and a resume.

One POST-only view at `route/`, CSRF-protected by the admin site, for users with
`reconciliation.pause_route`; the pause and resume are recorded in route_event with the
operator's name and reason (executions/queue/limits.py). A refusal returns to the page with a
message.
"""

import datetime
from dataclasses import dataclass
from typing import Any

from django import forms
from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.db import connection
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.urls import URLPattern, path, reverse
from django.utils import timezone

from actions.registry import get_registry
from executions.queue.limits import RouteStats, route_operator_pause, route_stats

from .permissions import PAUSE_ROUTE

MAX_PAUSE_MINUTES = 7 * 24 * 60  # minutes: an operator's pause lasts at most a week
ROUTE_CHOICES_LIMIT = 500  # routes offered at most


class RoutePauseForm(forms.Form):
    """A row's pause (how long and why, both required) or resume (nothing more asked)."""

    route = forms.CharField(max_length=220)
    action = forms.ChoiceField(choices=[("pause", "pause"), ("resume", "resume")])
    minutes = forms.IntegerField(min_value=1, max_value=MAX_PAUSE_MINUTES, required=False)
    reason = forms.CharField(max_length=500, strip=True, required=False)

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if data.get("action") == "pause":
            if not data.get("minutes"):
                self.add_error("minutes", "How long to pause, in minutes.")
            if not data.get("reason"):
                self.add_error("reason", "Why it is paused: it is shown on the page and kept.")
        if data.get("route") and data["route"] not in known_routes():
            self.add_error("route", "Not a route of INTEGRATIONS_FILE.")
        return data


@dataclass(frozen=True)
class RouteRow:
    """One route as its row on the Workers page shows it; `stats` None when it has neither
    limits nor a pause (its calls are not counted then)."""

    route: str
    max_in_flight: int | None
    rate_limit: str | None
    stats: RouteStats | None


def route_rows(stats: list[RouteStats]) -> list[RouteRow]:
    """Every route of the catalog and every route with limits or a pause, by name: the limits
    as the workers declared them, else as the catalog gives them."""
    declared = {s.route: s for s in stats}
    configured = {r.key: r.limits for r in get_registry().routes()[:ROUTE_CHOICES_LIMIT]}
    rows = []
    for name in sorted(declared.keys() | configured.keys()):
        found = declared.get(name)
        limits = configured.get(name)
        if found is not None:
            rows.append(RouteRow(name, found.max_in_flight, found.rate_limit, found))
        else:
            rows.append(
                RouteRow(
                    name,
                    limits.max_in_flight if limits else None,
                    limits.rate_limit if limits else None,
                    None,
                )
            )
    return rows


def known_routes() -> set[str]:
    """The routes an operator may pause: the catalog's, and any with limits or a pause."""
    with connection.cursor() as cursor:
        stats = route_stats(cursor)
    return set(get_registry().keys()[:ROUTE_CHOICES_LIMIT]) | {s.route for s in stats}


class RouteControls:
    """WorkerProcessAdmin's route panel and its pause/resume view (a ModelAdmin mixin)."""

    opts: Any
    admin_site: Any

    def get_urls(self) -> list[URLPattern]:
        info = self.opts.app_label, self.opts.model_name
        return [
            path(
                "route/",
                self.admin_site.admin_view(self.route_view),
                name="{}_{}_route".format(*info),
            ),
            *super().get_urls(),  # type: ignore[misc]
        ]

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        with connection.cursor() as cursor:
            routes = route_rows(route_stats(cursor))
        context = {
            **(extra_context or {}),
            "routes": routes,
            "may_pause_routes": request.user.has_perm(PAUSE_ROUTE),
            "route_form_url": reverse(f"admin:{self.opts.app_label}_{self.opts.model_name}_route"),
            "max_pause_minutes": MAX_PAUSE_MINUTES,
        }
        return super().changelist_view(request, context)  # type: ignore[misc]

    def route_view(self, request: HttpRequest) -> HttpResponse:
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        if not request.user.has_perm(PAUSE_ROUTE):
            raise PermissionDenied
        back = HttpResponseRedirect(
            reverse(f"admin:{self.opts.app_label}_{self.opts.model_name}_changelist")
        )
        form = RoutePauseForm(request.POST)
        if not form.is_valid():
            problems = "; ".join(
                f"{name}: {' '.join(str(m) for m in errors)}"
                for name, errors in form.errors.items()
            )
            messages.error(request, f"Nothing changed. {problems}")
            return back
        data = form.cleaned_data
        until = None
        if data["action"] == "pause":
            until = timezone.now() + datetime.timedelta(minutes=data["minutes"])
        route_operator_pause(
            route=data["route"],
            until=until,
            actor=f"admin:{request.user.get_username()}",
            reason=data["reason"] or "",
        )
        if until is None:
            messages.success(request, f"Route {data['route']} resumed.")
        else:
            messages.success(
                request, f"Route {data['route']} paused until {until:%Y-%m-%d %H:%M:%S} UTC."
            )
        return back
