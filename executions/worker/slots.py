"""The slots of one `runworker` process and the executions held in them.

Everything here runs on the worker's event loop, so slots in use and executions by id agree
without a lock held across a wait (a short lock guards the dict for threads that read it). A
`Holding` is one holder (execution id and token): a late renewal or a slot given back never
touches a later holder of the same execution. It refers to its claim's `Dispatch`, keeps only
what changes while held, and is what the local runtime runs (`runtime.dispatch_held`). Under
WORKER_FAIRNESS=tenant the slots count what each tenant holds, so a run of a tenant far below its
share writes first (`urgent`: docs/adr/0019-tenant-fairness-in-the-claim.md, "Inside the worker").
"""

import asyncio
import threading
import time
import uuid
from dataclasses import dataclass, field

from actions.base import StopSignal

from ..queue.claims import Dispatch

# A run is urgent while its tenant holds at most 1/URGENT_SHARE of an even share of this
# process's held executions (its own included): a newcomer beside a tenant that fills the
# process, never tenants near their share (the urgent writes stay a minority, so the batches
# of the others keep their size).
URGENT_SHARE = 8


@dataclass(eq=False)
class Holding:
    """One execution held in a slot: its dispatch and what the slot changes while holding it."""

    dispatch: Dispatch
    cancelled: StopSignal = field(default_factory=StopSignal)  # the stop signal
    renewed_at: float = field(default_factory=time.monotonic)  # last confirmed renewal
    # The lease this process renews for it; None: renewed elsewhere (a remote run's dispatcher).
    lease_seconds: float | None = None
    lost: bool = False
    deadline_at: float | None = None  # monotonic; the run reports it (runner.deadline_seconds)
    abandoned: bool = False  # stuck past its deadline: lease left to expire, slot given back
    # Its slot counted free while only its run's writes are left (`release_slot`: after its
    # last call); it is still held, so its lease is renewed until its final commit lands.
    slot_released: bool = False
    slots: "Slots | None" = field(default=None, repr=False)  # the slots it was taken from

    def lapsed(self) -> bool:
        """Whether a whole lease has passed since its last confirmed renewal was sent (or it was
        taken), the heartbeat's own rule: the lease may have run out. A process paused past its
        lease (stopped, swapped out, its VM frozen) finds so on waking, before its heartbeat can
        tell it; so does one whose renewals are slow to answer, which the database then settles."""
        return (
            self.lease_seconds is not None
            and time.monotonic() - self.renewed_at >= self.lease_seconds
        )

    def set_deadline(self, seconds: float) -> None:
        self.deadline_at = time.monotonic() + seconds

    def release_slot(self) -> None:
        """Its run has only writes left (its last call answered): the slot may take its next
        execution meanwhile (the run still holds the lease, renewed, until its final commit
        lands)."""
        if self.slots is not None:
            self.slots.release(self)

    @property
    def tenant(self) -> str | None:
        """Its request's scope, from the claim's snapshot (None: not read yet)."""
        snapshot = self.dispatch.snapshot
        return None if snapshot is None else snapshot.scope

    @property
    def urgent(self) -> bool:
        """Whether its writes go ahead of the process's others (`Slots.urgent`)."""
        slots = self.slots
        return slots is not None and slots.by_tenant and slots.urgent(self)

    def retake_slot(self) -> None:
        """The run goes on after its slot was released (a refused final commit, a failed
        evaluation): count its slot busy again."""
        if self.slots is not None:
            self.slots.retake(self)


class Slots:
    """Slots in use and the execution held in each. `wait_free` returns once `in_use` falls to
    a threshold (or a timeout passes); a release wakes the waiter only then, not at every
    release (at full load the claim loop waits for several slots to free up, and waking it at
    every release would cost a loop iteration per execution for nothing)."""

    def __init__(self, *, by_tenant: bool = False) -> None:
        self.by_tenant = by_tenant  # WORKER_FAIRNESS=tenant: count what each tenant holds
        self._tenants: dict[str, int] = {}  # held executions by tenant, when by_tenant
        self.in_use = 0
        self.wake_at = 0  # set by the one who waits
        self._freed: asyncio.Event | None = None
        self._empty: asyncio.Event | None = None  # set when nothing is held (the drain)
        self._lock = threading.Lock()  # the dict only, for readers on other threads
        # Keyed by the fence's id text: a str keeps its hash, a UUID's is computed in Python on
        # every lookup, and a run looks itself up several times.
        self._by_execution: dict[str, Holding] = {}

    @property
    def busy(self) -> int:
        """Slots in use (an int read: safe from any thread)."""
        return self.in_use

    def occupants(self) -> list[Holding]:
        """The executions held now, one per slot in use (a stuck one given back is not)."""
        with self._lock:
            return list(self._by_execution.values())

    async def wait_free(self, *, at_most: int, timeout: float) -> None:
        """Return once at most `at_most` slots are in use, or after `timeout` seconds."""
        if self.in_use <= at_most:
            return
        self.wake_at = at_most
        if self._freed is None:
            self._freed = asyncio.Event()
        self._freed.clear()
        try:
            await asyncio.wait_for(self._freed.wait(), timeout)
        except TimeoutError:
            pass

    @property
    def held(self) -> int:
        """Executions held, their final commit in flight included (slots released early)."""
        return len(self._by_execution)

    async def wait_unheld(self, *, timeout: float) -> None:
        """Return once nothing is held (every run ended or given back), or after `timeout`."""
        if not self._by_execution:
            return
        if self._empty is None:
            self._empty = asyncio.Event()
        self._empty.clear()
        try:
            await asyncio.wait_for(self._empty.wait(), timeout)
        except TimeoutError:
            pass

    def _unheld(self) -> None:
        if self._empty is not None and not self._by_execution:
            self._empty.set()

    def _released(self) -> None:
        if self._freed is not None and self.in_use <= self.wake_at:
            self._freed.set()

    def take(self, dispatch: Dispatch, *, lease_seconds: float | None = None) -> Holding:
        """Take a slot for a claimed execution; the heartbeat renews its lease (of
        `lease_seconds`) from now on.

        A claim that hands this process an execution it already holds under the very same
        fence means the database lost the earlier claim (a crash before that asynchronous
        commit was flushed: sql.CLAIM_EXECUTIONS) and gave the same token again: the earlier
        holder is stopped, so one fence never has two runs."""
        holding = Holding(dispatch, slots=self, lease_seconds=lease_seconds)
        with self._lock:
            earlier = self._by_execution.get(dispatch.fence.execution_text)
            self._by_execution[dispatch.fence.execution_text] = holding
        if self.by_tenant:
            if earlier is not None:
                self._count(earlier, -1)
            self._count(holding, 1)
        self.in_use += 1
        if earlier is not None and earlier.dispatch.fence == dispatch.fence:
            earlier.lost = True
            earlier.cancelled.set()
        return holding

    def free(self, holding: Holding) -> None:
        """Free the slot; stop renewing, unless the execution is held again under a new token."""
        if holding.abandoned:
            return  # its slot was given back when it passed its deadline
        execution_id = holding.dispatch.fence.execution_text
        with self._lock:
            held = self._by_execution.get(execution_id) is holding
            if held:
                del self._by_execution[execution_id]
        if held and self.by_tenant:
            self._count(holding, -1)
        self._unheld()
        if not holding.slot_released:
            holding.slot_released = True
            self.in_use -= 1
            self._released()

    def release(self, holding: Holding) -> None:
        """Count the slot of a holder whose final commit is in flight free; it stays held."""
        if holding.slot_released or holding.abandoned:
            return
        holding.slot_released = True
        self.in_use -= 1
        self._released()

    def retake(self, holding: Holding) -> None:
        """Count a released slot busy again (its run goes on after a refused final commit);
        `in_use` may pass the concurrency for as long: the claim loop then claims nothing."""
        if not holding.slot_released or holding.abandoned or not self.holds(holding):
            return
        holding.slot_released = False
        self.in_use += 1

    def urgent(self, holding: Holding) -> bool:
        """Under tenant order: whether `holding`'s tenant holds at most 1/URGENT_SHARE of an
        even share of what this process holds (one of two tenants holding 50: at most 3)."""
        if not self.by_tenant:
            return False
        tenant = holding.tenant
        if tenant is None:
            return False
        tenants = self._tenants
        return tenants.get(tenant, 0) * URGENT_SHARE * len(tenants) <= len(self._by_execution)

    def newcomers_first(self, dispatches: list[Dispatch]) -> list[Dispatch]:
        """Under tenant order, a claim's executions by what their tenants hold here, fewest
        first: their runs start, and write, in that order."""
        if not self.by_tenant or len(dispatches) < 2:
            return dispatches
        tenants = self._tenants
        return sorted(
            dispatches,
            key=lambda d: 0 if d.snapshot is None else tenants.get(d.snapshot.scope, 0),
        )

    def _count(self, holding: Holding, change: int) -> None:
        tenant = holding.tenant
        if tenant is None:
            return
        held = self._tenants.get(tenant, 0) + change
        if held > 0:
            self._tenants[tenant] = held
        else:
            self._tenants.pop(tenant, None)

    def find(self, execution_id: uuid.UUID) -> Holding | None:
        """The holder of this execution here, if any."""
        return self._by_execution.get(str(execution_id))

    def holds(self, holding: Holding) -> bool:
        """Whether this very holder is still held (not finished, not given back)."""
        return self._by_execution.get(holding.dispatch.fence.execution_text) is holding

    def give_back(self, holding: Holding) -> bool:
        """A stuck holder: stop holding it and free its slot now, before its run returns.
        False when it was no longer held (finished, or given back already)."""
        execution_id = holding.dispatch.fence.execution_text
        with self._lock:
            if self._by_execution.get(execution_id) is not holding or holding.abandoned:
                return False
            del self._by_execution[execution_id]
        if self.by_tenant:
            self._count(holding, -1)
        holding.lost = holding.abandoned = True
        self._unheld()
        if not holding.slot_released:
            self.in_use -= 1
        if self._freed is not None:  # a slot given back always wakes the waiter
            self._freed.set()
        return True
