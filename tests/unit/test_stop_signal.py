"""The execution's stop signal: set from any thread, seen by threads and by coroutines alike."""

import asyncio
import threading
import time

from actions.base import StopSignal

DEADLINE = 5.0  # seconds any wake-up below may take at most


def test_wait__woken_at_once_when_set_from_another_thread():
    signal = StopSignal()
    waiting = threading.Event()

    async def wait_for_it() -> tuple[bool, float]:
        started = time.monotonic()
        wait = asyncio.ensure_future(signal.wait(timeout=60))
        await asyncio.sleep(0)  # the wait has begun: its wake-up is registered
        assert signal._callbacks
        waiting.set()
        woken = await wait
        return woken, time.monotonic() - started

    setter = threading.Thread(target=lambda: (waiting.wait(DEADLINE), signal.set()))
    setter.start()
    woken, took = asyncio.run(wait_for_it())
    setter.join()

    assert woken is True and signal.is_set()
    assert took < DEADLINE  # not the 60 s timeout


def test_wait__times_out_unset():
    signal = StopSignal()

    assert asyncio.run(signal.wait(timeout=0.01)) is False
    assert not signal.is_set()


def test_wait__already_set__returns_at_once():
    signal = StopSignal()
    signal.set()

    assert asyncio.run(signal.wait(timeout=60)) is True
    assert signal.wait_blocking(timeout=60) is True


def test_wait_blocking__woken_at_once_when_set_while_a_thread_waits():
    # The event a blocking waiter waits on is made for it: one set after it began still wakes it.
    signal = StopSignal()
    result: list[tuple[bool, float]] = []

    def wait() -> None:
        started = time.monotonic()
        result.append((signal.wait_blocking(timeout=60), time.monotonic() - started))

    waiter = threading.Thread(target=wait)
    waiter.start()
    deadline = time.monotonic() + DEADLINE
    while signal._event is None:  # the waiter is in: its event is made
        assert time.monotonic() < deadline
        time.sleep(0.001)
    signal.set()
    waiter.join(DEADLINE)

    assert result and result[0][0] is True and result[0][1] < DEADLINE
    assert signal.wait_blocking(timeout=0) is True  # set stays set, without waiting


def test_wait_blocking__times_out_unset():
    signal = StopSignal()

    assert signal.wait_blocking(timeout=0.01) is False
    assert not signal.is_set()


def test_wait__on_two_loops_at_once__both_woken():
    signal = StopSignal()
    results: list[bool] = []
    entered = threading.Barrier(3)

    def waiter() -> None:
        async def wait() -> bool:
            entered.wait(DEADLINE)
            return await signal.wait(timeout=60)

        results.append(asyncio.run(wait()))

    threads = [threading.Thread(target=waiter) for _ in range(2)]
    for thread in threads:
        thread.start()
    entered.wait(DEADLINE)
    signal.set()
    for thread in threads:
        thread.join(DEADLINE)

    assert results == [True, True]


def test_on_set__called_once__and_at_once_when_already_set():
    signal = StopSignal()
    calls: list[str] = []
    signal.on_set(lambda: calls.append("early"))
    forget = signal.on_set(lambda: calls.append("forgotten"))
    forget()

    signal.set()
    signal.set()
    signal.on_set(lambda: calls.append("late"))

    assert calls == ["early", "late"]


def test_wait__a_waiter_that_gave_up_leaves_no_callback_behind():
    signal = StopSignal()

    asyncio.run(signal.wait(timeout=0.01))

    assert signal._callbacks == []
