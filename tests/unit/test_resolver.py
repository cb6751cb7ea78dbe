"""Name resolution on threads of its owner's (actions/resolver.py): answers as aiohttp's own
resolver does, never more threads than its bound, all of them daemons, and a resolution whose
caller gave up before a thread took it is never made."""

import asyncio
import threading

import aiohttp
import uvloop

from actions.resolver import ResolverThreads, ThreadsResolver


def on_uvloop(coro_fn):
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(coro_fn())


def test_answers_as_aiohttp_threaded_resolver_does():
    async def both(host: str):
        ours = await ThreadsResolver(ResolverThreads(2, "test-resolver")).resolve(host, 8080)
        theirs = await aiohttp.ThreadedResolver().resolve(host, 8080)
        return ours, theirs

    for host in ("127.0.0.1", "localhost"):
        ours, theirs = on_uvloop(lambda host=host: both(host))
        assert ours == theirs and ours


def test_bounded_daemon_threads__a_call_given_up_before_it_started_is_never_made():
    threads = ResolverThreads(2, "test-resolver-bound")
    release = threading.Event()
    made: list[int] = []

    def blocked(n: int) -> int:
        release.wait(10)
        made.append(n)
        return n

    futures = [threads.submit(lambda n=n: blocked(n)) for n in range(5)]
    running = [t for t in threading.enumerate() if t.name == "test-resolver-bound"]
    assert len(running) == 2 and all(t.daemon for t in running)
    assert futures[4].cancel()  # still queued: dropped
    release.set()
    assert [f.result(10) for f in futures[:4]] == [0, 1, 2, 3]
    assert sorted(made) == [0, 1, 2, 3]
    assert len([t for t in threading.enumerate() if t.name == "test-resolver-bound"]) == 2
