"""Resumes in an execution's trace (docs/operations.md#traces): a provider's callback or an event
sent through the API is recorded as an `execution callback` or `execution event` span in the
trace the execution's runs continue, linked to the span of the API call that brought it (whose
own trace is the caller's). Nothing is read or recorded while tracing is off."""

import uuid
from typing import Any

from orquestador import tracing

from ..models import Execution

UNREAD: Any = object()  # the caller has not read the execution's trace context


def resume_traced(
    *,
    execution_id: uuid.UUID | str,
    by: str,
    stored: dict[str, Any] | None = UNREAD,
    attributes: dict[str, Any] | None = None,
) -> None:
    """Record that `by` (`callback` or `event`) reached the execution, once it has committed.
    `stored`: the execution's trace context when the caller has read it (read here otherwise)."""
    if not tracing.active():
        return
    if stored is UNREAD:
        stored = (
            Execution.objects.filter(id=execution_id)
            .values_list("trace_context", flat=True)
            .first()
        )
    if not stored:  # accepted while tracing was off: no trace to link into
        return
    described = {"orquestador.execution.id": str(execution_id), **(attributes or {})}
    with tracing.continued(stored, f"execution {by}", attributes=described, links_current=True):
        pass
