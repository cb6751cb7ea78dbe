"""CPU-heavy steps of a run, moved off the event loop when their document is large.

Validating a document against a JSON schema and hashing its canonical JSON take time in
proportion to its size; on the loop, a large one would stall every other slot of the process
for that long. Below LARGE_NODES (values in the document, counted by a walk that stops there)
the step is cheaper than a hand-over to a thread and back, so it runs in place; above, in
`asyncio.to_thread`. The threshold is measured: docs/benchmarks.md, "Off the loop".
"""

import asyncio
from collections.abc import Callable
from typing import Any, TypeVar

Result = TypeVar("Result")

LARGE_NODES = 200  # values in a document past which its validation or hash leaves the loop


def is_large(document: Any, *, limit: int = LARGE_NODES) -> bool:
    """Whether `document` holds more than `limit` values (a walk bounded by `limit`)."""
    seen = 0
    pending = [document]
    while pending:
        value = pending.pop()
        seen += 1
        if seen > limit:
            return True
        if isinstance(value, dict):
            pending.extend(value.values())
            seen += len(value)  # the keys count too
        elif isinstance(value, list):
            pending.extend(value)
        elif isinstance(value, str) and len(value) > limit * 8:
            return True  # one long string costs like many values
    return False


async def off_loop_if_large(
    document: Any, step: Callable[..., Result], *args: Any, **kwargs: Any
) -> Result:
    """`step(*args, **kwargs)`, in a thread when `document` (what it reads) is large."""
    if is_large(document):
        return await asyncio.to_thread(step, *args, **kwargs)
    return step(*args, **kwargs)
