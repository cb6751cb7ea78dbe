"""The operators' view of the queue, as proxies of the execution models (no tables of their own).

`ReconciliationCase` is an execution that needs, or needed, an operator; `BlockedRequest` is a
request held by an execution. Both exist so the admin can list them apart from the plain
read-only execution admin, and so the resolutions have Django permissions of their own
(`reconciliation.<codename>`, granted to users or groups in the admin). Only "view" is a default
permission: cases are never added, changed or deleted through a form; every write is a service in
`reconciliation/services.py`.
"""

from django.db import models
from django.db.models.functions import Now

from executions.models import Execution, Request

from .permissions import CODENAMES


class ReconciliationCase(Execution):
    class Meta:
        proxy = True
        verbose_name = "reconciliation case"
        default_permissions = ("view",)
        permissions = list(CODENAMES)


class BlockedRequest(Request):
    class Meta:
        proxy = True
        verbose_name = "blocked request"
        default_permissions = ("view",)


class WorkerProcess(models.Model):
    """A runworker process as it last reported itself; its heartbeat refreshes the row
    (executions.sql.WORKER_SEEN). Read by the Workers page (insight.py)."""

    owner = models.CharField(primary_key=True, max_length=200)  # its lease owner name
    host = models.CharField(max_length=255)
    pid = models.PositiveIntegerField()
    started_at = models.DateTimeField(db_default=Now())
    last_seen_at = models.DateTimeField(db_default=Now())
    concurrency = models.PositiveIntegerField()
    running = models.PositiveIntegerField(default=0)  # executions it ran at its last heartbeat
    renew_seconds = models.FloatField()  # its WORKER_RENEW_SECONDS
    lease_seconds = models.FloatField()  # its WORKER_LEASE_SECONDS
    version = models.CharField(max_length=50)
    # When it stopped cleanly, its work drained (executions.sql.LIMITS_WITHDRAW); None while it
    # runs, and for a worker killed or stopped with work left behind.
    stopped_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "worker_process"
        verbose_name = "worker"
        default_permissions = ("view",)
        # The Workers page's route controls (routeadmin.py): pause and resume a route.
        permissions = [("pause_route", "Can pause and resume a route")]
        indexes = [models.Index(fields=["last_seen_at"], name="worker_process_seen_idx")]

    def __str__(self) -> str:
        return self.owner


class CaseProbe(models.Model):
    """One automatic probe schedule: an open case's uncertain write at one attempt, asked about
    at the provider by runworker (probes.py) until it is settled or its window ends."""

    key = models.CharField(primary_key=True, max_length=300)  # executionId:actionId:attempt
    execution_id = models.UUIDField()
    action_id = models.CharField(max_length=120)
    opened_at = models.DateTimeField()
    probes = models.PositiveIntegerField(db_default=0)
    next_probe_at = models.DateTimeField()
    all_absent = models.BooleanField(db_default=True)  # every answer so far was "not found"
    lease_owner = models.CharField(max_length=200, null=True, blank=True)  # noqa: DJ001
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    fencing_token = models.BigIntegerField(db_default=0)
    finished_at = models.DateTimeField(null=True, blank=True)
    outcome = models.CharField(max_length=30, blank=True, db_default="")

    class Meta:
        db_table = "case_probe"
        default_permissions = ()
        indexes = [
            models.Index(
                fields=["next_probe_at", "key"],
                name="case_probe_due_idx",
                condition=models.Q(finished_at__isnull=True),
            )
        ]

    def __str__(self) -> str:
        return self.key
