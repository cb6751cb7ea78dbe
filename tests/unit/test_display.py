"""How moments and text are shown to a person (orquestador/display.py)."""

from datetime import UTC, datetime, timedelta, timezone

import pytest

from orquestador import display

NOW = datetime(2026, 12, 1, 10, 20, 53, tzinfo=UTC)


@pytest.mark.parametrize(
    ("seconds", "words"),
    [
        (0, "0 s"),
        (59, "59 s"),
        (60, "1 min"),
        (3599, "59 min"),
        (3600, "1 h"),
        (3660, "1 h 1 min"),
        (86400, "1 d"),
        (90000, "1 d 1 h"),
        (-5, "0 s"),
    ],
)
def test_age__in_words(seconds, words):
    assert display.age(seconds) == words


def test_utc__converts_to_utc_to_the_second():
    moment = datetime(2026, 12, 1, 12, 20, 53, 900000, tzinfo=timezone(timedelta(hours=2)))
    assert display.utc(moment) == "2026-12-01 10:20:53 UTC"
    assert display.utc(None) == "—"


def test_at_and_ago__past_future_and_none():
    assert (
        display.at_and_ago(NOW - timedelta(minutes=3), NOW) == "2026-12-01 10:17:53 UTC (3 min ago)"
    )
    assert display.at_and_ago(NOW + timedelta(seconds=5), NOW) == "2026-12-01 10:20:58 UTC (in 5 s)"
    assert display.at_and_ago(None, NOW) == "—"


def test_clip__one_line_cut_with_an_ellipsis():
    assert display.clip("a\n  b\tc", 10) == "a b c"
    assert display.clip("abcdefghij", 5) == "abcd…"
    assert display.clip(None, 5) == ""
