"""The cyclic garbage collector of a worker process, set for hundreds of runs in flight.

A `runworker` holds hundreds of runs at once, each with its tasks, futures, frames and the
containers of its current step, and nearly all of it is freed by reference counting when the
step ends. With CPython's default thresholds a young collection ran every 700 net allocations
(about every ten executions on the slow provider) and walked every young container still
alive, which at 200 runs in flight is thousands, and every tenth of them walked the middle
generation too; the oldest generation walked everything startup built (Django, the registry,
the flows). On the 100 ms provider at concurrency 200 that was about 0.13 s of collection per
3,000 executions, some 40 µs of each one's CPU.

So, once startup is done: what it built is frozen (never walked again, it lives as long as the
process), and a young collection waits for YOUNG_THRESHOLD net allocations. A run leaves no
reference cycle, so a young collection finds nothing to free: it only walks the runs in
flight, and every one it makes promotes objects whose later deaths the young count never
sees (it stops at zero), which brings the next one sooner. At 10,000 that was a collection of
5 to 15 ms every few hundred executions at 200 slots; at 100,000, none in 10,000 executions
at 200 and one or two of about 50 ms at 1,000 (docs/adr/0014). Cyclic garbage of a rare path
(an exception's traceback, a cancelled task) waits a little longer to be freed: at most that
many containers, some MiB.
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
