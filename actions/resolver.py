"""Name resolution for aiohttp's connectors on threads of their owner's, never the event loop's.

Under uvloop, `loop.getaddrinfo` runs on libuv's pool of four threads for the whole process,
which every new connection also waits for (uvloop's sock_connect looks its numeric address up
there again), and which the loop's `close` waits out. A name that resolves slowly (its DNS
decides) held all four: the adapters' calls timed out connecting behind the webhook deliveries'
lookups, and a worker that said it stopped did not exit. Each owner (the adapters' sessions,
the delivery loop) gets its own `ResolverThreads`: daemon threads, a bounded number, and a lookup
whose caller gave up before a thread took it is dropped.
"""

import asyncio
import concurrent.futures
import functools
import queue
import socket
import threading
from collections.abc import Callable
from typing import Any

import aiohttp

_NUMERIC = socket.AI_NUMERICHOST | socket.AI_NUMERICSERV


class ResolverThreads:
    """At most `most` daemon threads named `name`, started as calls come, for blocking lookups.
    A call cancelled before a thread took it is dropped; one stuck in the system's resolver
    never keeps the process from exiting."""

    def __init__(self, most: int, name: str) -> None:
        self._most = most
        self._name = name
        self._work: queue.SimpleQueue[tuple[concurrent.futures.Future[Any], Callable[[], Any]]]
        self._work = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads = 0
        self._idle = 0

    def submit(self, fn: Callable[[], Any]) -> concurrent.futures.Future[Any]:
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self._work.put((future, fn))
        with self._lock:
            spawn = self._idle == 0 and self._threads < self._most
            if spawn:
                self._threads += 1
            elif self._idle:
                self._idle -= 1  # that idle thread takes this call
        if spawn:
            threading.Thread(target=self._serve, name=self._name, daemon=True).start()
        return future

    def _serve(self) -> None:
        while True:
            future, call = self._work.get()
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(call())
                except BaseException as exc:  # handed to whoever awaits it
                    future.set_exception(exc)
            del future, call  # hold nothing while idle
            with self._lock:
                self._idle += 1


class ThreadsResolver(aiohttp.abc.AbstractResolver):
    """The system's resolver, asked as aiohttp's ThreadedResolver asks it, on `threads`."""

    def __init__(self, threads: ResolverThreads) -> None:
        self._threads = threads

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[aiohttp.abc.ResolveResult]:
        found = self._threads.submit(functools.partial(_lookup, host, port, family))
        return await asyncio.wrap_future(found)  # cancelled: dropped unless already running

    async def close(self) -> None:
        pass


def _lookup(host: str, port: int, family: socket.AddressFamily) -> list[aiohttp.abc.ResolveResult]:
    """What ThreadedResolver.resolve answers, as one blocking call."""
    infos = socket.getaddrinfo(
        host, port, family=family, type=socket.SOCK_STREAM, flags=socket.AI_ADDRCONFIG
    )
    found = []
    for found_family, _, proto, _, address in infos:
        if found_family == socket.AF_INET6:
            if len(address) < 3:
                continue  # no IPv6 in this Python
            if address[3]:  # a scope (link-local): its numeric form names it
                name, service = socket.getnameinfo(
                    address, socket.NI_NUMERICHOST | socket.NI_NUMERICSERV
                )
                address = (name, int(service))
        elif found_family != socket.AF_INET:
            continue
        found.append(
            aiohttp.abc.ResolveResult(
                hostname=host,
                host=str(address[0]),
                port=int(address[1]),
                family=found_family,
                proto=proto,
                flags=_NUMERIC,
            )
        )
    return found
