"""The sandbox provider's shop (actions/sandbox.py serves it over HTTP): what each write needs
and makes, the records in memory, and the lookup by key.

Reservations, releases and refunds deduplicate by key: the key's first write is the answer to
every later one. Charges do not: every charge is a new one, the key only remembered for the
lookup, which tells how many charges the key made. Bad input raises `Refused`, which the server
answers as JSON; nothing is applied then.
"""

import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

MAX_RECORDS = 100_000  # writes kept in memory
_CURRENCY = re.compile(r"[A-Z]{3}")


def document_bytes(document_id: str) -> bytes:
    """The document served for `document_id` (its SHA-256 is what a `documents` request needs)."""
    return b"%PDF-1.4\n% orquestador sandbox document " + document_id.encode() + b"\n%%EOF\n"


class Refused(Exception):
    """A request the sandbox answers with a JSON error and nothing applied."""

    def __init__(self, status: int, code: str, detail: str) -> None:
        super().__init__(detail)
        self.status, self.code, self.detail = status, code, detail


def _text(body: dict[str, Any], name: str, *, required: bool = True, limit: int = 100) -> Any:
    value = body.get(name)
    if value is None and not required:
        return None
    if not isinstance(value, str) or not 1 <= len(value) <= limit:
        raise Refused(422, "INVALID_FIELD", f"{name}: a string of 1 to {limit} characters")
    return value


def _count(body: dict[str, Any], name: str, high: int) -> int:
    value = body.get(name)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= high:
        raise Refused(422, "INVALID_FIELD", f"{name}: an integer from 1 to {high}")
    return value


@dataclass
class Shop:
    """The records, by collection and id, and the ids each key's writes made."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    records: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    by_key: dict[tuple[str, str], list[str]] = field(default_factory=dict)
    written: int = 0

    def find(self, collection: str, record_id: object) -> dict[str, Any] | None:
        return (
            self.records.get(collection, {}).get(record_id) if isinstance(record_id, str) else None
        )

    def apply(self, collection: str, key: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """Apply one write (the caller holds `lock`): 201 and the new record, or 200 and the
        stored one when the collection deduplicates and the key was seen."""
        kind = WRITES[collection]
        ids = self.by_key.get((collection, key))
        if kind.deduplicates and ids:
            return 200, dict(self.records[collection][ids[0]])
        if self.written >= MAX_RECORDS:
            raise Refused(429, "SANDBOX_FULL", "the sandbox keeps no more writes; restart it")
        records = self.records.setdefault(collection, {})
        record = kind.make(self, body, len(records) + 1)
        records[record[kind.id_field]] = record
        self.by_key.setdefault((collection, key), []).append(record[kind.id_field])
        self.written += 1
        return 201, dict(record)

    def lookup(self, collection: str, key: str) -> tuple[int, dict[str, Any]]:
        with self.lock:
            ids = self.by_key.get((collection, key), [])
            first = self.find(collection, ids[0]) if ids else None
            if first is None:
                return 404, {"code": "NOT_FOUND", "detail": "no write with this key was applied"}
            if collection == "charges":
                return 200, {**first, "chargesWithKey": len(ids)}
            return 200, dict(first)


DECLINED_PREFIX = "cus_declined"  # a customer whose charges are refused for good (402)


def refuse_declined(collection: str, body: dict[str, Any]) -> None:
    """A charge for a declined customer is refused for good, before any fault is drawn, so the
    demo of a compensating flow (examples/checkout.json) always sees the refusal."""
    customer = body.get("customer")
    if (
        collection == "charges"
        and isinstance(customer, str)
        and customer.startswith(DECLINED_PREFIX)
    ):
        raise Refused(402, "CARD_DECLINED", "the customer's card was declined")


def _reserve(state: Shop, body: dict[str, Any], number: int) -> dict[str, Any]:
    sku, quantity = _text(body, "sku"), _count(body, "quantity", 1000)
    return {
        "reservationId": f"res_{number:06d}",
        "sku": sku,
        "quantity": quantity,
        "status": "reserved",
    }


def _release(state: Shop, body: dict[str, Any], number: int) -> dict[str, Any]:
    reservation = state.find("reservations", body.get("reservationId"))
    if reservation is None:
        raise Refused(422, "UNKNOWN_RESERVATION", "reservationId: no such reservation")
    reservation["status"] = "released"
    return {
        "releaseId": f"rel_{number:06d}",
        "reservationId": reservation["reservationId"],
        "status": "released",
    }


def _charge(state: Shop, body: dict[str, Any], number: int) -> dict[str, Any]:
    amount = _count(body, "amount", 1_000_000_000)
    currency = _text(body, "currency", limit=3)
    if not _CURRENCY.fullmatch(currency):
        raise Refused(422, "INVALID_FIELD", "currency: three capital letters (ISO 4217)")
    customer = _text(body, "customer", required=False)
    return {
        "chargeId": f"ch_{number:06d}",
        "amount": amount,
        "currency": currency,
        "customer": customer,
        "status": "paid",
    }


def _refund(state: Shop, body: dict[str, Any], number: int) -> dict[str, Any]:
    charge = state.find("charges", body.get("chargeId"))
    if charge is None:
        raise Refused(422, "UNKNOWN_CHARGE", "chargeId: no such charge")
    if charge["status"] == "refunded":
        raise Refused(409, "ALREADY_REFUNDED", "chargeId: this charge was refunded already")
    charge["status"] = "refunded"
    return {
        "refundId": f"re_{number:06d}",
        "chargeId": charge["chargeId"],
        "amount": charge["amount"],
        "status": "refunded",
    }


@dataclass(frozen=True)
class Write:
    make: Callable[[Shop, dict[str, Any], int], dict[str, Any]]
    id_field: str
    deduplicates: bool


PAYMENTS = ("charges", "refunds")  # collections that want an Authorization header
WRITES = {
    "reservations": Write(_reserve, "reservationId", deduplicates=True),
    "releases": Write(_release, "releaseId", deduplicates=True),
    "charges": Write(_charge, "chargeId", deduplicates=False),
    "refunds": Write(_refund, "refundId", deduplicates=True),
}
