"""The resolutions, described once: this table drives the admin actions, their permissions, the
confirmation page and the case page's forms.

A new resolution touches four places: its service in services.py, its permission in
permissions.py, its row here, and a migration for the permission (and a form class in forms.py
only when it asks for more than a reason and the action to settle).
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from . import compensate, permissions, services
from .forms import ResolutionForm, WriteHappenedForm

CONFIRM_RISK = "confirm_risk"  # the forms' confirmation of a named risk, passed to the services


@dataclass(frozen=True)
class ResolutionAction:
    name: str  # the admin action, and the permission's codename
    key: str  # the case page's form: id="resolve-<key>", fields "<key>_<field>"
    description: str  # the admin's action menu
    title: str  # the confirmation page's title and its button
    button: str  # the case page's button
    explanation: str  # what happens, in words, on both pages
    form_class: type[ResolutionForm]
    settles_one_action: bool  # settles one uncertain action, so one case at a time
    service: Callable[..., services.Resolved]  # called with execution_id, operator and `takes`
    takes: tuple[str, ...]  # the fields of the form's cleaned data the service is given
    # Whether the case page offers it for this execution (None: wherever the rules above allow).
    offered: Callable[[Any], bool] | None = None

    def apply(self, execution_id: Any, data: dict[str, Any], operator: Any) -> services.Resolved:
        """Resolve one case through this row's service, with the fields it takes from `data`.

        `confirm_risk` is a field only where a risk was named; without it the service refuses
        a choice the evidence does not support."""
        fields = {name: data[name] for name in self.takes if name != CONFIRM_RISK}
        if CONFIRM_RISK in self.takes:
            fields[CONFIRM_RISK] = bool(data.get(CONFIRM_RISK))
        return self.service(execution_id=execution_id, operator=operator, **fields)

    @property
    def permission(self) -> str:
        return f"{permissions.APP}.{self.name}"

    @property
    def field_prefix(self) -> str:
        return self.key.replace("-", "_")


# Every resolution an operator may choose: the admin's actions, confirmations and case forms
# are made from these rows (docs/architecture.md, "A new resolution").
RESOLUTIONS = (
    ResolutionAction(
        name="resolve_write_happened",
        key="happened",
        description="Resolve: the write happened (one case; or each whose lookup found it)",
        title="The write happened",
        button="Record: the write happened",
        explanation="The uncertain action is recorded SUCCEEDED with the output below, and the "
        "execution goes back to the queue; the worker reuses that output and does not call the "
        "provider for this action again.",
        form_class=WriteHappenedForm,
        settles_one_action=True,
        service=services.execution_resolve_write_happened,
        takes=("action_id", "output", "reason", CONFIRM_RISK),
    ),
    ResolutionAction(
        name="resolve_write_not_happened",
        key="not-happened",
        description="Resolve: the write did not happen, replay once (one case; or each not found)",
        title="The write did not happen",
        button="Record: the write did not happen",
        explanation="The uncertain action is recorded FAILED with REPLAY_AUTHORIZED, and the "
        "execution goes back to the queue; the worker calls the provider for this action once "
        "more, with the same external key (Idempotency-Key).",
        form_class=ResolutionForm,
        settles_one_action=True,
        service=services.execution_resolve_write_not_happened,
        takes=("action_id", "reason", CONFIRM_RISK),
    ),
    ResolutionAction(
        name="abandon_execution",
        key="abandon",
        description="Abandon: end FAILED and release the request",
        title="Abandon",
        button="Abandon the execution",
        explanation="The execution ends FAILED (RECONCILIATION_ABANDONED) and its request is "
        "released with its data, state and revision as they were. Nothing is replayed and nothing "
        "is recorded as done: whatever the provider did stays as it is.",
        form_class=ResolutionForm,
        settles_one_action=False,
        service=services.execution_abandon,
        takes=("reason",),
    ),
    ResolutionAction(
        name="compensate_execution",
        key="compensate",
        description="Compensate: undo its writes by the flow's compensations",
        title="Compensate",
        button="Compensate the execution",
        explanation="Every uncertain action is recorded as not having happened (an uncertain "
        "compensation runs once more instead), and the execution goes back to the queue; the "
        "worker undoes each write that succeeded, in reverse order, by the compensation the "
        "flow declares, and ends it COMPENSATED with its request released as it was.",
        form_class=ResolutionForm,
        settles_one_action=False,
        service=compensate.execution_compensate,
        takes=("reason",),
        offered=compensate.compensation_offered,
    ),
)
BY_NAME = {resolution.name: resolution for resolution in RESOLUTIONS}
