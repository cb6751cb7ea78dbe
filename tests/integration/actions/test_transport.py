"""The shared HTTP transport: Retry-After parsing, the sessions' lifetime, the watchdog's timers."""

import asyncio
import gc
import threading
import time
from datetime import UTC, datetime

import pytest

from actions import pools, transport
from actions.base import StopSignal
from actions.blocking import BlockingRunner
from actions.transport import MAX_RETRY_AFTER_SECONDS, parse_retry_after
from actions.watchdog import Watchdog
from tests.support.providers import slow_body

from .conftest import run

NOW = datetime(2026, 1, 10, 12, 0, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("header", "seconds"),
    [
        ("120", 120.0),
        (" 0 ", 0.0),
        ("Sat, 10 Jan 2026 12:01:30 GMT", 90.0),
        ("Sat, 10 Jan 2026 11:00:00 GMT", 0.0),  # in the past
        ("Saturday, 10-Jan-26 12:00:10 GMT", 10.0),  # RFC 850, still an HTTP-date
        ("99999999", float(MAX_RETRY_AFTER_SECONDS)),
        ("Tue, 10 Jan 2040 12:00:00 GMT", float(MAX_RETRY_AFTER_SECONDS)),
        ("-5", None),
        ("1.5", None),
        ("soon", None),
        ("", None),
        (None, None),
    ],
)
def test_parse_retry_after(header, seconds):
    assert parse_retry_after(header, now=NOW) == seconds


async def _ping(provider, *, budget: float = 2.0) -> transport.Reply:
    return await transport.exchange(
        method="GET",
        url=provider.url("/ping"),
        headers={},
        body=None,
        deadline=transport.Deadline.after(budget),
        connect_timeout=2,
        max_bytes=1024,
        want_body=lambda status: True,
    )


def test_client__closed_with_its_loop_runner(provider):
    async def ping_and_show_the_client():
        await _ping(provider)
        return pools.client()

    with BlockingRunner() as runner:
        session = runner.run(ping_and_show_the_client())
        assert not session.closed

    assert session.closed  # and with it its pooled connection
    assert provider.calls("/ping") == 1


def _client_threads() -> set[threading.Thread]:
    """This process's threads, less the ones the loopback provider serves connections from."""
    return {t for t in threading.enumerate() if "process_request_thread" not in t.name}


def test_watchdog__no_thread_for_any_call__finished_deadlines_leave_no_timer(provider):
    threads = _client_threads()

    async def calls():
        for _ in range(300):
            await _ping(provider, budget=600)  # long: only a disarmed watchdog drops it
        loop = asyncio.get_running_loop()
        return [
            timer
            for timer in loop._scheduled
            if not timer.cancelled() and getattr(timer._callback, "__func__", None) is Watchdog._due
        ]

    armed = run(calls())

    assert _client_threads() == threads
    assert armed == []  # 300 calls ended, every 600-second deadline disarmed


def test_watchdog__a_call_watching_a_stop_signal_leaves_no_reference_cycle(provider):
    # Each call of a run watches its stop signal; what the watchdog leaves must be freed by
    # reference counting alone, or every call's watchdog, task and signal wait for the cyclic
    # collector (a young collection every few executions of a busy worker).
    async def calls():
        for _ in range(20):
            await transport.exchange(
                method="GET",
                url=provider.url("/ping"),
                headers={},
                body=None,
                deadline=transport.Deadline.after(2),
                connect_timeout=2,
                max_bytes=1024,
                want_body=lambda status: True,
                cancelled=StopSignal(),
            )

    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        run(calls())
        gc.collect()
        kept = [o for o in gc.garbage if isinstance(o, Watchdog | StopSignal)]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()

    assert kept == []


def test_exchange__stopped_while_reading_the_body__its_stage_and_status(provider):
    provider.plan("/charges", slow_body(30))  # half the body now, the rest in 30 s
    stop = StopSignal()

    async def first_chunk_stops_it(chunk: bytes) -> None:
        stop.set()

    async def call() -> transport.Reply:
        return await transport.exchange(
            method="POST",
            url=provider.url("/charges"),
            headers={"Content-Type": "application/json"},
            body=b"{}",
            deadline=transport.Deadline.after(20),
            connect_timeout=2,
            max_bytes=1024,
            want_body=lambda status: True,
            sink=first_chunk_stops_it,
            cancelled=stop,
        )

    started = time.monotonic()
    with pytest.raises(transport.TransportError) as caught:
        run(call())

    assert time.monotonic() - started < 5
    error = caught.value
    assert (error.stage, error.status, error.final) == (transport.Stage.BODY, 200, False)
    assert error.reason == "the execution was stopped"


def test_start_gate__awaited_once_connected__the_request_written_after_it(provider):
    """A call inside `pools.start_gate` (a rate's moment, executions/worker/limiter.py) awaits
    the gate once its connection is had and before a byte is written: what varies before it
    (a first call's session, a new connection) cannot delay the request past it."""
    entered: list[tuple[float, int]] = []

    async def gate() -> None:
        entered.append((time.monotonic(), provider.calls("/ping")))
        await asyncio.sleep(0.2)

    async def gated_ping() -> transport.Reply:
        with pools.start_gate(gate):
            return await _ping(provider)

    run(gated_ping())

    ((at, seen_then),) = entered
    assert seen_then == 0  # nothing written before the gate
    (received,) = provider.requests("/ping")
    assert received.at - at >= 0.2


def test_start_gate__a_gate_that_fails__nothing_sent(provider):
    async def gate() -> None:
        raise RuntimeError("the limiter could not be reached")

    async def gated_ping() -> transport.Reply:
        with pools.start_gate(gate):
            return await _ping(provider)

    with pytest.raises(transport.TransportError) as caught:
        run(gated_ping())

    assert caught.value.stage is transport.Stage.NOT_SENT
    assert provider.calls("/ping") == 0
