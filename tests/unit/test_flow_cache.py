"""The process's flow definitions (executions/flows/cache.py): found by id once stored, by id and
checksum for a reader that names one; the first stored kept; at most MAX_ENTRIES, the oldest
dropped first."""

import pytest

from executions.flows import cache


@pytest.fixture(autouse=True)
def empty():
    cache.forget_all()
    yield
    cache.forget_all()


def test_cached_definition__none_until_stored():
    assert cache.cached_definition(1) is None
    definition = {"key": "a"}
    assert cache.store_definition(1, definition) is definition
    assert cache.cached_definition(1) is definition


def test_cached_definition__a_checksum_other_than_the_one_read_under_misses():
    definition = {"key": "a"}
    cache.store_definition(1, definition, checksum="c1")

    assert cache.cached_definition(1, checksum="c1") is definition
    assert cache.cached_definition(1) is definition  # the worker knows no checksum
    assert cache.cached_definition(1, checksum="c2") is None


def test_cached_definition__one_stored_without_a_checksum_misses_a_lookup_naming_one():
    cache.store_definition(1, {"key": "a"})

    assert cache.cached_definition(1, checksum="c1") is None


def test_store_definition__the_first_kept_wins_unless_read_under_another_checksum():
    first, second, changed = {"key": "a"}, {"key": "a"}, {"key": "b"}
    cache.store_definition(1, first, checksum="c1")

    assert cache.store_definition(1, second) is first
    assert cache.store_definition(1, second, checksum="c1") is first
    assert cache.store_definition(1, changed, checksum="c2") is changed
    assert cache.cached_definition(1) is changed


def test_store_definition__keeps_at_most_max_entries_dropping_the_oldest(monkeypatch):
    monkeypatch.setattr(cache, "MAX_ENTRIES", 3)
    for flow_id in range(1, 5):
        cache.store_definition(flow_id, {"id": flow_id})

    assert cache.cached_definition(1) is None
    assert [cache.cached_definition(flow_id) for flow_id in (2, 3, 4)] == [
        {"id": 2},
        {"id": 3},
        {"id": 4},
    ]
