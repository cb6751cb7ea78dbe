"""Requests found by what their case summary shows (docs/flow-format.md#top-level): a term is
matched exactly against the data at every `caseSummary` pointer of the published flows, as JSON
containment (`data @> {"customer": "cus_ada"}`), which request_data_search_idx (a GIN index of
`jsonb_path_ops`, migration 0034) serves without reading the table. A term that reads as a
number matches that number too ("2500" finds `"amount": 2500`). The requests list ORs it with an
exact owner (request_owner_search_idx) or tenant (request_tenant_list_idx).
"""

import json
from typing import Any

from django.db.models import Q

from ..flows import pointer
from ..models import Flow


def summary_pointers() -> list[str]:
    """Every pointer a published flow's caseSummary names, each once, in a stable order."""
    found: set[str] = set()
    for listed in Flow.objects.values_list("definition__caseSummary", flat=True):
        if isinstance(listed, list):
            found.update(p for p in listed if isinstance(p, str))
    return sorted(found)


def _values(term: str) -> list[Any]:
    values: list[Any] = [term]
    try:
        number = json.loads(term)
    except ValueError:
        return values
    if isinstance(number, int | float) and not isinstance(number, bool):
        values.append(number)
    return values


def _nested(tokens: list[str], value: Any) -> Any:
    for token in reversed(tokens):
        value = {token: value}
    return value


def summary_match(term: str, field: str = "data") -> Q | None:
    """Requests (through `field`, their data) whose case-summary fields hold `term` exactly;
    None when no flow has a case summary."""
    match = Q()
    for where in summary_pointers():
        try:
            tokens = pointer.parse(where)
        except pointer.PointerError:
            continue
        if not tokens:
            continue
        for value in _values(term):
            match |= Q(**{f"{field}__contains": _nested(tokens, value)})
    return match or None
