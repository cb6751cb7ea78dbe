"""One database outage reads as one outage (executions/worker/database.py), whichever loop sees
its end first: the local runtime's real pool reaches PostgreSQL through a loopback relay the test
cuts and restores.

A claim loop on a connection of its own gets an answer as soon as the database is back, while the
shared pool still waits out its reconnection backoff; a renewal that times out on the pool then
is the same outage, not a second one.
"""

import asyncio
import logging
import time
from collections.abc import Callable
from urllib.parse import urlsplit, urlunsplit

import psycopg

from executions.worker.database import DatabaseState
from executions.worker.runtime import LocalWorkerRuntime
from tests.support.worker import FAST

BACK_TIMEOUT = 10.0  # seconds for the loops below to see the database back
WAIT_STEP_SECONDS = 0.01  # seconds between two looks at a condition


class Relay:
    """A loopback TCP relay to the test database. Cut, it drops the connections it carries and
    closes each new one at once (a server that went away); restored, it relays again."""

    def __init__(self, host: str, port: int) -> None:
        self._target = (host, port)
        self._carried: set[asyncio.StreamWriter] = set()
        self.cut = False
        self.refused = 0  # connections closed at once while cut
        self.port = 0

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        self.sever()
        self._server.close()
        await self._server.wait_closed()

    def sever(self) -> None:
        self.cut = True
        for writer in self._carried:
            writer.transport.abort()
        self._carried.clear()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.cut:
            self.refused += 1
            writer.transport.abort()
            return
        up_reader, up_writer = await asyncio.open_connection(*self._target)
        self._carried |= {writer, up_writer}
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))

    def url(self, dsn: str) -> str:
        """`dsn` through the relay; one TCP connection per attempt (no SSL or GSS try first)."""
        parts = urlsplit(dsn)
        netloc = f"{parts.netloc.rpartition('@')[0]}@127.0.0.1:{self.port}"
        query = "sslmode=disable&gssencmode=disable"
        return urlunsplit(parts._replace(netloc=netloc, query=query))


async def _pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
    try:
        while data := await source.read(65536):
            sink.write(data)
            await sink.drain()
    except ConnectionError:
        pass
    finally:
        sink.transport.abort()


async def _until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + BACK_TIMEOUT
    while not condition():
        assert time.monotonic() < deadline, what
        await asyncio.sleep(WAIT_STEP_SECONDS)


async def _renewal(runtime: LocalWorkerRuntime, database: DatabaseState) -> None:
    """One renewal as the heartbeat makes it: a shared connection waited for a renewal period."""
    try:
        async with runtime.borrow(timeout=FAST.renew_seconds) as conn:
            await conn.execute("SELECT 1")
    except psycopg.OperationalError as exc:  # PoolTimeout included
        database.failed("renewal", exc)
    else:
        await database.reached("renewal")


async def _outage_and_return(dsn: str) -> DatabaseState:
    parts = urlsplit(dsn)
    relay = Relay(parts.hostname or "127.0.0.1", parts.port or 5432)
    await relay.start()
    url = relay.url(dsn)
    runtime = LocalWorkerRuntime(conninfo=url, config=FAST)
    await runtime.open()
    database = DatabaseState("outage-test", on_return=runtime.refresh_connections)
    try:
        relay.sever()
        # Renewals meet the outage on both shared connections; the pool's attempts to replace
        # them fail, and it retries each about a second later (its reconnection backoff).
        for _ in range(2):
            await _renewal(runtime, database)
        await _until(lambda: relay.refused >= 2, "the pool tried to reconnect twice")
        relay.cut = False

        async def claims() -> None:  # on a connection of its own: an answer at once
            async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
                await conn.execute("SELECT 1")
            await database.reached("claim")

        async def renewals() -> None:  # a renewal period apart, as the heartbeat's
            await _renewal(runtime, database)
            while database.down_since is not None:
                await asyncio.sleep(FAST.renew_seconds)
                await _renewal(runtime, database)

        await asyncio.wait_for(asyncio.gather(claims(), renewals()), BACK_TIMEOUT)
        await _renewal(runtime, database)  # and the next one is served too
    finally:
        await runtime.close()
        await relay.close()
    return database


def test_outage__a_renewal_timing_out_on_the_refilling_pool_is_the_same_outage(runtime_dsn, caplog):
    with caplog.at_level(logging.WARNING, logger="executions.worker"):
        database = asyncio.run(_outage_and_return(runtime_dsn))

    said = [r.getMessage() for r in caplog.records if r.name == "executions.worker"]
    assert said.count("database unreachable") == 1, said
    assert said.count("database reachable again") == 1, said
    assert database.outages == 1
    assert database.down_since is None and database.back_since is not None
