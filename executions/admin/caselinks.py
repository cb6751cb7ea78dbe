"""Links between an execution, its request and its reconciliation case in the admin: which
executions are or were a case, the link to a case's page, and where a link stands on a page."""

from collections.abc import Sequence
from typing import Any

from django.db.models import Exists, OuterRef, Q, QuerySet
from django.urls import reverse
from django.utils.html import format_html

from ..models import AuditEvent, AuditType, Execution, ExecutionStatus
from . import columns

CASES_SHOWN = 20  # a request's reconciliation cases linked from its page, latest first
CASE_URL = "admin:reconciliation_reconciliationcase_change"  # the case page, by execution id


def with_cases(executions: QuerySet[Execution]) -> QuerySet[Execution]:
    """The executions that are, or were, a reconciliation case: waiting for an operator, or
    resolved by one (or by the prober); the case list holds the same (reconciliation's
    selectors.cases)."""
    resolved = AuditEvent.objects.filter(
        execution=OuterRef("pk"), type=AuditType.RECONCILIATION_RESOLVED
    )
    return executions.filter(Q(status=ExecutionStatus.RECONCILIATION_REQUIRED) | Exists(resolved))


def case_link(execution: Execution) -> str:
    """A link to the execution's case page, saying whether the case waits for an operator."""
    short = str(execution.pk)[: columns.SHORT_ID_CHARS]
    state = (
        "waiting for an operator"
        if execution.status == ExecutionStatus.RECONCILIATION_REQUIRED
        else "resolved"
    )
    return format_html(
        '<a href="{}" title="{}" class="case-link">case {}</a> ({})',
        reverse(CASE_URL, args=[execution.pk]),
        execution.pk,
        short,
        state,
    )


def placed_after(fields: Sequence[Any], moved: Sequence[str], anchor: str) -> list[Any]:
    """`fields` with `moved` taken out and put back right after `anchor` (at the start without
    it): a link belongs beside what it links from, not at the end of a long page."""
    rest = [name for name in fields if name not in moved]
    at = rest.index(anchor) + 1 if anchor in rest else 0
    return [*rest[:at], *moved, *rest[at:]]


def open_case_link(execution: Execution) -> str:
    """The executions list's column: a link to the case of one waiting for an operator, else —."""
    if execution.status != ExecutionStatus.RECONCILIATION_REQUIRED:
        return "—"
    return format_html('<a href="{}">open case</a>', reverse(CASE_URL, args=[execution.pk]))
