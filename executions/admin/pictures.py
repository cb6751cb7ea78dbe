"""What the admin's pages draw, as template context: a flow's state machine (diagram.py), a
request's place in it (its state, and the transition in flight with its current action), and an
execution's timeline (timeline.py, timelinesvg.py).

Read-only. The markup comes from the modules that make it, escaped there; a drawing that cannot
be made says why on the page instead, never as an error.
"""

import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.contrib import admin
from django.http import HttpRequest, HttpResponse
from django.utils.safestring import SafeString, mark_safe

from ..models import ActionExecution, Execution, Flow, Request
from ..pictures import diagram
from ..pictures.timeline import execution_timeline
from ..pictures.timelinesvg import timeline_svg

logger = logging.getLogger("executions.admin")

EFFECT_LEGEND = (
    (diagram.EFFECT_STYLE["READ_ONLY"][0], "read: READ_ONLY"),
    (diagram.EFFECT_STYLE["IDEMPOTENT_WRITE"][0], "idempotent: IDEMPOTENT_WRITE"),
    (diagram.EFFECT_STYLE["NON_IDEMPOTENT_WRITE"][0], "non-idempotent: NON_IDEMPOTENT_WRITE"),
    (diagram.WAIT_TINT, "wait for an event"),
    (diagram.UNKNOWN_TINT, "effect unknown: no contract here"),
)


@dataclass(frozen=True)
class FlowDrawing:
    svg: SafeString | None
    problem: str | None
    caption: str  # where the request stands, in words ("" on a flow's own page)
    legend: tuple[tuple[str, str], ...] = EFFECT_LEGEND


def flow_drawing(flow: Flow) -> FlowDrawing:
    picture = diagram.flow_picture(flow)
    # Safe: diagram.py escapes every label and svgsafety.py serialises the cleaned tree.
    svg = mark_safe(picture.svg) if picture.svg else None  # noqa: S308
    return FlowDrawing(svg, picture.problem, "")


def _in_flight(execution: Execution) -> tuple[int | None, str]:
    """The position of the execution's current action in its transition, and words for it."""
    latest = ActionExecution.objects.filter(execution=execution).order_by("-sequence").first()
    if latest is None:
        return None, "no action started yet"
    words = {
        "RUNNING": "running",
        "WAITING": "waiting for its event",
        "ACCEPTED": "awaiting the provider's callback",
        "UNKNOWN": "outcome unknown",
        "FAILED": "failed",
        "SUCCEEDED": "done",
    }.get(latest.status, latest.status)
    return latest.sequence, f"at action {latest.action_id} ({words}, attempt {latest.attempt})"


def request_drawing(request: Request) -> FlowDrawing:
    """The request's flow with its state, and the transition in flight, highlighted."""
    picture = diagram.flow_picture(request.flow)
    transition, action, caption = None, None, f"Current state: {request.state}."
    blocking = request.blocked_by
    if blocking is not None:
        transition = blocking.transition_id
        action, where = _in_flight(blocking)
        caption += (
            f" In flight: transition {transition}, execution {str(blocking.pk)[:8]} "
            f"{blocking.status}, {where}."
        )
    else:
        caption += " Nothing in flight."
    if not picture.svg:
        return FlowDrawing(None, picture.problem, caption)
    style = diagram.highlight(picture, state=request.state, transition=transition, action=action)
    # Safe: the style sheet holds only ids made by diagram.py; the drawing as flow_drawing's.
    return FlowDrawing(mark_safe(style + picture.svg), None, caption)  # noqa: S308


@dataclass(frozen=True)
class TimelineDrawing:
    svg: SafeString | None
    notes: list[str]
    problem: str | None = None


def timeline_drawing(execution: Execution, *, now: datetime) -> TimelineDrawing:
    """The execution's timeline; a failure to draw it is said on the page, and logged."""
    try:
        timeline = execution_timeline(execution, now=now)
        # Safe: timelinesvg.py builds the tree with ElementTree, which escapes every text.
        return TimelineDrawing(mark_safe(timeline_svg(timeline)), timeline.notes)  # noqa: S308
    except (ValueError, TypeError, KeyError) as exc:  # a record this code does not expect
        logger.exception("timeline not drawn", extra={"execution_id": str(execution.pk)})
        return TimelineDrawing(None, [], f"The timeline could not be drawn ({type(exc).__name__}).")


class DrawingAdmin(admin.ModelAdmin):
    """A model admin whose change page draws its object: `drawing_context(obj)` is added to the
    page's context (its change_form_template includes what to draw)."""

    def drawing_context(self, obj: Any) -> dict[str, Any]:
        return {}

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        obj = self.get_object(request, object_id) if request.method == "GET" else None
        context = {**(extra_context or {}), **(self.drawing_context(obj) if obj else {})}
        return super().change_view(request, object_id, form_url, context)
