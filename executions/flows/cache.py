"""Published flow versions kept in the process once read: an acceptance checks its transition
without reading the definition each time, and a page of requests names each one's flow without
joining the flow table (docs/adr/0021-an-entrance-as-fast-as-the-engine.md).

A published version never changes (nothing but flow_publish writes the table, and it refuses other
content under a key and version), so what is read once stays right; definitions are keyed by id
and checksum all the same. At most MAX_ENTRIES of each, the least recently used definition
dropped first, every name when there are more.
"""

import threading
from collections import OrderedDict
from collections.abc import Collection, Mapping
from typing import Any

from orquestador.postgresql import read_rows

from .. import sql
from ..models import Flow

MAX_ENTRIES = 256  # flow versions kept per process

_entries: OrderedDict[tuple[int, str], dict[str, Any]] = OrderedDict()
_names: dict[int, tuple[str, int]] = {}  # flow id -> (key, version)
_lock = threading.Lock()


def flow_definition(*, flow_id: int, checksum: str) -> dict[str, Any]:
    """The definition of flow `flow_id` whose checksum is `checksum` (read once per process)."""
    key = (flow_id, checksum)
    with _lock:
        found = _entries.get(key)
        if found is not None:
            _entries.move_to_end(key)
            return found
    definition: dict[str, Any] = Flow.objects.values_list("definition", flat=True).get(id=flow_id)
    with _lock:
        _entries[key] = definition
        while len(_entries) > MAX_ENTRIES:
            _entries.popitem(last=False)
    return definition


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
        _entries.clear()
        _names = {}
