"""A flow's `display.amounts` (docs/flow-format.md#display): which members of the request data are
amounts of money, in which currency, counted in minor units or not; checked when the flow is
published, read when a page shows the data. Display only: nothing the engine runs reads it.

The check refuses a path the dataSchema can never produce, an unknown currency code and a
currency read from anywhere but the data. Showing never fails: a value that is not an amount of a
known currency is shown as it is (`shown`); a formatted one keeps its raw value for the title.
"""

import json
from dataclasses import dataclass
from typing import Any

from django.utils.html import escape, format_html

from orquestador import display

from . import pointer
from .payloads import unproducible
from .pointer import kind
from .problems import ProblemList, member

MAX_AMOUNTS = 16  # amounts a flow's display may declare
AMOUNT_KEYS = ("path", "currency", "minorUnits")


class DisplayChecks(ProblemList):
    """The checks of the top-level `display` key, for the definition walk to build on."""

    def display(self, value: Any, path: str, data_schema: Any) -> None:
        """`data_schema`: the flow's dataSchema when it is usable, else None (nothing decided)."""
        if not self.object(value, path, (), ("amounts",)) or "amounts" not in value:
            return
        amounts, apath = value["amounts"], f"{path}.amounts"
        if not isinstance(amounts, list) or not amounts or len(amounts) > MAX_AMOUNTS:
            self.problem(apath, f"must be an array of 1 to {MAX_AMOUNTS} amounts")
            return
        seen: set[str] = set()
        for index, amount in enumerate(amounts):
            here = f"{apath}[{index}]"
            if not self.object(amount, here, AMOUNT_KEYS):
                continue
            if "path" in amount:
                self.amount_path(amount["path"], f"{here}.path", data_schema, seen)
            if "currency" in amount:
                self.currency(amount["currency"], f"{here}.currency", data_schema)
            minor = amount.get("minorUnits", False)
            if not isinstance(minor, bool):
                self.problem(
                    f"{here}.minorUnits",
                    "must be true (the amount counts the currency's minor units: 2500 is €25.00) "
                    f"or false (it is written in major units), not {kind(minor)}",
                )

    def amount_path(self, value: Any, path: str, data_schema: Any, seen: set[str]) -> None:
        tokens = self._data_tokens(value, path)
        if tokens is None:
            return
        if value in seen:
            self.problem(path, f"duplicate amount {value!r}")
        seen.add(value)
        self._producible(tokens, path, data_schema)

    def currency(self, value: Any, path: str, data_schema: Any) -> None:
        """An ISO 4217 code, or `{"from": "/data/..."}`: the data member that holds one."""
        if isinstance(value, str):
            if not display.is_currency(value):
                self.problem(path, f"{value!r} is not an ISO 4217 currency code (EUR, USD, JPY)")
            return
        if not (isinstance(value, dict) and set(value) == {"from"}):
            self.problem(path, 'must be a currency code ("EUR") or {"from": POINTER} into the data')
            return
        fpath = member(path, "from")
        try:
            tokens = pointer.parse(value["from"])
        except pointer.PointerError as exc:
            self.problem(fpath, exc.problem)
            return
        if tokens[:1] != ["data"] or len(tokens) < 2:
            # A page shows the request's data; no action's output is there to read.
            self.problem(fpath, f'{value["from"]!r} must point inside the data ("/data/...")')
            return
        self._producible(tokens[1:], fpath, data_schema)

    def _data_tokens(self, value: Any, path: str) -> list[str] | None:
        try:
            tokens = pointer.parse(value)
        except pointer.PointerError as exc:
            self.problem(path, exc.problem)
            return None
        if not tokens:
            self.problem(path, "must point inside the data, not at its root")
            return None
        return tokens

    def _producible(self, tokens: list[str], path: str, data_schema: Any) -> None:
        if data_schema is None:
            return
        unreachable = unproducible(data_schema, tokens)
        if unreachable is not None:
            self.problem(path, f"the dataSchema cannot produce {unreachable}")


@dataclass(frozen=True)
class Shown:
    """A value of the request data as a page shows it: `text`, and `raw` (its JSON) when `text`
    is a formatted amount, for the title that keeps the value itself reachable."""

    text: str
    raw: str | None = None

    def __str__(self) -> str:
        return self.text

    def __html__(self) -> str:
        """As HTML (format_html, `{{ value.html }}`): a formatted amount with its raw value on
        hover."""
        if self.raw is None:
            return escape(self.text)
        return format_html('<span class="amount" title="{}">{}</span>', self.raw, self.text)

    @property
    def html(self) -> str:
        return self.__html__()


def declared(definition: Any) -> dict[str, dict[str, Any]]:
    """The amounts a (published, so checked) definition declares, by data pointer."""
    shown = definition.get("display") if isinstance(definition, dict) else None
    amounts = shown.get("amounts") if isinstance(shown, dict) else None
    return {a["path"]: a for a in amounts or () if isinstance(a, dict) and "path" in a}


def amount_text(declaration: dict[str, Any], value: Any, data: Any) -> str | None:
    """`value` (found at the declaration's path) formatted as money, or None when it is not an
    amount: not a number, an unknown or missing currency, a fraction of a minor unit."""
    currency = declaration.get("currency")
    if isinstance(currency, dict):
        try:
            currency = pointer.resolve({"data": data}, currency.get("from", ""))
        except pointer.PointerError:
            return None
    return display.money(value, currency, minor_units=declaration.get("minorUnits") is True)


def shown(definition: Any, data: Any, where: str, limit: int) -> Shown | None:
    """The data's value at `where` as a page shows it: a declared amount formatted, with its raw
    value; anything else as text cut to `limit`. None when nothing is there."""
    try:
        value = pointer.resolve(data, where)
    except pointer.PointerError:
        return None
    if value is pointer.MISSING:
        return None
    raw = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    declaration = declared(definition).get(where)
    text = amount_text(declaration, value, data) if declaration is not None else None
    if text is not None:
        return Shown(text, display.clip(raw, limit))
    return Shown(display.clip(raw, limit))


def label(where: str) -> str:
    """A data pointer as a page names it: "/payment/amount" is "payment / amount"."""
    return where.lstrip("/").replace("/", " / ") or where


def amounts(definition: Any, data: Any, limit: int) -> list[tuple[str, Shown]]:
    """Every amount the flow declares that the data holds, as a page shows it."""
    found = []
    for where in declared(definition):
        value = shown(definition, data, where, limit)
        if value is not None:
            found.append((label(where), value))
    return found
