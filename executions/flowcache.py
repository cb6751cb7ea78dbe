"""Published flow definitions, kept in the process once read: an acceptance checks its transition
against the flow without reading the definition from the database each time.

A published version never changes (flow_publish refuses other content under the same key and
version, and nothing else writes the table), so a definition read once stays right. Entries are
keyed by the flow's id and checksum all the same, so a row that did change is read again rather
than trusted. At most MAX_ENTRIES, the least recently used dropped first.
"""

import threading
from collections import OrderedDict
from typing import Any

from .models import Flow

MAX_ENTRIES = 256  # flow versions kept per process

_entries: OrderedDict[tuple[int, str], dict[str, Any]] = OrderedDict()
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


def forget_all() -> None:
    """Drop every entry (tests; a process never needs it)."""
    with _lock:
        _entries.clear()
