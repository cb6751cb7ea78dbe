"""Per-route call metrics: how long each adapter call took and how it ended, by capability
(docs/operations.md#metrics). Recorded where the adapter is called (executions/worker/calls.py),
served with the worker's other metrics (`WorkerMetrics.families()` appends these).

Invariants: one registry per process (`CALLS`: one catalog, one endpoint; a remote runtime's calls
count where they are made); labels from closed sets, `capability` as `capability@version` from
the trusted catalog and `outcome` an adapter outcome; a capability's series appear with its first
call, all its outcomes at zero; recording is a bisect and one lock, a scrape copies under it.
"""

import bisect
import threading

from actions.base import Outcome
from orquestador.exposition import Family, Sample, number

CALL_SECONDS = "orquestador_action_call_seconds"
CALL_OUTCOMES = "orquestador_action_calls_total"
OUTCOMES = tuple(o.value for o in Outcome)
# Upper bounds, in seconds, of the call latency buckets: providers answer in milliseconds to
# seconds; contract timeouts are at most a few tens of seconds.
CALL_SECONDS_BOUNDS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class CallMetrics:
    """The call latency histogram and the outcome counter, by capability."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._buckets: dict[str, list[int]] = {}
        self._sums: dict[str, float] = {}
        self._outcomes: dict[tuple[str, str], int] = {}

    def call_done(self, *, capability: str, outcome: str, seconds: float) -> None:
        """One call of `capability` (capability@version) ended with `outcome` after `seconds`."""
        bucket = bisect.bisect_left(CALL_SECONDS_BOUNDS, seconds)
        with self._lock:
            if capability not in self._buckets:
                self._buckets[capability] = [0] * (len(CALL_SECONDS_BOUNDS) + 1)
                self._sums[capability] = 0.0
                for name in OUTCOMES:
                    self._outcomes[(capability, name)] = 0
            self._buckets[capability][bucket] += 1
            self._sums[capability] += seconds
            self._outcomes[(capability, outcome)] += 1

    def value(self, capability: str, outcome: str) -> int:
        with self._lock:
            return self._outcomes.get((capability, outcome), 0)

    def families(self) -> list[Family]:
        """Both families once a call has been made; none before (a histogram without a
        capability would have no buckets)."""
        with self._lock:
            buckets = {k: list(v) for k, v in self._buckets.items()}
            sums = dict(self._sums)
            outcomes = dict(self._outcomes)
        if not buckets:
            return []
        latency: list[Sample] = []
        for capability in sorted(buckets):
            cumulative = 0
            bounds = (*CALL_SECONDS_BOUNDS, float("inf"))
            for bound, count in zip(bounds, buckets[capability], strict=True):
                cumulative += count
                labels = (("capability", capability), ("le", number(bound)))
                latency.append(Sample(cumulative, labels, "_bucket"))
            latency += [
                Sample(sums[capability], (("capability", capability),), "_sum"),
                Sample(cumulative, (("capability", capability),), "_count"),
            ]
        counted = [
            Sample(outcomes[key], (("capability", key[0]), ("outcome", key[1])))
            for key in sorted(outcomes)
        ]
        return [
            Family(
                CALL_SECONDS,
                "histogram",
                "Time one adapter call took, by capability@version, in seconds.",
                latency,
            ),
            Family(
                CALL_OUTCOMES,
                "counter",
                "Adapter calls by capability@version and outcome (SUCCEEDED, TRANSIENT, "
                "PERMANENT, UNKNOWN, ACCEPTED).",
                counted,
            ),
        ]


CALLS = CallMetrics()
