"""`GET /metrics`: the queue as Prometheus gauges, read from the database at each scrape
(docs/operations.md#metrics, docs/adr/0005-metrics-without-a-client-library.md).

Always on, like /healthz. Counts and ages only, never an id, owner, tenant or secret; no
executions by final status (that would scan finished history: each worker counts its own).
When METRICS_TOKEN is set a scrape presents it as `Authorization: Bearer <token>`, as for the
worker's endpoint. When the database cannot be read the answer is still 200, with
`orquestador_database_up 0` and no queue gauges, so an alert tells "database unreadable" from
"web process down".
"""

import logging
import time

from django.conf import settings
from django.db import DatabaseError, connection, transaction
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.http import require_GET

from orquestador.bearer import metrics_token_matches
from orquestador.exposition import CONTENT_TYPE, Family, Sample, render

from ..queue.limits import RouteStats, route_stats
from .queuestats import QUEUE_STATUSES, QueueStats, queue_stats
from .routes import route_families

logger = logging.getLogger("orquestador.metrics")


def unauthorized() -> JsonResponse:
    response = JsonResponse(
        {"code": "UNAUTHENTICATED", "detail": "This endpoint needs the metrics bearer token."},
        status=401,
    )
    response["WWW-Authenticate"] = 'Bearer realm="metrics"'
    return response


def _gauge(name: str, help_text: str, value: float) -> Family:
    """A gauge of one sample, without labels."""
    return Family(name, "gauge", help_text, [Sample(value)])


def queue_families(stats: QueueStats | None, *, seconds: float) -> list[Family]:
    """The web process's metric families for these statistics (None: the database was not read)."""
    families = [
        _gauge(
            "orquestador_database_up",
            "1 when this scrape read the queue statistics from the database, 0 when it could not.",
            0 if stats is None else 1,
        ),
        _gauge(
            "orquestador_metrics_read_seconds",
            "Time this scrape spent reading the queue statistics, in seconds.",
            seconds,
        ),
    ]
    if stats is None:
        return families
    return [
        *families,
        Family(
            "orquestador_queue_depth",
            "gauge",
            "Live executions by status (PENDING, RETRY_WAIT, RUNNING, SUSPENDED).",
            [Sample(stats.depth[s], (("status", s),)) for s in QUEUE_STATUSES],
        ),
        Family(
            "orquestador_queue_due",
            "gauge",
            "Executions due now by status; a RUNNING one is due once its lease has expired.",
            [Sample(stats.due[s], (("status", s),)) for s in QUEUE_STATUSES],
        ),
        _gauge(
            "orquestador_queue_oldest_due_age_seconds",
            "How long the oldest due execution has been due, by the database clock, in seconds "
            "(0 when nothing is due).",
            stats.oldest_due_age_seconds,
        ),
        _gauge(
            "orquestador_reconciliation_backlog",
            "Executions waiting for an operator (RECONCILIATION_REQUIRED).",
            stats.reconciliation_backlog,
        ),
        _gauge(
            "orquestador_reconciliation_oldest_age_seconds",
            "Age since creation of the oldest execution waiting for an operator, in seconds "
            "(0 when none waits).",
            stats.reconciliation_oldest_age_seconds,
        ),
        _gauge(
            "orquestador_requests_blocked",
            "Requests held by an execution (running, waiting, or waiting for an operator).",
            stats.requests_blocked,
        ),
        _gauge(
            "orquestador_webhook_deliveries_pending",
            "Webhook deliveries on their way: not yet attempted, or failed and to be retried.",
            stats.webhooks_pending,
        ),
        _gauge(
            "orquestador_webhook_oldest_pending_age_seconds",
            "Age since its event of the oldest webhook delivery on its way, in seconds (0 when "
            "none is).",
            stats.webhooks_oldest_pending_age_seconds,
        ),
        _gauge(
            "orquestador_webhook_subscriptions_failing",
            "Webhook subscriptions whose deliveries keep failing (status `failing`).",
            stats.webhook_subscriptions_failing,
        ),
    ]


@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    if not metrics_token_matches(request.headers.get("Authorization"), settings.METRICS_TOKEN):
        return unauthorized()
    started = time.perf_counter()
    routes: list[RouteStats] = []
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            stats: QueueStats | None = queue_stats(cursor=cursor)
            routes = route_stats(cursor)
    except DatabaseError as exc:
        logger.warning("metrics: queue statistics unavailable", extra={"error": type(exc).__name__})
        stats = None
    families = queue_families(stats, seconds=time.perf_counter() - started)
    families += route_families(routes)
    response = HttpResponse(render(families), content_type=CONTENT_TYPE)
    response["Cache-Control"] = "no-store"
    return response
