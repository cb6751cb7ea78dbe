"""Named crash points at the worker's persistence boundaries, for the crash-point matrix only
(docs/crash-points.md lists them and what recovery must do after each).

A test names one point in `ORQUESTADOR_FAULT_POINT` (optionally one action in
`ORQUESTADOR_FAULT_ACTION`) and the process SIGKILLs itself the first time it reaches it, with
nothing after it run (`ORQUESTADOR_FAULT_SIGNAL=SIGSTOP`: it pauses there once instead, until the
test continues it). Production cannot arm it: the variables are read only when the settings say
`FAULT_POINTS_ENABLED = True`, which only `orquestador/settings_test.py` sets. An unknown point
or signal stops the process at start, naming it.
"""

import functools
import json
import os
import signal
import sys
from collections.abc import Callable, Iterable

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

POINT_ENV = "ORQUESTADOR_FAULT_POINT"
ACTION_ENV = "ORQUESTADOR_FAULT_ACTION"
SIGNAL_ENV = "ORQUESTADOR_FAULT_SIGNAL"
SIGNALS = {"SIGKILL": signal.SIGKILL, "SIGSTOP": signal.SIGSTOP}

CLAIM_COMMITTED = "claim.committed"  # the claim committed; nothing loaded or started
CHECKPOINT_STARTED = "checkpoint.started"  # RUNNING committed; a write's adapter not called
CHECKPOINT_SUCCEEDING = "checkpoint.succeeding"  # the call returned; SUCCEEDED not yet written
CHECKPOINT_SUCCEEDED = "checkpoint.succeeded"  # SUCCEEDED committed; the next action not begun
FINAL_UNCOMMITTED = "final.uncommitted"  # the final statement ran in a transaction not committed
FINAL_COMMITTED = "final.committed"  # the final transaction committed
# Compensation began (committed); its first step's RUNNING checkpoint not yet written.
COMPENSATION_STARTED = "compensation.started"
POINTS = (
    CLAIM_COMMITTED,
    CHECKPOINT_STARTED,
    CHECKPOINT_SUCCEEDING,
    CHECKPOINT_SUCCEEDED,
    FINAL_UNCOMMITTED,
    FINAL_COMMITTED,
    COMPENSATION_STARTED,
)


@functools.cache
def armed() -> tuple[str, str | None] | None:
    """The (point, action or None) this process dies at, or None (always None in production)."""
    if not getattr(settings, "FAULT_POINTS_ENABLED", False):
        return None
    point = os.environ.get(POINT_ENV, "")
    if not point:
        return None
    if point not in POINTS:
        raise ImproperlyConfigured(f"{POINT_ENV}={point!r} is not one of {', '.join(POINTS)}")
    if os.environ.get(SIGNAL_ENV, "SIGKILL") not in SIGNALS:
        raise ImproperlyConfigured(f"{SIGNAL_ENV} is not one of {', '.join(SIGNALS)}")
    return point, os.environ.get(ACTION_ENV) or None


_reached = False  # a pause happens once: continued, the process goes on past every point


def reach(point: str, action_ids: Iterable[str] | None = None) -> None:
    """Die (or pause) here if this point is armed (and, when an action is named and this point
    concerns actions, one of `action_ids` is it)."""
    global _reached
    target = armed()
    if target is None or target[0] != point or _reached:
        return
    if target[1] is not None and action_ids is not None and target[1] not in set(action_ids):
        return
    _reached = True
    sys.stdout.write(json.dumps({"event": "fault point reached", "point": point}) + "\n")
    sys.stdout.flush()
    os.kill(os.getpid(), SIGNALS[os.environ.get(SIGNAL_ENV, "SIGKILL")])


def final_uncommitted(action_ids: Iterable[str] | None = None) -> Callable[[], None] | None:
    """For the final statement's plan: when FINAL_UNCOMMITTED is armed, what to call inside its
    explicit transaction before the commit (it dies there); otherwise None (the statement
    commits on its own)."""
    target = armed()
    if target is None or target[0] != FINAL_UNCOMMITTED:
        return None
    ids = list(action_ids) if action_ids is not None else None
    return lambda: reach(FINAL_UNCOMMITTED, ids)
