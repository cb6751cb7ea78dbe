"""Retry delays: exponential backoff with full jitter, and a provider's Retry-After, both bounded.

Pure functions of their arguments (the random source is passed in), so tests pin them down.
"""

import random

from orquestador.workerconfig import WorkerConfig


def backoff_seconds(*, attempt: int, base: float, cap: float, rng: random.Random) -> float:
    """Full jitter: uniform in [0, min(cap, base * 2 ** (attempt - 1))].

    `attempt` is the number of the attempt that just failed (1 for the first call).
    """
    exponent = min(max(attempt - 1, 0), 62)  # 2**62 seconds is beyond any cap
    ceiling = min(cap, base * (2**exponent))
    return rng.uniform(0, ceiling)


def retry_delay_seconds(
    *, attempt: int, retry_after: float | None, config: WorkerConfig, rng: random.Random
) -> float:
    """How long to wait before the next attempt.

    A provider's Retry-After is honoured as asked, but never beyond
    WORKER_RETRY_AFTER_MAX_SECONDS; without one, the jittered backoff applies.
    """
    if retry_after is not None and retry_after >= 0:
        return min(float(retry_after), config.retry_after_max_seconds)
    return backoff_seconds(
        attempt=attempt,
        base=config.retry_base_seconds,
        cap=config.retry_max_seconds,
        rng=rng,
    )
