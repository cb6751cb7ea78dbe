"""Places leased in batches on routes far above need (docs/adr/0022-route-limits-in-postgresql.md,
"Places leased in batches"; migration 0020). Thread-safe: the runs on the loop, the sweep not.

Invariants: a route is far above need when its max_in_flight is at least FAR_ABOVE times this
worker's slots and SHARE_PART of its rate at least its slots; then one statement leases that many
places and that share, granted only with room for all of it and counted whole, so the limits hold
across every worker; calls take from the lease with no statement (a local sliding window bounds
their starts); the sweep renews it; a killed worker's places return when its hold ends, a
stopping worker gives them back; without a lease a route takes per call.
"""

import threading
import time
from collections import deque
from dataclasses import dataclass, field

from actions.base import Route

FAR_ABOVE = 8  # times the worker's slots a route's max_in_flight must be to be leased
SHARE_PART = 10  # a lease's share of the rate: this part of it, when at least the slots
RETRY_SECONDS = 1.0  # seconds before asking again for a lease the limiter refused


@dataclass
class _Lease:
    call_id: int
    places: int  # 0: the route has no max_in_flight
    share: int  # starts per window; 0: the route has no rate
    window: float  # seconds
    held_until: float  # monotonic
    in_use: int = 0
    starts: deque[float] = field(default_factory=deque)

    def started_in_window(self, now: float) -> int:
        """Starts within the window ending at `now` (older ones forgotten)."""
        while self.starts and self.starts[0] <= now - self.window:
            self.starts.popleft()
        return len(self.starts)


class RouteLeases:
    """This process's leases, by route."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._leases: dict[str, _Lease] = {}
        self._refused: dict[str, float] = {}
        self.slots = 0  # 0: not configured, nothing is leased
        self.hold_seconds = 0.0

    def configure(self, *, slots: int, hold_seconds: float) -> None:
        """This worker's slots and how long a lease is held without renewal (its lease)."""
        self.slots, self.hold_seconds = slots, hold_seconds

    def terms(self, route: Route) -> tuple[int, int] | None:
        """The places and share this worker would lease on `route`; None: not far above."""
        limits = route.limits
        if limits is None or self.slots <= 0:
            return None
        if limits.max_in_flight is not None and limits.max_in_flight < FAR_ABOVE * self.slots:
            return None
        share = 0
        if limits.rate_count is not None:
            share = limits.rate_count // SHARE_PART
            if share < self.slots:
                return None
        places = self.slots if limits.max_in_flight is not None else 0
        return places, share

    def take(self, route: str) -> bool:
        """Take a leased place (and a start of the share) for one call; False: none here."""
        now = time.monotonic()
        with self._lock:
            lease = self._leases.get(route)
            if lease is None or lease.held_until - now < self.hold_seconds / 4:
                return False
            if lease.places and lease.in_use >= lease.places:
                return False
            if lease.share:
                if lease.started_in_window(now) >= lease.share:
                    return False
                lease.starts.append(now)
            lease.in_use += 1
            return True

    def end(self, route: str) -> None:
        """A call taken from the lease ended."""
        with self._lock:
            lease = self._leases.get(route)
            if lease is not None and lease.in_use > 0:
                lease.in_use -= 1

    def ask(self, route: str) -> bool:
        """Whether to ask the limiter for a lease on `route` now: none held, none refused
        lately (one asker at a time is the caller's: limiter.leased)."""
        now = time.monotonic()
        with self._lock:
            lease = self._leases.get(route)
            if lease is not None and lease.held_until > now:
                return False
            return self._refused.get(route, 0.0) <= now

    def answer(
        self, route: str, call_id: int | None, *, places: int, share: int, window: float
    ) -> None:
        """What the limiter answered `ask`: the lease's id, or None (refused: ask later)."""
        with self._lock:
            if call_id is None:
                self._refused[route] = time.monotonic() + RETRY_SECONDS
                return
            earlier = self._leases.get(route)
            self._leases[route] = _Lease(
                call_id,
                places,
                share,
                window,
                time.monotonic() + self.hold_seconds,
                in_use=earlier.in_use if earlier is not None else 0,
                starts=earlier.starts if earlier is not None else deque(),
            )

    def report(self) -> tuple[list[int], list[int], list[int], float]:
        """The leases to renew now: ids, places in use, starts in their window; and when."""
        now = time.monotonic()
        with self._lock:
            ids, in_use, starts = [], [], []
            for lease in self._leases.values():
                ids.append(lease.call_id)
                in_use.append(lease.in_use)
                starts.append(lease.started_in_window(now))
        return ids, in_use, starts, now

    def renewed(self, renewed: set[int], at: float) -> None:
        """The leases renewed at `at` (monotonic, before the statement); the others lapsed."""
        with self._lock:
            for route, lease in list(self._leases.items()):
                if lease.call_id in renewed:
                    lease.held_until = at + self.hold_seconds
                elif lease.held_until <= time.monotonic() or lease.in_use == 0:
                    del self._leases[route]
                else:  # lapsed with calls in flight: they end; no new ones take from it
                    lease.held_until = 0.0

    def give_back(self) -> list[tuple[str, int]]:
        """Every lease, forgotten here (the worker stops): the caller releases them."""
        with self._lock:
            found = [(route, lease.call_id) for route, lease in self._leases.items()]
            self._leases.clear()
        return found


LEASES = RouteLeases()  # this process's: used by every run, renewed by the sweep
