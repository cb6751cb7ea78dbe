"""Slots in use: a freed slot wakes the claim loop only when it frees what the loop waits for."""

import asyncio
import uuid

from executions.queue.claims import Dispatch, Snapshot
from executions.queue.leases import Fence
from executions.worker.slots import Slots


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


def _tenant_claim(scope: str) -> Dispatch:
    snapshot = Snapshot(
        data={}, state="DRAFT", revision=2, version=2, owner="o", scope=scope, accepted_revision=2
    )
    fence = Fence(uuid.uuid4(), uuid.uuid4(), 1, "w")
    return Dispatch(
        fence=fence, flow_id=1, transition_id="go", attempts=1, principal=None, snapshot=snapshot
    )


def test_urgent__a_tenant_far_below_its_share_of_the_process_writes_ahead():
    held = Slots(by_tenant=True)
    big = [held.take(_tenant_claim("a")) for _ in range(49)]
    newcomer = held.take(_tenant_claim("b"))
    # An even share of 50 between two tenants is 25, an eighth of it 3.1: b holds 1, a 49.
    assert newcomer.urgent and not big[0].urgent
    second = held.take(_tenant_claim("b"))  # 2 of 51: still at most an eighth
    assert newcomer.urgent and second.urgent
    for holding in big[:30]:
        held.free(holding)
    assert not newcomer.urgent  # 2 of 21 beside 19: more than an eighth of 10.5
    held.free(second)
    assert newcomer.urgent  # 1 of 20: an eighth of 10 is 1.25
    for holding in big[30:]:
        held.free(holding)
    assert held.busy == 1 and not newcomer.urgent  # alone: its whole share


def test_urgent__never_in_queue_order_nor_for_tenants_near_their_share():
    queue = Slots()
    holdings = [queue.take(_tenant_claim("a")) for _ in range(49)]
    assert not queue.take(_tenant_claim("b")).urgent and not holdings[0].urgent

    even = Slots(by_tenant=True)
    per_tenant = [[even.take(_tenant_claim(t)) for _ in range(5)] for t in "abcdefghij"]
    assert not any(h.urgent for tenant in per_tenant for h in tenant)


def test_urgent__counts_follow_each_holder_taken_freed_given_back_or_replaced():
    held = Slots(by_tenant=True)
    big = [held.take(_tenant_claim("a")) for _ in range(40)]
    claim = _tenant_claim("b")
    first = held.take(claim)
    again = held.take(claim)  # the same fence claimed again: the first holder is stopped
    assert first.lost and again.urgent
    held.free(first)  # the stopped holder's run ends: the count is the second holder's alone
    assert held._tenants == {"a": 40, "b": 1}
    assert held.give_back(big[0])
    held.free(big[0])  # its run returns later: counted once
    held.free(again)
    assert held._tenants == {"a": 39}


def test_newcomers_first__a_claims_executions_by_what_their_tenants_hold_here():
    held = Slots(by_tenant=True)
    for _ in range(3):
        held.take(_tenant_claim("a"))
    held.take(_tenant_claim("c"))
    claimed = [_tenant_claim("a"), _tenant_claim("c"), _tenant_claim("b")]
    assert [d.snapshot.scope for d in held.newcomers_first(claimed)] == ["b", "c", "a"]
    assert Slots().newcomers_first(claimed) == claimed  # queue order: as claimed
