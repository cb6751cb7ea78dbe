"""What the sections of bench/worker.py share: where the repository and its interpreter are, how
long they wait, the one poll of the queue, and the arithmetic of the figures they report.
"""

import socket
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PYTHON = str(ROOT / ".venv" / "bin" / "python") if (ROOT / ".venv").exists() else sys.executable
READY_TIMEOUT = 60  # seconds for worker processes to connect
RUN_TIMEOUT = 300  # seconds for one throughput run
POLL_SECONDS = 0.05  # seconds between completion checks
PICKUP_GAP_SECONDS = 0.02  # seconds between acceptances in the light-load pickup run

# Whether any execution is still to finish: stops at the first one (execution_claim_idx), where a
# count of every live row took 5-10 ms at 10,000 of them, every POLL_SECONDS, on the cores the
# workers share (the raw loop's run is not polled at all: its processes exit when done).
LIVE_ANY = """
SELECT EXISTS (SELECT FROM execution WHERE status IN ('PENDING', 'RETRY_WAIT', 'RUNNING'))
"""


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(p / 100 * (len(ordered) - 1))))
    return ordered[index]


def ms(seconds: float) -> float:
    return round(seconds * 1000, 2)


def ratio(ours: float, theirs: float) -> str:
    return f"{ours / theirs:.2f}x" if theirs else "n/a"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]
