"""The cyclic garbage collector of a worker process, set for hundreds of runs in flight
(why, and what it was measured to save: docs/adr/0014-one-event-loop-per-worker.md, "The garbage
collector").

Once startup is done, what it built is frozen (never walked again: it lives as long as the
process), and a young collection waits for YOUNG_THRESHOLD net allocations. A run leaves no
reference cycle, so this delays only the cyclic garbage of a rare path (an exception's traceback,
a cancelled task): at most that many containers, some MiB.
"""

import gc

YOUNG_THRESHOLD = 100_000  # net container allocations between young collections (default 700)


def collector_settled() -> None:
    """Freeze what startup built and space the young collections out; call it once, just
    before the event loop starts."""
    gc.collect()
    gc.freeze()
    _, middle, oldest = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, middle, oldest)
