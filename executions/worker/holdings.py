"""The slots of one `runworker` process and the executions held in them.

One lock guards both the count of slots in use and the executions by id, so the claim loop (how
many to claim), the slot threads (take, free), the heartbeat (renew, lose, give back a stuck
slot) and shutdown (drain) always see them agree. A `Holding` is one holder (execution id and
token): a renewal that answers late, or a slot given back, never touches a later holder of the
same execution. It refers to its claim's `Dispatch` and keeps only what changes while a slot
holds it; the runtime is handed the holding itself (`WorkerRuntime.allocate`).
"""

import threading
import time
import uuid
from dataclasses import dataclass, field

from actions.base import StopSignal

from ..claims import Dispatch


@dataclass(eq=False)
class Holding:
    """One execution held in a slot: its dispatch and what the slot changes while holding it."""

    dispatch: Dispatch
    cancelled: StopSignal = field(default_factory=StopSignal)  # the stop signal
    renewed_at: float = field(default_factory=time.monotonic)  # last confirmed renewal
    lost: bool = False
    deadline_at: float | None = None  # monotonic; the run reports it (runner.deadline_seconds)
    abandoned: bool = False  # stuck past its deadline: lease left to expire, slot given back

    def set_deadline(self, seconds: float) -> None:
        self.deadline_at = time.monotonic() + seconds


class Slots:
    """Slots in use and the execution held in each. `changed` is notified when a slot frees up
    and `in_use` falls to `wake_at` or below, or to nothing; waits on it read `in_use` while
    holding it, and set `wake_at` to what they wait for."""

    def __init__(self) -> None:
        self.changed = threading.Condition()
        self.in_use = 0  # read under `changed`
        # Set under `changed` by the one who waits: a release that leaves more slots in use than
        # this wakes no one (at full load the claim loop waits for several slots to free up, and
        # waking it at every release would cost a thread switch per execution for nothing).
        self.wake_at = 0
        self._by_execution: dict[uuid.UUID, Holding] = {}

    @property
    def busy(self) -> int:
        """Slots in use, read under the lock (from any thread)."""
        with self.changed:
            return self.in_use

    def occupants(self) -> list[Holding]:
        """The executions held now, one per slot in use (a stuck one given back is not)."""
        with self.changed:
            return list(self._by_execution.values())

    def take(self, dispatch: Dispatch) -> Holding:
        """Take a slot for a claimed execution; the heartbeat renews its lease from now on.

        A claim that hands this process an execution it already holds under the very same
        fence means the database lost the earlier claim (a crash before that asynchronous
        commit was flushed: sql.CLAIM_EXECUTIONS) and gave the same token again: the earlier
        holder is stopped, so one fence never has two runs."""
        holding = Holding(dispatch)
        with self.changed:
            earlier = self._by_execution.get(dispatch.execution_id)
            self.in_use += 1
            self._by_execution[dispatch.execution_id] = holding
        if earlier is not None and earlier.dispatch.fence == dispatch.fence:
            earlier.lost = True
            earlier.cancelled.set()
        return holding

    def free(self, holding: Holding) -> None:
        """Free the slot; stop renewing, unless the execution is held again under a new token."""
        execution_id = holding.dispatch.execution_id
        with self.changed:
            if holding.abandoned:
                return  # its slot was given back when it passed its deadline
            self.in_use -= 1
            if self._by_execution.get(execution_id) is holding:
                del self._by_execution[execution_id]
            if self.in_use <= self.wake_at:
                self.changed.notify_all()

    def find(self, execution_id: uuid.UUID) -> Holding | None:
        """The holder of this execution here, if any."""
        with self.changed:
            return self._by_execution.get(execution_id)

    def holds(self, holding: Holding) -> bool:
        """Whether this very holder is still held (not finished, not given back)."""
        with self.changed:
            return self._by_execution.get(holding.dispatch.execution_id) is holding

    def give_back(self, holding: Holding) -> bool:
        """A stuck holder: stop holding it and free its slot now, before its thread returns.
        False when it was no longer held (finished, or given back already)."""
        execution_id = holding.dispatch.execution_id
        with self.changed:
            if self._by_execution.get(execution_id) is not holding or holding.abandoned:
                return False
            del self._by_execution[execution_id]
            holding.lost = holding.abandoned = True
            self.in_use -= 1
            self.changed.notify_all()
            return True
