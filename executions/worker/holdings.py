"""The slots of one `runworker` process and the executions held in them.

One lock guards both the busy count and the executions by id, so the claim loop (how many to
claim), the slot threads (hold, release), the heartbeat (renew, lose, give back a stuck slot)
and shutdown (drain) always see them agree. A `Holding` is one holder (execution id and token):
a renewal that answers late, or a slot given back, never touches a later holder of the same
execution.
"""

import threading
import time
import uuid
from dataclasses import dataclass, field

from actions.base import StopSignal

from ..claims import Claim
from ..leases import Fence


@dataclass
class Holding:
    """One execution this process holds: its claim (and holder) and its stop signal."""

    claim: Claim
    cancelled: threading.Event = field(default_factory=StopSignal)
    renewed_at: float = field(default_factory=time.monotonic)  # last confirmed renewal
    lost: bool = False
    deadline_at: float | None = None  # monotonic; the run reports it (runner.deadline_seconds)
    abandoned: bool = False  # stuck past its deadline: lease left to expire, slot given back

    def set_deadline(self, seconds: float) -> None:
        self.deadline_at = time.monotonic() + seconds

    @property
    def fence(self) -> Fence:
        return self.claim.fence


class Holdings:
    """Busy slots and held executions. `changed` is notified when a slot frees up and
    `busy_now` falls to `wake_at_busy` or below, or to nothing; waits on it read `busy_now`
    while holding it, and set `wake_at_busy` to what they wait for."""

    def __init__(self) -> None:
        self.changed = threading.Condition()
        self.busy_now = 0  # read under `changed`
        # Set under `changed` by the one who waits: a release that leaves more slots busy than
        # this wakes no one (at full load the claim loop waits for several slots to free up, and
        # waking it at every release would cost a thread switch per execution for nothing).
        self.wake_at_busy = 0
        self._held: dict[uuid.UUID, Holding] = {}

    @property
    def busy(self) -> int:
        with self.changed:
            return self.busy_now

    def all(self) -> list[Holding]:
        with self.changed:
            return list(self._held.values())

    def hold(self, claim: Claim) -> Holding:
        """Take a slot for a claimed execution; the heartbeat renews its lease from now on.

        A claim that hands this process an execution it already holds under the very same
        fence means the database lost the earlier claim (a crash before that asynchronous
        commit was flushed: sql.CLAIM_EXECUTIONS) and gave the same token again: the earlier
        holder is stopped, so one fence never has two runs."""
        holding = Holding(claim=claim)
        with self.changed:
            earlier = self._held.get(claim.execution_id)
            self.busy_now += 1
            self._held[claim.execution_id] = holding
        if earlier is not None and earlier.fence == claim.fence:
            earlier.lost = True
            earlier.cancelled.set()
        return holding

    def release(self, holding: Holding) -> None:
        """Free the slot; stop renewing, unless the execution is held again under a new token."""
        with self.changed:
            if holding.abandoned:
                return  # its slot was given back when it passed its deadline
            self.busy_now -= 1
            if self._held.get(holding.fence.execution_id) is holding:
                del self._held[holding.fence.execution_id]
            if self.busy_now <= self.wake_at_busy:
                self.changed.notify_all()

    def find(self, execution_id: uuid.UUID) -> Holding | None:
        """The holder of this execution here, if any."""
        with self.changed:
            return self._held.get(execution_id)

    def holds(self, holding: Holding) -> bool:
        """Whether this very holder is still held (not finished, not given back)."""
        with self.changed:
            return self._held.get(holding.fence.execution_id) is holding

    def give_back(self, holding: Holding) -> bool:
        """A stuck holder: stop holding it and free its slot now, before its thread returns.
        False when it was no longer held (finished, or given back already)."""
        with self.changed:
            if self._held.get(holding.fence.execution_id) is not holding or holding.abandoned:
                return False
            del self._held[holding.fence.execution_id]
            holding.lost = holding.abandoned = True
            self.busy_now -= 1
            self.changed.notify_all()
            return True
