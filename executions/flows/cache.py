"""Published flow versions kept in the process once read: runs and acceptances find a definition,
and a page of requests names each one's flow, without reading the flow table again
(docs/adr/0021-an-entrance-as-fast-as-the-engine.md).

A published version never changes, so what is read once stays right. A definition is kept by flow
id with the checksum it was read under when its reader knows it (the API): a lookup naming another
misses. Lookups take no lock; a reader loads a miss its own way (the worker on its own connection)
and stores it. At most MAX_ENTRIES of each, the oldest stored dropped first.
"""

import threading
from collections.abc import Collection, Mapping
from typing import Any

from orquestador.postgresql import read_rows

from .. import sql
from ..models import Flow

MAX_ENTRIES = 256  # flow versions kept per process

# flow id -> (the checksum it was read under, None when its reader did not read it; definition)
_definitions: dict[int, tuple[str | None, dict[str, Any]]] = {}
_names: dict[int, tuple[str, int]] = {}  # flow id -> (key, version)
_lock = threading.Lock()


def cached_definition(flow_id: int, *, checksum: str | None = None) -> dict[str, Any] | None:
    """The definition of flow `flow_id` if this process has read it (no statement, no lock);
    with `checksum`, only one read under that checksum."""
    entry = _definitions.get(flow_id)  # one dict read: atomic, no lock
    if entry is None or (checksum is not None and entry[0] != checksum):
        return None
    return entry[1]


def store_definition(
    flow_id: int, definition: dict[str, Any], *, checksum: str | None = None
) -> dict[str, Any]:
    """Keep a definition just read from the database; return the one kept. The first one kept
    wins (every run of a flow shares one), unless it was read under another checksum."""
    with _lock:
        kept = _definitions.get(flow_id)
        if kept is not None and (checksum is None or kept[0] == checksum):
            return kept[1]
        _definitions.pop(flow_id, None)
        while len(_definitions) >= MAX_ENTRIES:
            del _definitions[next(iter(_definitions))]
        _definitions[flow_id] = (checksum, definition)
    return definition


def flow_definition(*, flow_id: int, checksum: str) -> dict[str, Any]:
    """The definition of flow `flow_id` whose checksum is `checksum` (read once per process)."""
    found = cached_definition(flow_id, checksum=checksum)
    if found is not None:
        return found
    definition: dict[str, Any] = Flow.objects.values_list("definition", flat=True).get(id=flow_id)
    return store_definition(flow_id, definition, checksum=checksum)


def flow_names(flow_ids: Collection[int]) -> Mapping[int, tuple[str, int]]:
    """The key and version of each flow in `flow_ids`, by id (the ones this process has not read
    yet read in one statement)."""
    global _names
    names = _names  # never changed in place once published: another thread may be reading it
    missing = [flow_id for flow_id in flow_ids if flow_id not in names]
    if not missing:
        return names
    found = read_rows(sql.FLOW_NAMES, {"ids": missing})
    with _lock:
        names = dict(_names)
        if len(names) + len(found) > MAX_ENTRIES:  # start again from this page's own flows
            names = {flow_id: names[flow_id] for flow_id in flow_ids if flow_id in names}
        names.update((flow_id, (key, version)) for flow_id, key, version in found)
        _names = names
    return names


def forget_all() -> None:
    """Drop every entry (tests; a process never needs it)."""
    global _names
    with _lock:
        _definitions.clear()
        _names = {}
