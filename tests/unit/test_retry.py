"""Retry delays: full jitter under an exponential ceiling, and a bounded Retry-After."""

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from executions.worker.retry import backoff_seconds, retry_delay_seconds
from orquestador.workerconfig import WorkerConfig

CONFIG = WorkerConfig(retry_base_seconds=1, retry_max_seconds=300, retry_after_max_seconds=600)


@given(attempt=st.integers(min_value=1, max_value=10_000), seed=st.integers())
def test_backoff__stays_within_its_exponential_ceiling_and_the_cap(attempt, seed):
    delay = backoff_seconds(attempt=attempt, base=1, cap=300, rng=random.Random(seed))
    assert 0 <= delay <= min(300, 2 ** (attempt - 1))


def test_backoff__is_fully_jittered():
    rng = random.Random(1)
    delays = [backoff_seconds(attempt=6, base=1, cap=300, rng=rng) for _ in range(2000)]
    assert max(delays) <= 32
    assert min(delays) < 2 and max(delays) > 30  # spread over the whole range, not bunched
    assert 14 < sum(delays) / len(delays) < 18  # uniform: mean near half the ceiling


@pytest.mark.parametrize(("asked", "expected"), [(5, 5), (0, 0), (10_000, 600), (600.5, 600)])
def test_retry_after__is_honoured_up_to_its_cap(asked, expected):
    rng = random.Random(0)
    assert retry_delay_seconds(attempt=1, retry_after=asked, config=CONFIG, rng=rng) == expected


def test_retry_after__absent_or_negative_falls_back_to_backoff():
    for retry_after in (None, -1):
        delay = retry_delay_seconds(
            attempt=3, retry_after=retry_after, config=CONFIG, rng=random.Random(0)
        )
        assert 0 <= delay <= 4
