"""How the admin pages and the texts they record show a value to a person: a line cut to a
length, a moment in UTC to the second, an age in words, and a moment with its age.

Pure functions, no clock: callers pass `now`. Imports nothing of the project, so the executions
admin and the reconciliation screens show moments the same way.
"""

from datetime import UTC, datetime


def clip(text: str | None, limit: int) -> str:
    """One line of at most `limit` characters."""
    if not text:
        return ""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def utc(moment: datetime | None) -> str:
    """A moment as UTC to the second ("2026-12-01 05:54:51 UTC"), or "—"."""
    if moment is None:
        return "—"
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def age(seconds: float) -> str:
    """A duration an operator reads at a glance: "45 s", "3 min", "2 h 5 min", "3 d 4 h"."""
    seconds = max(0, int(seconds))
    if seconds < 60:
        return f"{seconds} s"
    minutes = seconds // 60
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h" if hours else f"{days} d"


def at_and_ago(moment: datetime | None, now: datetime) -> str:
    """A moment as UTC to the second with its relative age: "… UTC (3 min ago)" / "(in 5 s)"."""
    if moment is None:
        return "—"
    seconds = (now - moment).total_seconds()
    relative = f"{age(seconds)} ago" if seconds >= 0 else f"in {age(-seconds)}"
    return f"{utc(moment)} ({relative})"
