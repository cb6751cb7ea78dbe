"""The route limits in `GET /metrics` (executions/metrics/views.py): one sample per limited or
paused route, labelled with its `capability@version` (never a tenant, an id or a secret)."""

from collections.abc import Callable

from orquestador.exposition import Family, Sample

from ..queue.limits import RouteStats


def route_families(routes: list[RouteStats]) -> list[Family]:
    """The metric families of the limited and paused routes: declared on every scrape (with
    no sample while no route is limited or paused), so dashboards and rules can name them."""

    def family(name: str, help_text: str, value: Callable[[RouteStats], float]) -> Family:
        samples = [Sample(float(value(r)), (("route", r.route),)) for r in routes]
        return Family(name, "gauge", help_text, samples)

    return [
        family(
            "orquestador_route_in_flight",
            "Calls of the route in progress now, across every worker (held under live leases).",
            lambda r: r.in_flight,
        ),
        family(
            "orquestador_route_max_in_flight",
            "The route's max_in_flight (0 when it has none).",
            lambda r: r.max_in_flight or 0,
        ),
        family(
            "orquestador_route_window_calls",
            "Calls of the route started in its rate_limit's window until now (the last second "
            "for a route without one).",
            lambda r: r.window_calls,
        ),
        family(
            "orquestador_route_parked",
            "Executions parked by the route's limits or pause, waiting for their next call.",
            lambda r: r.parked,
        ),
        family(
            "orquestador_route_paused_until_seconds",
            "When the route's pause ends, in Unix seconds (0 when it is not paused).",
            lambda r: r.paused_until.timestamp() if r.paused_until is not None else 0,
        ),
    ]
