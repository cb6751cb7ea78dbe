"""Where a slot's cycle goes on the slow provider: each hop's distribution, tree against tree.

    .venv/bin/python bench/cycle.py [--trees A,B] [--rounds 1] [--calls 3000]
        [--concurrency 200] [--delay 0.1]

One throwaway cluster and one 100 ms provider, as bench/workercpu.py; each round runs one
`runworker` of each TREE under bench/cycle_worker.py (the trees' order swapped every round) and
prints, per hop of an execution's cycle, its mean and p50/p90/p99 in ms: a slot freed until the
claim that refills it is sent and answered and the slot taken (slots matched to frees in order),
then the run to its RUNNING checkpoint, the call, the SUCCEEDED checkpoint, the final commit and
the slot free again (released at the final's submission, where the tree does that). The means
add up to the cycle (slots / throughput). Then each grouped write's batches: how many, their
mean size, the wait for a connection and the statement.
"""

import argparse
import itertools
import json
import statistics
import sys
from contextlib import ExitStack
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.worker import Bench  # noqa: E402

# (label, from mark, to mark) in cycle order; a hop missing either mark is skipped.
HOPS = [
    ("run to RUNNING submitted", "taken", "starts_submitted"),
    ("RUNNING submitted -> committed", "starts_submitted", "starts_committed"),
    ("RUNNING committed -> call sent", "starts_committed", "call_sent"),
    ("call", "call_sent", "answered"),
    ("answer -> SUCCEEDED submitted", "answered", "successes_submitted"),
    ("SUCCEEDED submitted -> committed", "successes_submitted", "successes_committed"),
    ("SUCCEEDED committed -> final submitted", "successes_committed", "finals_submitted"),
    ("final submitted -> committed", "finals_submitted", "finals_committed"),
    ("final committed -> slot freed", "finals_committed", "freed"),
    ("final submitted -> slot released", "finals_submitted", "released"),
]


def quantiles(values: list[float]) -> str:
    if not values:
        return "-"
    values = sorted(values)

    def at(p: float) -> float:
        return values[min(len(values) - 1, int(p * len(values)))] * 1000

    mean = statistics.fmean(values) * 1000
    return f"mean {mean:7.2f}  p50 {at(0.5):7.2f}  p90 {at(0.9):7.2f}  p99 {at(0.99):7.2f}"


def report(data: dict, concurrency: int) -> None:
    executions = data["executions"]
    for label, start, end in HOPS:
        values = [m[end] - m[start] for m in executions.values() if start in m and end in m]
        print(f"    {label:42s} {quantiles(values)}")
    takes = sorted((m["taken"], m) for m in executions.values() if "taken" in m)
    # A slot is free again when released (a tree that releases it at the final's submission).
    frees = sorted(m.get("released", m.get("freed")) for m in executions.values() if "freed" in m)
    # A slot's idle time: the i-th free is refilled by the (concurrency + i)-th take.
    idle, to_send, to_answer = [], [], []
    for free, (taken, m) in zip(frees, takes[concurrency:], strict=False):
        idle.append(taken - free)
        to_send.append(max(0.0, m["claim_sent"] - free))
        to_answer.append(m["claimed"] - max(free, m["claim_sent"]))
    print(f"    {'slot freed -> claim sent':42s} {quantiles(to_send)}")
    print(f"    {'claim sent (or free) -> answered':42s} {quantiles(to_answer)}")
    print(f"    {'slot freed -> taken again':42s} {quantiles(idle)}")
    cycles = [
        m.get("released", m.get("freed")) - m["taken"]
        for m in executions.values()
        if "taken" in m and "freed" in m
    ]
    print(f"    {'slot taken -> free again':42s} {quantiles(cycles)}")
    claims = data["claims"]
    if claims:
        sizes = [c[2] for c in claims]
        ordered = sorted(claims)
        beside = sum(1 for a, b in itertools.pairwise(ordered) if b[0] < a[1])
        print(
            f"    claims: {len(claims)} ({beside} sent before the one before answered), "
            f"mean size {statistics.fmean(sizes):.1f}, "
            f"statement {quantiles([c[1] - c[0] for c in claims])}"
        )
    for name in ("starts", "successes", "finals"):
        rows = [b for b in data["batches"] if b[0] == name]
        if not rows:
            continue
        print(
            f"    {name}: {len(rows)} batches, mean size "
            f"{statistics.fmean(b[4] for b in rows):.1f}; connection wait "
            f"{quantiles([b[2] - b[1] for b in rows])}; statement "
            f"{quantiles([b[3] - b[2] for b in rows])}"
        )


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trees", default=str(ROOT))
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--concurrency", type=int, default=200)
    parser.add_argument("--delay", type=float, default=0.1)
    args = parser.parse_args(argv)
    trees = [str(Path(t).resolve()) for t in args.trees.split(",")]
    with ExitStack() as stack:
        bench = Bench.scratch(stack, "cycle.", concurrency=args.concurrency, log_level="WARNING")
        base = bench.base
        _, integrations = bench.slow_route(stack, args.delay)
        for index in range(args.rounds):
            for tree in trees if index % 2 == 0 else trees[::-1]:
                out = base / "cycle.json"
                env = {
                    "INTEGRATIONS_FILE": str(integrations),
                    "SIMULATION_MODE": "false",
                    "LOG_LEVEL": "WARNING",
                    "BENCH_CYCLE_FILE": str(out),
                }
                bench.throughput(
                    1,
                    args.calls,
                    f"{Path(tree).name} cycle",
                    args.concurrency,
                    flow_id=bench.slow_flow_id,
                    env=env,
                    command=(str(ROOT / "bench" / "cycle_worker.py"), tree),
                )
                report(json.loads(out.read_text()), args.concurrency)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
