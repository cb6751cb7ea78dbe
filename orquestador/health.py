"""Liveness and readiness probes.

`/healthz` answers while the process is up and never touches the database, so an orchestrator
does not restart a web process for a database outage. `/readyz` answers 200 only when the
database is reachable as the configured role and no migration is unapplied; otherwise 503 with
`code` and the reason (`DATABASE_UNAVAILABLE` and why, or the unapplied migrations).
"""

from django.db import DEFAULT_DB_ALIAS, connections
from django.db.migrations.executor import MigrationExecutor
from django.http import HttpRequest, JsonResponse
from django.views.decorators.http import require_GET

from . import database, errors


@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"status": "ok"})


@require_GET
def readyz(request: HttpRequest) -> JsonResponse:
    connection = connections[DEFAULT_DB_ALIAS]
    try:
        connection.ensure_connection()
        executor = MigrationExecutor(connection)
        plan = executor.migration_plan(executor.loader.graph.leaf_nodes())
    except Exception as exc:  # any database failure means "not ready"
        database.note_outage(exc)
        return JsonResponse(
            {
                "status": "unavailable",
                "code": errors.DATABASE_UNAVAILABLE,
                "reason": f"database unreachable: {database.reason(exc)}",
            },
            status=503,
        )
    if plan:
        pending = sorted({f"{m.app_label}.{m.name}" for m, _ in plan})
        return JsonResponse(
            {"status": "unavailable", "reason": "unapplied migrations", "migrations": pending},
            status=503,
        )
    return JsonResponse({"status": "ok"})
