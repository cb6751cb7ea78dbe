"""Slots in use: a freed slot wakes the claim loop only when it frees what the loop waits for."""

import asyncio
import uuid

from executions.claims import Dispatch
from executions.leases import Fence
from executions.worker.holdings import Slots


class CountingEvent(asyncio.Event):
    """An event that counts how often it is set."""

    def __init__(self) -> None:
        super().__init__()
        self.notified = 0

    def set(self) -> None:
        self.notified += 1
        super().set()


def _claim() -> Dispatch:
    fence = Fence(uuid.uuid4(), uuid.uuid4(), 1, "w")
    return Dispatch(fence=fence, flow_id=1, transition_id="go", attempts=1, principal=None)


def _held(busy: int) -> tuple[Slots, list]:
    held = Slots()
    held._freed = CountingEvent()
    return held, [held.take(_claim()) for _ in range(busy)]


def test_free__notifies_only_at_or_below_the_busy_count_waited_for():
    held, holdings = _held(5)
    held.wake_at = 2  # a claim loop waiting for three of five slots

    held.free(holdings[0])
    held.free(holdings[1])
    assert held._freed.notified == 0 and held.busy == 3  # 4, then 3 busy: nobody to wake

    held.free(holdings[2])
    assert held._freed.notified == 1  # 2 busy: what it waits for

    held.free(holdings[3])
    held.free(holdings[4])
    assert held._freed.notified == 3 and held.busy == 0


def test_free__the_last_slot_freed_always_notifies():
    # A drain waits for nothing busy, whatever the claim loop last waited for.
    held, holdings = _held(1)
    held.wake_at = 0
    held.free(holdings[0])
    assert held._freed.notified == 1


def test_give_back__always_notifies():
    held, holdings = _held(3)
    held.wake_at = 0
    assert held.give_back(holdings[0])
    assert held._freed.notified == 1 and held.busy == 2


def test_free__wakes_a_real_waiter_when_enough_slots_are_free():
    async def scenario() -> list[int]:
        held, holdings = _held(4)
        seen: list[int] = []

        async def waiter() -> None:
            seen.append(held.in_use)
            await held.wait_free(at_most=1, timeout=10)
            seen.append(held.in_use)

        waiting = asyncio.create_task(waiter())
        await asyncio.sleep(0)  # the waiter is waiting, four busy
        for holding in holdings[:3]:
            held.free(holding)
        await asyncio.wait_for(waiting, 10)
        # Set once, by the release that left one busy: the two before it woke nobody.
        assert held._freed.notified == 1
        return seen

    assert asyncio.run(scenario()) == [4, 1]


def test_release_slot__frees_the_slot_and_keeps_the_execution_held():
    # Its final commit in flight: the slot takes a next execution, the lease is still renewed.
    held, holdings = _held(2)
    held.wake_at = 1
    holdings[0].release_slot()
    assert held.busy == 1 and held._freed.notified == 1
    assert held.holds(holdings[0]) and held.held == 2
    holdings[0].release_slot()  # once only
    assert held.busy == 1

    held.free(holdings[0])  # the final commit landed
    assert held.busy == 1 and held.held == 1 and not held.holds(holdings[0])


def test_retake_slot__counts_a_released_slot_busy_again():
    # A refused final commit: the run goes on, its slot counted busy again until it ends.
    held, holdings = _held(1)
    holdings[0].release_slot()
    holdings[0].retake_slot()
    assert held.busy == 1
    held.free(holdings[0])
    assert held.busy == 0 and held.held == 0


def test_give_back__of_a_released_slot_frees_nothing_twice():
    held, holdings = _held(2)
    holdings[0].release_slot()
    assert held.give_back(holdings[0])
    assert held.busy == 1 and held.held == 1
    holdings[0].retake_slot()  # given back: nothing to retake
    assert held.busy == 1


def test_wait_unheld__waits_for_a_released_slot_s_final_commit():
    async def scenario() -> tuple[bool, bool]:
        held, holdings = _held(1)
        holdings[0].release_slot()
        await held.wait_unheld(timeout=0.01)  # nothing in use, but still held
        still_held = held.held == 1
        asyncio.get_running_loop().call_later(0.01, held.free, holdings[0])
        await held.wait_unheld(timeout=5)
        return still_held, held.held == 0

    assert asyncio.run(scenario()) == (True, True)
