"""Automatic provider probes: runworker asks the provider about an uncertain write before anyone
is paged, and settles the case itself when the answer is conclusive, as the contract's
`auto_reconcile` allows (RECONCILIATION.md#automatic-probes).

Invariants: every uncertain write of an open case gets one probe row per attempt (PROBES_ENLIST),
scheduled `probe_offsets(window)` after the case opened, reopened when the case comes back, closed
when its write moved to a later attempt; a probe is claimed like work (PROBES_CLAIM, a lease,
token + 1), every later write fenced on that token; the provider is asked outside any transaction,
its answer and the settlement appended in one; a resolution goes through services.py.
"""

import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import connection, transaction

from actions.blocking import BlockingRunner, run_blocking
from actions.lookup import lookup_by_key
from actions.registry import IntegrationUnavailable, resolve
from executions import sql
from executions.models import ActionExecution, AuditType, Execution, ExecutionStatus
from executions.queue.audit import audit_append
from executions.queue.limits import lookup_place, lookup_place_end
from executions.worker.limiter import limited
from executions.worker.metrics import WorkerMetrics

from . import services
from .evidence import is_uncertain, lookup_evidence
from .probedb import ConnectionSource, orm_on

logger = logging.getLogger("reconciliation.probes")

# The actor of probes and automatic resolutions (RECONCILIATION.md#automatic-probes).
PROBER = "system:prober"
SCHEDULE = (1, 5, 30, 120, 600)  # seconds after the case opened, within the window
MIN_PROBES = 3  # a window too short for the schedule is still probed this many times
PROBE_LEASE_SECONDS = 60  # seconds a claimed probe is this worker's
PROBE_BATCH = 5  # probes claimed at once


def probe_offsets(window: float) -> list[float]:
    """When to ask, in seconds after the case opened: the schedule cut to the window, the last
    at the window's end; a short window is compressed to MIN_PROBES probes."""
    offsets = [float(o) for o in SCHEDULE if o < window] + [float(window)]
    if len(offsets) < MIN_PROBES:
        offsets = [window * (i + 1) / MIN_PROBES for i in range(MIN_PROBES)]
    return offsets


class SystemOperator:
    """The prober as the operators' services see it: authenticated, allowed, named."""

    is_authenticated = True

    def __init__(self, name: str = PROBER) -> None:
        self.name = name

    def has_perm(self, permission: str) -> bool:
        return True

    def get_username(self) -> str:
        return self.name


@dataclass(frozen=True)
class Claimed:
    key: str
    execution_id: Any
    action_id: str
    probes: int
    opened_at: Any
    all_absent: bool
    token: int

    @property
    def attempt(self) -> int:
        """The attempt this probe asks about: its key is executionId:actionId:attempt."""
        return int(self.key.rsplit(":", 1)[1])


def probes_enlist() -> int:
    """Give every uncertain write of each open case a probe row (reopening one closed while the
    case was away); return how many were added."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(sql.PROBES_ENLIST)
        return cursor.rowcount


def probes_claim(*, owner: str, limit: int = PROBE_BATCH) -> list[Claimed]:
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            sql.PROBES_CLAIM,
            {"owner": owner, "limit": limit, "lease_seconds": PROBE_LEASE_SECONDS},
        )
        return [Claimed(*row) for row in cursor.fetchall()]


def _settle(
    probe: Claimed,
    *,
    owner: str,
    finished: bool,
    outcome: str,
    next_offset: float | None = None,
    absent: bool = False,
    evidence: dict[str, Any] | None = None,
    execution: Execution | None = None,
    source: ConnectionSource | None = None,
    then: Callable[[], None] | None = None,
) -> bool:
    """Record the answer and reschedule or finish the probe, fenced on its token; `then` (an
    automatic resolution) runs in the same transaction, so a probe is never finished as resolved
    while its case stays open (a crash or a lost connection in between undoes both). The
    defaults are a probe that asked nobody: no next probe, no absence seen, no evidence."""
    with orm_on(source), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            sql.PROBE_LOCK, {"key": probe.key, "probe_token": probe.token, "owner": owner}
        )
        if cursor.fetchone() is None:
            return False  # another prober holds it now: write nothing
        if evidence is not None and execution is not None:
            # The audit write every service makes (resumes.py too): one function, its keywords.
            audit_append(
                cursor,
                request_id=execution.request_id,
                execution_id=execution.pk,
                type=AuditType.RECONCILIATION_EVIDENCE,
                actor=PROBER,
                payload={**evidence, "operator": PROBER, "probe": probe.probes + 1},
            )
        cursor.execute(
            sql.PROBE_SETTLE,
            {
                "key": probe.key,
                "finished": finished,
                "outcome": outcome,
                "next_probe_at": None
                if next_offset is None
                else probe.opened_at + timedelta(seconds=next_offset),
                "all_absent": probe.all_absent and absent,
            },
        )
        if then is not None:
            then()
    return True


def _close(
    probe: Claimed, *, owner: str, outcome: str, source: ConnectionSource | None = None
) -> str:
    """Finish a probe that asks nobody: the case closed, or there is no lookup to ask."""
    _settle(probe, owner=owner, finished=True, outcome=outcome, source=source)
    return outcome


def _counted(result: Any) -> str:
    """The lookup's answer as the probe metric names it."""
    if result.happened is True:
        return "found"
    return "not_found" if result.happened is False else "error"


def probe_one(
    probe: Claimed,
    *,
    owner: str,
    two_person: bool,
    metrics: WorkerMetrics | None = None,
    source: ConnectionSource | None = None,
    runner: BlockingRunner | None = None,
) -> str:
    """Ask the provider about one claimed probe and act on the answer; return the outcome.

    Each database step borrows a connection from `source` (probedb.py) and gives it back before
    the provider is asked; without a source, Django's own connection serves. The lookup runs on
    `runner`'s loop (a pass shares one), or on a loop of its own."""
    with orm_on(source):
        execution = Execution.objects.filter(pk=probe.execution_id).first()
        checkpoint = ActionExecution.objects.filter(
            execution_id=probe.execution_id, action_id=probe.action_id
        ).first()
    if (
        execution is None
        or execution.status != ExecutionStatus.RECONCILIATION_REQUIRED
        or checkpoint is None
        or not is_uncertain(checkpoint)
        # A later attempt (a replay lost too) has a probe, and a window, of its own: this one's
        # answers were about an earlier attempt and must not settle it.
        or checkpoint.attempt != probe.attempt
    ):
        return _close(probe, owner=owner, outcome="closed", source=source)
    try:
        binding = resolve(checkpoint.capability, checkpoint.capability_version)
        mode = binding.contract.auto_reconcile
        if mode == "off":
            raise IntegrationUnavailable(
                checkpoint.capability, checkpoint.capability_version, "off"
            )
        # A lookup counts against its route's limits like any call (executions/queue/limits.py);
        # one held back asks nothing now: the probe's claim lapses and it is asked later.
        place = None
        if limited(binding.route):
            with orm_on(source):
                place = lookup_place(
                    route=binding.route, hold_seconds=binding.contract.timeout_seconds
                )
            if place is None:
                return "throttled"
        try:
            asking = lookup_by_key(
                checkpoint.capability, checkpoint.capability_version, checkpoint.external_key
            )
            result = runner.run(asking) if runner is not None else run_blocking(asking)
        finally:
            if place is not None:
                with orm_on(source):
                    lookup_place_end(route=binding.route, call_id=place)
    except IntegrationUnavailable:
        return _close(probe, owner=owner, outcome="no-lookup", source=source)
    if metrics is not None:
        metrics.probed(_counted(result))
    contract = binding.contract
    evidence = lookup_evidence(result, checkpoint, contract.output_schema)
    offsets = probe_offsets(contract.probe_window_seconds)
    number = probe.probes + 1  # this probe's number
    last = number >= len(offsets)
    absent = result.happened is False
    if two_person and mode == "found-or-absent":
        mode = "found"  # the prober never replays on its own under the two-person rule
    decide = None
    if result.happened is True and evidence["outputValid"]:
        decide = "happened"
    elif (
        last
        and absent
        and probe.all_absent
        and mode == "found-or-absent"
        and (contract.lookup_authoritative)
    ):
        decide = "not-happened"
    finished = decide is not None or last or result.happened is True
    if decide is not None:
        outcome = f"resolved-{decide}"
    else:
        outcome = "found-invalid" if result.happened else "exhausted" if last else "waiting"
    reason = f"Automatic: probe {number} of {len(offsets)} — the provider " + (
        "reports the write, with an output valid against the contract."
        if decide == "happened"
        else "found no write on any probe across the whole window (lookup_authoritative)."
    )
    settle = functools.partial(
        _settle,
        probe,
        owner=owner,
        next_offset=None if finished else offsets[number],
        absent=absent,
        evidence=evidence,
        execution=execution,
        source=source,
    )
    try:
        settled = settle(
            finished=finished,
            outcome=outcome,
            then=None
            if decide is None
            else functools.partial(
                _resolve,
                decide,
                execution=execution,
                checkpoint=checkpoint,
                result=result,
                reason=reason,
            ),
        )
    except services.ResolutionRefused as exc:
        # The case moved under its lock (an operator settled it first): the answer is still
        # evidence, recorded without acting on it.
        logger.info(
            "automatic resolution refused",
            extra={"execution_id": str(execution.pk), "code": exc.code},
        )
        settled = settle(finished=True, outcome="refused")
        outcome = "refused"
    if not settled:
        return "superseded"
    if decide is not None and outcome != "refused" and metrics is not None:
        metrics.resolved_automatically(
            "WRITE_HAPPENED" if decide == "happened" else "WRITE_NOT_HAPPENED"
        )
    return outcome


def _resolve(
    decide: str, *, execution: Execution, checkpoint: ActionExecution, result: Any, reason: str
) -> None:
    """Resolve the case through the operators' fenced services, as system:prober."""
    if decide == "happened":
        services.execution_resolve_write_happened(
            execution_id=execution.pk,
            action_id=checkpoint.action_id,
            output=result.output,
            reason=reason,
            operator=SystemOperator(),
        )
    else:
        services.execution_resolve_write_not_happened(
            execution_id=execution.pk,
            action_id=checkpoint.action_id,
            reason=reason,
            operator=SystemOperator(),
        )


def probes_run_once(
    *,
    owner: str,
    metrics: WorkerMetrics | None = None,
    source: ConnectionSource | None = None,
) -> int:
    """One pass: enlist open cases, claim due probes, run them. Returns how many ran."""
    with orm_on(source):
        probes_enlist()
        claimed = probes_claim(owner=owner)
    if not claimed:
        return 0
    two_person = bool(getattr(settings, "RECONCILIATION_TWO_PERSON", False))
    # One event loop for the pass: its lookups share the HTTP session and its connections.
    with BlockingRunner() as runner:
        for probe in claimed:
            try:
                probe_one(
                    probe,
                    owner=owner,
                    two_person=two_person,
                    metrics=metrics,
                    source=source,
                    runner=runner,
                )
            except Exception:  # one probe's fault must not stop the others; its lease lapses
                logger.exception("probe failed", extra={"execution_id": str(probe.execution_id)})
    return len(claimed)
