"""The write gate: the grouped writes' turns on the shared connections, urgent writes first."""

import asyncio

from executions.worker.groupcommit import WriteGate


async def _enter(gate: WriteGate, name: str, order: list[str], release: asyncio.Event, **kw):
    async with gate.enter(**kw):
        order.append(name)
        await release.wait()


def test_enter__a_freed_place_goes_to_an_urgent_write_before_earlier_leaders():
    async def scenario() -> list[str]:
        gate, order, release = WriteGate(1), [], asyncio.Event()
        holder = asyncio.create_task(_enter(gate, "holder", order, release, urgent=False))
        await asyncio.sleep(0)
        waiting = [
            asyncio.create_task(_enter(gate, name, order, release, urgent=urgent))
            for name, urgent in (("leader-1", False), ("leader-2", False), ("urgent", True))
        ]
        await asyncio.sleep(0)
        assert order == ["holder"] and gate.places == 0
        release.set()
        await asyncio.gather(holder, *waiting)
        assert gate.places == 1  # every place given back
        return order

    assert asyncio.run(scenario()) == ["holder", "urgent", "leader-1", "leader-2"]


def test_enter__a_write_cancelled_while_it_waits_takes_no_place_and_strands_nobody():
    async def scenario() -> list[str]:
        gate, order, release = WriteGate(1), [], asyncio.Event()
        holder = asyncio.create_task(_enter(gate, "holder", order, release, urgent=False))
        await asyncio.sleep(0)
        gone = asyncio.create_task(_enter(gate, "gone", order, release, urgent=True))
        after = asyncio.create_task(_enter(gate, "after", order, release, urgent=False))
        await asyncio.sleep(0)
        gone.cancel()
        release.set()
        await asyncio.gather(holder, after)
        assert gone.cancelled() and gate.places == 1
        return order

    assert asyncio.run(scenario()) == ["holder", "after"]


def test_enter__a_place_handed_to_a_write_being_cancelled_passes_on():
    async def scenario() -> list[str]:
        gate, order, release = WriteGate(1), [], asyncio.Event()
        holder = asyncio.create_task(_enter(gate, "holder", order, release, urgent=False))
        await asyncio.sleep(0)
        gone = asyncio.create_task(_enter(gate, "gone", order, release, urgent=False))
        after = asyncio.create_task(_enter(gate, "after", order, release, urgent=False))
        await asyncio.sleep(0)
        release.set()
        await asyncio.sleep(0)  # the holder leaves: its place is handed to `gone`...
        gone.cancel()  # ... which is cancelled before it could take it
        await asyncio.gather(holder, after, return_exceptions=True)
        assert gone.cancelled() and gate.places == 1
        return order

    assert asyncio.run(scenario()) == ["holder", "after"]
