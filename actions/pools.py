"""Pooled HTTP connections: one aiohttp `ClientSession` per event loop, so one per worker process
(why each setting: docs/adr/0016-adapters-on-an-asynchronous-client.md).

A session keeps no cookie, follows no redirect, retries nothing (not even on a reused connection
found dropped), sets no time limit of its own (the watchdog holds them) and takes nothing from
the environment. Its connector tells the call's watchdog when the connection is had, where
"sent" begins; a call's start gate (a rate's moment, executions/worker/limiter.py) is awaited
just before, so nothing varies between the gate and the request's first byte. Sessions belong
to their loop: `close_client()` must be awaited before that loop closes.
"""

import asyncio
import contextlib
import contextvars
import functools
import ssl
import threading
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import aiohttp
import certifi

from .resolver import ResolverThreads, ThreadsResolver
from .watchdog import watch_connected

# Header limits of the status line and headers a provider may send, as http.client had them.
MAX_LINE_BYTES = 65_536  # bytes of the status line or of one header
MAX_HEADERS = 100  # headers in one response
KEEPALIVE_SECONDS = 15.0  # seconds an idle pooled connection is kept
RESOLVER_THREADS = 100  # providers' names resolved at once, at most, by the whole process

# Not the loop's resolver (resolver.py says why); one set for every loop of the process.
_RESOLVER_THREADS = ResolverThreads(RESOLVER_THREADS, "adapter-resolver")

_clients: dict[asyncio.AbstractEventLoop, aiohttp.ClientSession] = {}
_clients_lock = threading.Lock()  # loops on other threads (the prober's) add theirs too


# The current call's start gate, awaited once its connection is had (None: none).
_gate: contextvars.ContextVar[Callable[[], Awaitable[None]] | None] = contextvars.ContextVar(
    "actions_start_gate", default=None
)


@contextlib.contextmanager
def start_gate(gate: Callable[[], Awaitable[None]]) -> Iterator[None]:
    """Inside this block, an HTTP call awaits `gate` once its connection is had, just before
    its request is written: still under the connect timeout, and a gate that fails is a
    request not sent (the transport's "could not connect")."""
    token = _gate.set(gate)
    try:
        yield
    finally:
        _gate.reset(token)


class _Connector(aiohttp.TCPConnector):
    async def connect(self, req: Any, traces: Any, timeout: Any) -> aiohttp.connector.Connection:
        connection = await super().connect(req, traces, timeout)
        gate = _gate.get()
        if gate is not None:
            try:
                await gate()
            except BaseException as exc:
                connection.release()  # nothing was written on it: back to the pool
                if isinstance(exc, Exception):  # a request not sent, as a connection failure
                    raise aiohttp.ClientConnectionError("the start gate failed") from None
                raise
        watch_connected()  # the request is written next, without another wait in between
        return connection


@functools.lru_cache(maxsize=4)
def _tls_context(ca_file: str) -> ssl.SSLContext:
    # Loading the bundle costs milliseconds: once per bundle file, shared by every session.
    return ssl.create_default_context(cafile=ca_file)


def _session() -> aiohttp.ClientSession:
    connector = _Connector(
        ssl=_tls_context(certifi.where()),
        # Bounded by the slots: each makes one call at a time.
        limit=0,
        keepalive_timeout=KEEPALIVE_SECONDS,
        resolver=ThreadsResolver(_RESOLVER_THREADS),  # the system's resolver, as for any socket
    )
    session = aiohttp.ClientSession(
        connector=connector,
        cookie_jar=aiohttp.DummyCookieJar(),
        trust_env=False,
        timeout=aiohttp.ClientTimeout(total=None, connect=None, sock_read=None, sock_connect=None),
        auto_decompress=True,
        max_line_size=MAX_LINE_BYTES,
        max_field_size=MAX_LINE_BYTES,
        max_headers=MAX_HEADERS,
        skip_auto_headers=("Accept", "Accept-Encoding"),
    )
    # No retry of a request whose reused connection turned out dropped: for a PUT that is a
    # write sent twice.
    session._retry_connection = False
    return session


def client() -> aiohttp.ClientSession:
    """The running loop's session, created on first use."""
    loop = asyncio.get_running_loop()
    session = _clients.get(loop)
    if session is None or session.closed:
        with _clients_lock:
            for stale in [other for other in _clients if other.is_closed()]:
                del _clients[stale]  # its loop closed without closing it: its sockets went too
            session = _clients[loop] = _session()
    return session


async def close_client() -> None:
    """Close the running loop's session and its pooled connections (a new one opens on use)."""
    with _clients_lock:
        session = _clients.pop(asyncio.get_running_loop(), None)
    if session is not None:
        await session.close()
