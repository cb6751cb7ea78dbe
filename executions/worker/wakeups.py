"""When the executions this process parked until a time come due (a rate's reserved turn, a
pause's end: limiter.py parks them), so the idle claim loop (scheduler.py) claims then rather
than at its next poll (docs/adr/0022)."""

import datetime
import heapq
import threading
import time

# seconds after a parked turn's time that the claim loop claims for it: the database's clock
# decides when the execution is due, and a claim a little early would find nothing.
TURN_LAG_SECONDS = 0.002


class ParkedTurns:
    """When the executions this process parked until a time become due (thread-safe): the claim
    loop claims then. Left to the poll (WORKER_POLL_MS), a rate's turns, spaced W/N apart, came
    back in bunches at each poll and the route ran well below its rate."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._due: list[float] = []  # epoch seconds, a heap

    def note(self, until: datetime.datetime) -> None:
        with self._lock:
            heapq.heappush(self._due, until.timestamp() + TURN_LAG_SECONDS)

    def wait(self, longest: float) -> float:
        """Seconds the idle claim loop may wait, at most `longest`, before a claim for a turn;
        0 when turns came since the last look (one claim serves them all)."""
        now = time.time()
        with self._lock:
            came = False
            while self._due and self._due[0] <= now:
                heapq.heappop(self._due)
                came = True
            if came:
                return 0.0
            return min(longest, self._due[0] - now) if self._due else longest


TURNS = ParkedTurns()  # this process's: noted by the runs a take parks, read by the claim loop
