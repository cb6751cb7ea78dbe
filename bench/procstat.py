"""What bench/worker.py reads of a running process from /proc, beside its CPU and memory."""

from pathlib import Path


def context_switches(pid: int) -> tuple[int, int]:
    """(voluntary, nonvoluntary) context switches of every thread of a process so far.

    /proc/<pid>/status counts its main thread only, so each thread's own status is added up;
    a thread that already ended is not counted (the worker's threads live as long as it does).
    """
    voluntary = nonvoluntary = 0
    for status in Path(f"/proc/{pid}/task").glob("*/status"):
        try:
            lines = status.read_text().splitlines()
        except OSError:  # the thread ended meanwhile
            continue
        for line in lines:
            key, _, value = line.partition(":")
            if key == "voluntary_ctxt_switches":
                voluntary += int(value)
            elif key == "nonvoluntary_ctxt_switches":
                nonvoluntary += int(value)
    return voluntary, nonvoluntary


def switches_per(
    before: list[tuple[int, int]], after: list[tuple[int, int]], units: int
) -> dict[str, float]:
    """Context switches per unit of work (execution, job) between two readings of processes."""
    voluntary = sum(a[0] - b[0] for a, b in zip(after, before, strict=True))
    nonvoluntary = sum(a[1] - b[1] for a, b in zip(after, before, strict=True))
    return {
        "voluntary": round(voluntary / units, 2),
        "nonvoluntary": round(nonvoluntary / units, 2),
    }


def switches_text(per: dict[str, float]) -> str:
    """switches_per's reading as the summary shows it: voluntary + nonvoluntary."""
    return f"{per['voluntary']} + {per['nonvoluntary']}"
