"""The delivery loop `runworker` runs beside its claim loop, on the same event loop.

Invariants:
- connections: none of its own. Each claim and each batch of results borrows one of the
  runtime's shared connections for one autocommit statement (executions/worker/runtime.py), so
  the process stays within its budget; an attempt in flight holds none;
- at least once, with a stable event id: a delivery is claimed (one more attempt, a new claim
  token, held for the timeout plus a margin) before it is sent, and its result written after,
  fenced by that token. A process that dies in between leaves it PENDING; it is due again once
  the hold passes, and some process sends it again (same event id, same body);
- in order per execution for each subscription: the claim skips a delivery while an earlier one
  of the same execution and subscription is PENDING, in flight included
  (sql.WEBHOOK_DELIVERIES_CLAIM);
- retries: exponential backoff with full jitter (a uniform delay up to WEBHOOK_RETRY_BASE_SECONDS
  doubled per attempt, at most RETRY_MAX_SECONDS) until WEBHOOK_MAX_AGE_HOURS, then FAILED;
- wake-ups: `poke` (the scheduler's, after each run ends here), `notified` (the scheduler's
  listening connection heard NOTIFY_WEBHOOKS: the API's or an operator's changes, a ping, a
  redelivery, the remote runtime's endpoint), a timer at the earliest retry this loop scheduled,
  and a poll every POLL_SECONDS for the rest (other runworkers' runs, a lost notification, a
  worker that cannot LISTEN). Wake-ups close together share one claim (CLAIM_SPACING_SECONDS);
- results of concurrent attempts share one statement (executions/worker/groupcommit.py);
- no wake-up per event: an attempt's end wakes the loop only when it frees the one slot a full
  loop waits for; every wait is on events (a poke, a free slot, `stop`) or the poll's deadline;
- stopping (`stop`, from any thread): a claim still waiting for a connection (the database may
  be gone) is dropped at once, and attempts in flight get STOP_GRACE_SECONDS, so the worker's
  exit waits on neither.
"""

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import aiohttp
import psycopg
from psycopg.types.json import Jsonb
from psycopg_pool import PoolTimeout

from .. import sql
from ..steps import Plan, Query, Steps
from ..worker.groupcommit import ConnectionSource, GroupCommit, on
from .config import CLAIM_BATCH, CONCURRENCY, POLL_SECONDS, RETRY_MAX_SECONDS, WebhookConfig
from .sender import Attempt, WebhookSender
from .signing import signature_header

logger = logging.getLogger("executions.webhooks")

CANCEL_WAIT_SECONDS = 0.25  # seconds a claim given up at stop gets to end its cancellation
ERROR_BACKOFF_SECONDS = 1.0  # seconds after a database error before claiming again
CLAIM_SPACING_SECONDS = 0.02  # seconds between claims that found less than they asked for
STOP_GRACE_SECONDS = 2.0  # seconds in-flight attempts get at shutdown (then: due again later)

Value = TypeVar("Value")


@dataclass(frozen=True, slots=True)
class Claimed:
    """One claimed delivery, as WEBHOOK_DELIVERIES_CLAIM returns it."""

    id: int
    claim_token: int
    attempts: int
    event_id: Any
    body: str  # the event as JSON: {id, type, createdAt, data}, the same for every attempt
    url: str
    secret: str
    previous_secret: str | None


@dataclass(frozen=True)
class Result:
    id: int
    token: int
    attempt: Attempt
    delay: float  # seconds until the next attempt, if there is one

    def row(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "token": self.token,
            "delivered": self.attempt.delivered,
            "code": self.attempt.code,
            "error": self.attempt.error,
            "body": self.attempt.body,
            "delay": self.delay,
        }


def deliveries_claim(*, limit: int, hold_seconds: float) -> Plan[list[Claimed]]:
    """Claim up to `limit` due deliveries (one statement)."""
    return Plan(_claim(limit, hold_seconds))


def _claim(limit: int, hold_seconds: float) -> Steps[list[Claimed]]:
    rows = yield Query(sql.WEBHOOK_DELIVERIES_CLAIM, {"limit": limit, "hold_seconds": hold_seconds})
    return [Claimed(*row) for row in rows]


def deliveries_record(*, results: Sequence[Result], max_age_seconds: float) -> Plan[dict[int, str]]:
    """Write the results of attempts (one statement); the plan returns each written delivery's
    new status by id (one missing: another claim took it over meanwhile)."""
    return Plan(_record(results, max_age_seconds))


def _record(results: Sequence[Result], max_age_seconds: float) -> Steps[dict[int, str]]:
    rows = yield Query(
        sql.WEBHOOK_DELIVERIES_RECORD,
        {
            # In id order: the statement locks the deliveries in the order of its items.
            "items": Jsonb([r.row() for r in sorted(results, key=lambda r: r.id)]),
            "max_age_seconds": max_age_seconds,
        },
    )
    return {row[0]: row[1] for row in rows}


def _subscribed() -> Steps[bool]:
    row = yield Query(sql.WEBHOOK_SUBSCRIBED, fetch="one")
    return bool(row and row[0])


def retry_delay(*, attempts: int, base_seconds: float, rng: random.Random) -> float:
    """Full jitter: uniform up to base * 2^(attempts - 1), capped."""
    ceiling = min(RETRY_MAX_SECONDS, base_seconds * 2 ** min(max(attempts - 1, 0), 30))
    return rng.uniform(0, ceiling)


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
        self.records: GroupCommit[Result, str] = GroupCommit(
            lambda results: deliveries_record(
                results=results, max_age_seconds=config.max_age_seconds
            ),
            key=lambda result: result.id,
        )
        self.attempted = 0  # attempts made by this loop, for tests and the benchmark
        self.delivered = 0
        self.claims = 0  # claim statements sent
        self._tasks: set[asyncio.Task[None]] = set()
        self._due = False  # a poke, or a full claim: claim at the next chance
        self.subscribed = False  # whether any subscription exists, as of the last poll
        self._changed: asyncio.Event | None = None  # a poke, a slot came free, or a stop
        self._stopping: asyncio.Event | None = None  # set by `stop`, on the loop's thread
        self._stop_requested = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._poll_at = 0.0  # monotonic time of the next poll (the first: at once)

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
        """Stop `run` (from any thread): a claim still waiting for a connection is dropped at
        once, attempts in flight get STOP_GRACE_SECONDS."""
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
                polled = await self._wait()
                if stopping.is_set():
                    break
                self._due = False
                try:
                    if polled:
                        self.subscribed = await self._unless_stopped(
                            on(self.borrow, Plan(_subscribed()))
                        )
                    if not self.subscribed:
                        continue
                    limit = min(CLAIM_BATCH, self.concurrency - len(self._tasks))
                    claimed = await self._unless_stopped(
                        on(
                            self.borrow,
                            deliveries_claim(limit=limit, hold_seconds=self.config.hold_seconds),
                        ),
                    )
                except _Stopped:
                    break
                except (psycopg.Error, PoolTimeout) as exc:
                    logger.warning("webhook claim failed", extra={"detail": str(exc)[:200]})
                    await self._sleep(ERROR_BACKOFF_SECONDS)
                    continue
                self.claims += 1
                for item in claimed:
                    task = self._loop.create_task(self._deliver(item))
                    self._tasks.add(task)
                    task.add_done_callback(self._done)
                if len(claimed) == limit:
                    self._due = True  # a full claim: more is probably due
                else:
                    # Pokes close together share one claim: at most one per CLAIM_SPACING.
                    await self._sleep(CLAIM_SPACING_SECONDS)
        finally:
            await self._shutdown()

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        # Only the slot that ends a full house wakes the loop: it waits for room then, and for
        # nothing an attempt's end changes otherwise (no wake-up per delivered event).
        if self._changed is not None and len(self._tasks) == self.concurrency - 1:
            self._changed.set()

    async def _wait(self) -> bool:
        """Until there is room for another attempt and something may be due (a poke, a full
        claim before, or the poll's time: then True), or `stop`. Woken by events only."""
        changed, stopping = self._changed, self._stopping
        if changed is None or stopping is None:  # run() sets them before its first wait
            return True
        while not stopping.is_set():
            room = len(self._tasks) < self.concurrency
            now = time.monotonic()
            if room and now >= self._poll_at:
                self._poll_at = now + POLL_SECONDS
                return True
            if room and self._due:
                return False
            changed.clear()
            if not room:  # a slot coming free sets `changed`
                await changed.wait()
                continue
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(self._poll_at - now, 0.001)):
                    await changed.wait()
        return False

    async def _sleep(self, seconds: float) -> None:
        """`seconds`, or until `stop`."""
        if self._stopping is None:
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await self._stopping.wait()

    async def _unless_stopped(self, step: Coroutine[Any, Any, Value]) -> Value:
        """`step`'s result, unless `stop` comes first: then it is cancelled and `_Stopped`
        raised. A claim waiting for a shared connection (the database may be gone) never holds
        up the worker's exit; one cancelled after it committed leaves its deliveries PENDING
        under their hold, sent again once it passes (at least once)."""
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
            "Orquestador-Event-Id": str(claimed.event_id),
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
        result = Result(claimed.id, claimed.claim_token, attempt, delay)
        try:
            status = await self.records.submit(self.borrow, result)
        except (psycopg.Error, PoolTimeout) as exc:
            # Left PENDING under its hold: due again once the hold passes (at least once).
            logger.warning(
                "webhook result not written; it will be sent again",
                extra={"delivery_id": claimed.id, "detail": str(exc)[:200]},
            )
            return
        if attempt.delivered:
            self.delivered += 1
        elif status == "PENDING" and self._loop is not None:
            self._loop.call_later(delay, self.poke)  # due then: claim then, not at the poll
        if status == "FAILED":
            logger.warning(
                "webhook delivery failed for good",
                extra={"delivery_id": claimed.id, "attempts": claimed.attempts},
            )

    async def _shutdown(self) -> None:
        if self._tasks:
            _, pending = await asyncio.wait(set(self._tasks), timeout=STOP_GRACE_SECONDS)
            for task in pending:  # left PENDING under their hold: sent again later
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        await self.sender.close()


class _Stopped(Exception):
    """The loop was told to stop while a statement of its own waited (its claim is dropped)."""


def _dropped(task: asyncio.Future[Any]) -> None:
    """A step given up at stop: its outcome, whatever it is, is not wanted."""
    if not task.cancelled():
        task.exception()
