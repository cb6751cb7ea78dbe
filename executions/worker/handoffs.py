"""Places passed on at a call's end (limiter.Handoff): the dispatcher's side
(docs/adr/0022-route-limits-in-postgresql.md). Everything here runs on the scheduler's loop.

Invariants: a slot is kept for the execution a place may be passed to before the end is sent, and
the claim loop leaves kept slots free (`kept`), so what the end claims always has a slot; the end
that claims is one statement (sql.CLAIM_PASSED) under this process's owner and lease, counted as
a claim only when it claimed something; stopping, no slot is kept, and the end only ends the call
(the oldest parked is woken and announced for another worker).
"""

import threading
from collections.abc import Callable

from orquestador.workerconfig import WorkerConfig

from ..queue.claims import Dispatch, execution_claim_passed
from ..queue.steps import Plan
from .limiter import Handoff
from .metrics import WorkerMetrics
from .slots import Slots


class Handoffs:
    """The slots kept for executions a route's place is being passed to."""

    def __init__(
        self,
        *,
        config: WorkerConfig,
        owner: str,
        slots: Slots,
        metrics: WorkerMetrics,
        stopping: threading.Event,
        outage: Callable[[], bool],
        hand_to_slot: Callable[[Dispatch], None],
    ) -> None:
        self.config = config
        self.owner = owner
        self.slots = slots
        self.metrics = metrics
        self.stopping = stopping
        self.outage = outage  # whether leases taken over now may have lapsed for an outage
        self.hand_to_slot = hand_to_slot
        self.kept = 0  # slots kept now: the claim loop leaves them free

    def handoff(self) -> Handoff:
        """What the runtime's runs call at a call's end."""
        return Handoff(room=self.room, claim=self.claim, done=self.done)

    def room(self) -> bool:
        """Keep a slot for an execution a place may be passed to; False when none is free."""
        if self.stopping.is_set():
            return False
        if self.slots.in_use + self.kept >= self.config.concurrency:
            return False
        self.kept += 1
        return True

    def claim(self, route: str, call_id: int) -> Plan[list[Dispatch]]:
        """The end of call `call_id` of `route` that claims, for this process, the execution
        parked for its place, with the place (sql.CLAIM_PASSED)."""
        return execution_claim_passed(
            owner=self.owner,
            route=route,
            call_id=call_id,
            lease_seconds=self.config.lease_seconds,
            outage=self.outage(),
        )

    def done(self, dispatches: list[Dispatch], seconds: float) -> None:
        """Run what the end claimed in the slot kept for it; the kept slot is free again."""
        if dispatches:  # a claim like the loop's (an end that claimed nothing is not one)
            self.metrics.claim_done(claimed=len(dispatches), seconds=seconds)
        for dispatch in dispatches:
            self.hand_to_slot(dispatch)
        self.kept -= 1
