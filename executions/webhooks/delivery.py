"""The delivery loop `runworker` runs beside its claim loop, on the same event loop
(docs/adr/0020-webhooks-from-an-outbox.md, "Delivered by runworker").

Invariants: no connection of its own (a cycle borrows one of the runtime's shared ones, an
attempt in flight holds none); at least once, with a stable event id (claimed under a new token
and a hold before it is sent, its result written after under that token); in order per execution
for each subscription; results written in cycles, one statement for all waiting, then a claim (at
most every CLAIM_SPACING_SECONDS; a result waits at most RESULT_WAIT_SECONDS); retries with full
jitter until WEBHOOK_MAX_AGE_HOURS; `stop` drops a cycle waiting for a connection.
"""

import asyncio
import contextlib
import logging
import math
import random
import time
from collections.abc import Coroutine
from typing import Any, TypeVar

import aiohttp
import psycopg
from psycopg_pool import PoolTimeout

from ..queue.steps import run_async
from ..worker.groupcommit import ConnectionSource, borrowed
from .config import CLAIM_BATCH, CONCURRENCY, POLL_SECONDS, WebhookConfig
from .plans import (
    Claimed,
    Result,
    Written,
    deliveries_claim,
    deliveries_record,
    retry_delay,
    subscribed,
)
from .sender import WebhookSender
from .signing import signature_header

logger = logging.getLogger("executions.webhooks")

CANCEL_WAIT_SECONDS = 0.25  # seconds a claim given up at stop gets to end its cancellation
ERROR_BACKOFF_SECONDS = 1.0  # seconds after a database error before claiming again
CLAIM_SPACING_SECONDS = 0.02  # seconds between claims, unless the last one came back full
RESULT_WAIT_SECONDS = 0.02  # seconds a result waits at most for a claim to be written with
STOP_GRACE_SECONDS = 2.0  # seconds in-flight attempts get at shutdown (then: due again later)

# Why a cycle runs (WebhookDeliverer._wait).
POLL = "poll"
CLAIM = "claim"
FLUSH = "flush"

Value = TypeVar("Value")


class WebhookDeliverer:
    """Claims due deliveries, sends them, records what happened; `run` until `stop` is set."""

    def __init__(
        self,
        *,
        borrow: ConnectionSource,
        config: WebhookConfig,
        resolver: aiohttp.abc.AbstractResolver | None = None,
        rng: random.Random | None = None,
        concurrency: int = CONCURRENCY,
    ) -> None:
        self.borrow = borrow
        self.config = config
        self.concurrency = concurrency
        self.rng = rng or random.Random()  # noqa: S311  # jitter, not secrets
        self.sender = WebhookSender(
            timeout_seconds=config.timeout_seconds,
            allow_http=config.allow_http,
            allow_private_networks=config.allow_private_networks,
            resolver=resolver,
        )
        self.attempted = 0  # attempts made by this loop, for tests and the benchmark
        self.delivered = 0  # attempts delivered, and recorded so
        self.claims = 0  # claim statements sent
        self.records = 0  # result statements sent
        self._tasks: set[asyncio.Task[None]] = set()
        self._results: list[Result] = []  # ended attempts, for the next cycle to write
        self._due = False  # a poke, or a full claim: claim at the next chance
        self.subscribed = False  # whether any subscription exists, as of the last poll
        self._changed: asyncio.Event | None = None  # a poke, a result, a free slot, or a stop
        self._stopping: asyncio.Event | None = None  # set by `stop`, on the loop's thread
        self._stop_requested = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._poll_at = 0.0  # monotonic time of the next poll (the first: at once)
        self._claim_after = 0.0  # monotonic time before which a poke's claim waits
        self._results_since = 0.0  # monotonic time the oldest result waiting came

    def poke(self) -> None:
        """Something may be due now (an execution just ended here): claim soon, if any
        subscription exists. Call it on the loop's thread."""
        if not self.subscribed:
            return
        self._due = True
        if self._changed is not None:
            self._changed.set()

    def notified(self) -> None:
        """Another writer announced deliveries due now (sql.NOTIFY_WEBHOOKS): a subscription
        exists, so claim soon, without waiting for the poll to say so. On the loop's thread."""
        self.subscribed = True
        self.poke()

    def stop(self) -> None:
        """Stop `run` (from any thread): a cycle still waiting for a connection is dropped at
        once, attempts in flight and their results get STOP_GRACE_SECONDS."""
        self._stop_requested = True
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._stop_now)

    def _stop_now(self) -> None:
        if self._stopping is not None:
            self._stopping.set()
        if self._changed is not None:
            self._changed.set()

    async def run(self) -> None:
        """Until `stop` is called."""
        self._changed = asyncio.Event()
        self._stopping = stopping = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        if self._stop_requested:  # stopped before it started
            stopping.set()
        try:
            while not stopping.is_set():
                why = await self._wait()
                if stopping.is_set():
                    break
                try:
                    await self._unless_stopped(self._cycle(why))
                except _Stopped:
                    break
                except (psycopg.Error, PoolTimeout) as exc:
                    logger.warning("webhook cycle failed", extra={"detail": str(exc)[:200]})
                    await self._sleep(ERROR_BACKOFF_SECONDS)
        finally:
            await self._shutdown()

    async def _cycle(self, why: str) -> None:
        """One statement for the results waiting, if any, then (for a poke, a poll, or a result
        that let a later event of its execution go) a claim of what is due, if a subscription
        exists and a slot is free, all on one borrowed connection; the claimed start sending."""
        claim = why != FLUSH
        if claim:
            self._due = False
        async with borrowed(self.borrow) as conn:
            if self._results and await self._record(conn):
                claim = True  # a successor waits: claim it now, whatever the spacing
            if why == POLL:
                self.subscribed = await run_async(conn, subscribed())
            limit = min(CLAIM_BATCH, self.concurrency - len(self._tasks))
            if not claim or not self.subscribed or limit <= 0:
                return
            claimed = await run_async(
                conn, deliveries_claim(limit=limit, hold_seconds=self.config.hold_seconds)
            )
        self.claims += 1
        if len(claimed) == limit:
            self._due = True  # a full claim: more is probably due, claim again at once
            self._claim_after = 0.0
        else:
            # Pokes close together share one claim: at most one per CLAIM_SPACING.
            self._claim_after = time.monotonic() + CLAIM_SPACING_SECONDS
        loop = asyncio.get_running_loop()
        for item in claimed:
            task = loop.create_task(self._deliver(item))
            self._tasks.add(task)
            task.add_done_callback(self._done)

    async def _record(self, conn: psycopg.AsyncConnection) -> bool:
        """Write the results waiting (one statement; item by item if it fails on one of them)
        and act on them; True if a later delivery of one of their executions waits. Kept for a
        later cycle when the database cannot be reached."""
        batch = self._results[:]
        try:
            written = await self._write(conn, batch)
        except psycopg.OperationalError:
            raise  # the connection or the server: kept, written by a later cycle
        except psycopg.Error:
            written = {}
            for result in batch:  # isolate the fault: each result alone
                try:
                    written.update(await self._write(conn, [result]))
                except psycopg.OperationalError:
                    raise
                except psycopg.Error as exc:
                    logger.warning(
                        "webhook result not written; it will be sent again",
                        extra={"delivery_id": result.id, "detail": str(exc)[:200]},
                    )
        del self._results[: len(batch)]
        self._results_since = time.monotonic()  # those that came meanwhile: from now
        return self._settled(batch, written)

    async def _write(
        self, conn: psycopg.AsyncConnection, batch: list[Result]
    ) -> dict[int, Written]:
        self.records += 1
        plan = deliveries_record(results=batch, max_age_seconds=self.config.max_age_seconds)
        return await run_async(conn, plan)

    def _settled(self, batch: list[Result], written: dict[int, Written]) -> bool:
        successor = False
        for result in batch:
            got = written.get(result.id)
            if got is None:
                continue  # taken over by another claim meanwhile, or written already
            successor = successor or got.successor
            if got.status == "DELIVERED":
                self.delivered += 1
            elif got.status == "PENDING" and self._loop is not None:
                self._loop.call_later(result.delay, self.poke)  # due then: claim then
            elif got.status == "FAILED":
                logger.warning(
                    "webhook delivery failed for good",
                    extra={"delivery_id": result.id, "attempts": result.attempts},
                )
        return successor

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        # Only the slot that ends a full house wakes the loop: it waits for room then, and for
        # nothing an attempt's end changes otherwise (no wake-up per delivered event).
        if self._changed is not None and len(self._tasks) == self.concurrency - 1:
            self._changed.set()

    async def _wait(self) -> str:
        """Until the next cycle is due, and why: POLL (the poll's time, with room for another
        attempt), CLAIM (a poke or a full claim before, room, and CLAIM_SPACING past the last
        claim), or FLUSH (results waiting for RESULT_WAIT_SECONDS); or until `stop`. Woken by
        events (a poke, a first result, a slot coming free, `stop`) or by the earliest of those
        times, never per attempt."""
        changed, stopping = self._changed, self._stopping
        if changed is None or stopping is None:  # run() sets them before its first wait
            return POLL
        while not stopping.is_set():
            room = len(self._tasks) < self.concurrency
            now = time.monotonic()
            wake_at = math.inf
            if room:
                if now >= self._poll_at:
                    self._poll_at = now + POLL_SECONDS
                    return POLL
                wake_at = self._poll_at
                if self._due:
                    if now >= self._claim_after:
                        return CLAIM
                    wake_at = min(wake_at, self._claim_after)
            if self._results:
                flush_at = self._results_since + RESULT_WAIT_SECONDS
                if now >= flush_at:
                    return FLUSH
                wake_at = min(wake_at, flush_at)
            changed.clear()
            if wake_at == math.inf:  # no room and nothing to write: a free slot sets `changed`
                await changed.wait()
                continue
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(wake_at - now, 0.001)):
                    await changed.wait()
        return FLUSH

    async def _sleep(self, seconds: float) -> None:
        """`seconds`, or until `stop`."""
        if self._stopping is None:
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await self._stopping.wait()

    async def _unless_stopped(self, step: Coroutine[Any, Any, Value]) -> Value:
        """`step`'s result, unless `stop` comes first: then it is cancelled and `_Stopped`
        raised. A cycle waiting for a shared connection (the database may be gone) never holds
        up the worker's exit; a claim cancelled after it committed leaves its deliveries
        PENDING under their hold, sent again once it passes (at least once)."""
        stopping = self._stopping
        task = asyncio.ensure_future(step)
        if stopping is None:
            return await task
        stopped = asyncio.ensure_future(stopping.wait())
        try:
            await asyncio.wait({task, stopped}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopped.cancel()
        if task.done():
            return task.result()
        task.cancel()
        task.add_done_callback(_dropped)
        # Bounded: a statement's cancel request may meet no server (psycopg tries for 5 s).
        await asyncio.wait({task}, timeout=CANCEL_WAIT_SECONDS)
        raise _Stopped

    async def _deliver(self, claimed: Claimed) -> None:
        body = claimed.body.encode()
        secrets = [claimed.secret, *([claimed.previous_secret] if claimed.previous_secret else [])]
        headers = {
            "Orquestador-Event-Id": claimed.event_id,
            "Orquestador-Signature": signature_header(
                secrets=secrets, timestamp=int(time.time()), body=body
            ),
        }
        attempt = await self.sender.send(url=claimed.url, body=body, headers=headers)
        self.attempted += 1
        delay = (
            0.0
            if attempt.delivered
            else retry_delay(
                attempts=claimed.attempts,
                base_seconds=self.config.retry_base_seconds,
                rng=self.rng,
            )
        )
        self._results.append(
            Result(claimed.id, claimed.claim_token, claimed.attempts, attempt, delay)
        )
        if len(self._results) == 1:  # the first one waiting: written within RESULT_WAIT
            self._results_since = time.monotonic()
            if self._changed is not None:
                self._changed.set()

    async def _shutdown(self) -> None:
        deadline = time.monotonic() + STOP_GRACE_SECONDS
        if self._tasks:
            _, pending = await asyncio.wait(set(self._tasks), timeout=STOP_GRACE_SECONDS)
            for task in pending:  # left PENDING under their hold: sent again later
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        if self._results:
            try:
                async with asyncio.timeout(max(deadline - time.monotonic(), CANCEL_WAIT_SECONDS)):
                    async with borrowed(self.borrow) as conn:
                        await self._record(conn)
            except (psycopg.Error, PoolTimeout, TimeoutError) as exc:
                # Left PENDING under their hold: due again once it passes (at least once).
                logger.warning(
                    "webhook results not written at stop; they will be sent again",
                    extra={"deliveries": len(self._results), "detail": str(exc)[:200]},
                )
        await self.sender.close()


class _Stopped(Exception):
    """The loop was told to stop while a statement of its own waited (its cycle is dropped)."""


def _dropped(task: asyncio.Future[Any]) -> None:
    """A step given up at stop: its outcome, whatever it is, is not wanted."""
    if not task.cancelled():
        task.exception()
