"""How a step ends a run early: with a decision for the runner to apply, or suspended.

`RunEnded` carries a recovery decision (fail, retry, reconcile) that `runner._Run.run` writes
through endings.py. `run_suspended` is the one way a run stops SUSPENDED, for a wait action and
for an asynchronous provider's ACCEPTED alike: the suspension is already committed
(executions/queue/waits.py), so it only logs and returns the outcome, raised as `RunSuspended`.
"""

import datetime
import logging
from typing import Any, NoReturn

from ..models import ExecutionStatus
from .recovery import Decision
from .wire import RunOutcome

logger = logging.getLogger("executions.worker")


class RunEnded(Exception):
    """A decision ended the run (fail, retry, reconcile); the runner applies it."""

    def __init__(self, decision: Decision) -> None:
        self.decision = decision


class RunSuspended(Exception):
    """The execution is SUSPENDED (already written); the run ends with `outcome`."""

    def __init__(self, outcome: RunOutcome) -> None:
        self.outcome = outcome


def stop_unless_proceeding(decision: Decision) -> Decision:
    """`decision`, if it lets the run go on (reuse, proceed); otherwise the run ends with it."""
    if decision.ends_run:
        raise RunEnded(decision)
    return decision


def run_suspended(
    action_id: str, event: str, deadline: datetime.datetime | None, log_extra: dict[str, Any]
) -> NoReturn:
    """End the run SUSPENDED on `action_id` until `event` arrives or `deadline` passes."""
    logger.info("execution suspended", extra={**log_extra, "deadline": str(deadline)})
    raise RunSuspended(
        RunOutcome(
            status=ExecutionStatus.SUSPENDED,
            next_attempt_at=deadline,
            waiting_on=action_id,
            waiting_for=event,
        )
    )
