"""The delivery loop's statements as plans (executions/queue/steps.py) and the values they carry:
the claim, the results, whether any subscription exists; and the retry delay."""

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from psycopg.types.json import Jsonb

from .. import sql
from ..queue.steps import Plan, Query, Steps
from .config import RETRY_MAX_SECONDS
from .sender import Attempt


@dataclass(frozen=True, slots=True)
class Claimed:
    """One claimed delivery, as WEBHOOK_DELIVERIES_CLAIM returns it."""

    id: int
    claim_token: int
    attempts: int
    event_id: str
    body: str  # the event as JSON: {id, type, createdAt, data}, the same for every attempt
    url: str
    secret: str
    previous_secret: str | None


@dataclass(frozen=True, slots=True)
class Result:
    id: int
    token: int
    attempts: int  # the attempt's number
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


@dataclass(frozen=True, slots=True)
class Written:
    """A result as written: the delivery's new status, and whether a later delivery of the same
    execution to the same subscription waits (held back by this one until now)."""

    status: str
    successor: bool


def deliveries_record(
    *, results: Sequence[Result], max_age_seconds: float
) -> Plan[dict[int, Written]]:
    """Write the results of attempts (one statement); the plan returns what each written
    delivery became, by id (one missing: another claim took it over meanwhile, or it was
    written already)."""
    return Plan(_record(results, max_age_seconds))


def _record(results: Sequence[Result], max_age_seconds: float) -> Steps[dict[int, Written]]:
    rows = yield Query(
        sql.WEBHOOK_DELIVERIES_RECORD,
        {
            # In id order: the statement locks the deliveries in the order of its items.
            "items": Jsonb([r.row() for r in sorted(results, key=lambda r: r.id)]),
            "max_age_seconds": max_age_seconds,
        },
    )
    return {row[0]: Written(row[1], row[2]) for row in rows}


def subscribed() -> Plan[bool]:
    """Whether any subscription exists (one statement)."""
    return Plan(_subscribed())


def _subscribed() -> Steps[bool]:
    row = yield Query(sql.WEBHOOK_SUBSCRIBED, fetch="one")
    return bool(row and row[0])


def retry_delay(*, attempts: int, base_seconds: float, rng: random.Random) -> float:
    """Full jitter: uniform up to base * 2^(attempts - 1), capped."""
    ceiling = min(RETRY_MAX_SECONDS, base_seconds * 2 ** min(max(attempts - 1, 0), 30))
    return rng.uniform(0, ceiling)
