"""The shared HTTP transport: Retry-After parsing and the pool managers' lifetime."""

import gc
import threading
from datetime import UTC, datetime

import pytest

from actions import pools, transport, watchdog
from actions.transport import MAX_RETRY_AFTER_SECONDS, parse_retry_after

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


def test_pool_manager__closed_when_its_thread_ends(provider):
    seen = {}

    def work() -> None:
        manager = pools.pool_manager()
        manager.request("GET", provider.url("/ping"), timeout=2).release_conn()
        seen["manager"] = manager
        seen["pools_while_alive"] = len(manager.pools)

    worker = threading.Thread(target=work)
    worker.start()
    worker.join()
    gc.collect()

    assert seen["pools_while_alive"] == 1
    # The thread's holder is gone, so its finalizer closed the manager's pools.
    assert len(seen["manager"].pools) == 0


def test_watchdog__one_thread_for_every_call__finished_deadlines_do_not_pile_up(provider):
    def call() -> None:
        transport.exchange(
            method="GET",
            url=provider.url("/ping"),
            headers={},
            body=None,
            deadline=transport.Deadline.after(600),  # long: only a cancel can drop it
            connect_timeout=2,
            max_bytes=1024,
            want_body=lambda status: True,
        )

    for _ in range(300):
        call()

    watchdogs = [t for t in threading.enumerate() if t.name == "http-watchdog"]
    assert len(watchdogs) == 1
    # 300 finished calls, their 600-second deadlines cancelled: the heap was rebuilt on the way.
    assert len(watchdog._timers._due) < 150
