"""Workers in sight: each runworker's registry row, read as live / silent / gone, with what it
holds and the leases it lost or took over (an execution's own lease, takeovers and timeline are
executions/pictures/insight.py's).

Read-only (the worker writes its row: sql.WORKER_SEEN, once per heartbeat). A worker is live
while it was seen within two renewal intervals, silent until its leases would have run out, and
gone after that: whatever it held is then reclaimable by any worker. One that stopped cleanly,
its work drained, is stopped (sql.LIMITS_WITHDRAW).
"""

from dataclasses import dataclass, field
from datetime import datetime

from django.utils import timezone

from executions.models import AuditEvent, AuditType, Execution, ExecutionStatus
from executions.pictures.insight import Takeover, takeover
from orquestador.display import age

from .models import WorkerProcess

LIVE, SILENT, GONE, STOPPED = "live", "silent", "gone", "stopped"


def state_of(worker: WorkerProcess, now: datetime) -> str:
    if worker.stopped_at is not None:
        return STOPPED
    quiet = (now - worker.last_seen_at).total_seconds()
    if quiet <= 2 * worker.renew_seconds:
        return LIVE
    if quiet <= worker.lease_seconds:
        return SILENT
    return GONE


RECENT_TAKEOVERS = 200  # the latest takeovers the Workers page reads (audit_takeover_idx)


@dataclass(frozen=True)
class WorkerView:
    worker: WorkerProcess
    state: str
    seen_ago: str
    holding: list[Execution]
    lost: list[Takeover] = field(default_factory=list)  # its leases others took over
    took: list[Takeover] = field(default_factory=list)  # leases it took over


def _recent_takeovers() -> list[Takeover]:
    """The latest takeovers, newest first (a partial index holds them alone)."""
    return [
        takeover(event)
        for event in AuditEvent.objects.filter(type=AuditType.LEASE_TAKEN_OVER).order_by("-id")[
            :RECENT_TAKEOVERS
        ]
    ]


def workers(*, now: datetime | None = None, limit: int = 200) -> list[WorkerView]:
    """The registered workers, most recently seen first, with the executions each holds."""
    now = now or timezone.now()
    rows = list(WorkerProcess.objects.order_by("-last_seen_at")[:limit])
    held: dict[str, list[Execution]] = {}
    for execution in Execution.objects.filter(
        status=ExecutionStatus.RUNNING, lease_owner__in=[w.owner for w in rows]
    ).order_by("lease_expires_at")[: limit * 10]:
        if execution.lease_owner is not None:  # always: matched by lease_owner__in
            held.setdefault(execution.lease_owner, []).append(execution)
    lost: dict[str, list[Takeover]] = {}
    took: dict[str, list[Takeover]] = {}
    for found in _recent_takeovers():
        lost.setdefault(found.previous_owner, []).append(found)
        took.setdefault(found.new_owner, []).append(found)
    return [
        WorkerView(
            worker=w,
            state=state_of(w, now),
            seen_ago=age((now - w.last_seen_at).total_seconds()),
            holding=held.get(w.owner, []),
            lost=lost.get(w.owner, []),
            took=took.get(w.owner, []),
        )
        for w in rows
    ]
