"""What a delivered webhook costs, code against code, alternating.

    .venv/bin/python bench/webhookcost.py [--trees A,B] [--rounds 3] [--executions 6000]
        [--receivers lean,aiohttp] [--latency-samples 300]

One throwaway cluster and the webhooks section's receivers (bench/webhooks.py); then, round
after round, one `runworker` of each TREE (a checkout with its own manage.py: this one by
default, an older commit extracted beside it for an A/B; the cluster is migrated by this one)
runs --executions no-op executions at 1 x 10 without a subscription, then with one on every
event to each receiver, the trees' order swapped every round so both see the same load. Before
each tree's runs the cluster's `executions` schema is migrated (by this checkout, which must
hold every tree's migrations) to that tree's latest migration, forwards or back.
Printed: each run, then per tree and receiver the medians of the ratio to the run without, of
the worker's, PostgreSQL's and the receiver's CPU per delivered event, of the commits per
delivered event, of the last delivery after the last finish, and of each run's own figures
(executions/s, CPU and commits per execution, without: off_, with: on_). With
--latency-samples, each tree's round begins with the section's light-load latency (the lean
receiver): its p50 and p99 medians are printed too.
"""

import argparse
import statistics
import subprocess
import sys
from contextlib import ExitStack
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import webhooks  # noqa: E402
from bench.common import PYTHON  # noqa: E402
from bench.worker import Bench  # noqa: E402


def migrate_to(bench: Bench, tree: str) -> None:
    """The `executions` schema as `tree` has it: its latest migration, applied or unapplied by
    this checkout's manage.py."""
    latest = max(
        path.stem
        for path in (Path(tree) / "executions" / "migrations").glob("[0-9][0-9][0-9][0-9]_*.py")
    )
    subprocess.run(
        [PYTHON, "manage.py", "migrate", "--noinput", "executions", latest],
        cwd=ROOT,
        env=bench.env,
        check=True,
        stdout=subprocess.DEVNULL,
    )


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trees", default=str(ROOT))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--executions", type=int, default=6000)
    parser.add_argument("--receivers", default="lean,aiohttp")
    parser.add_argument(
        "--latency-samples", type=int, default=0, help="also light-load latency (lean receiver)"
    )
    args = parser.parse_args(argv)
    trees = [str(Path(t).resolve()) for t in args.trees.split(",")]
    names = [name for name in args.receivers.split(",") if name]
    runs: dict[tuple[str, str], list[dict]] = {}
    with ExitStack() as stack:
        bench = Bench.scratch(stack, "webhookcost.", concurrency=10)
        receivers = {"aiohttp": webhooks.Receiver(), "lean": webhooks.LeanReceiver()}
        try:
            for index in range(args.rounds):
                for tree in trees if index % 2 == 0 else trees[::-1]:
                    command = (str(Path(tree) / "manage.py"), "runworker")
                    print(f"round {index + 1}, {tree}:", flush=True)
                    migrate_to(bench, tree)
                    if args.latency_samples:
                        got = webhooks.latency(
                            bench, receivers["lean"], args.latency_samples, command
                        )
                        runs.setdefault((tree, "latency"), []).append(got)
                    off = webhooks.throughput(bench, None, args.executions, command)
                    for name in names:
                        on = webhooks.throughput(bench, receivers[name], args.executions, command)
                        got = webhooks.compared(on, off)
                        got["last_delivery_after_last_finish_ms"] = on[
                            "last_delivery_after_last_finish_ms"
                        ]
                        for key in (
                            "executions_per_second",
                            "worker_cpu_ms_per_execution",
                            "postgres_cpu_ms_per_execution",
                            "commits_per_execution",
                        ):
                            got[f"off_{key}"], got[f"on_{key}"] = off[key], on[key]
                        runs.setdefault((tree, name), []).append(got)
        finally:
            for receiver in receivers.values():
                receiver.close()
    print("medians:")
    for (tree, name), got in runs.items():
        medians = {
            key: round(statistics.median(g[key] for g in got), 3)
            for key, value in got[0].items()
            if isinstance(value, int | float)
        }
        if name == "latency":
            print(f"  {tree}, latency: {medians}", flush=True)
            continue
        ratios = sorted(g["throughput_ratio"] for g in got)
        print(f"  {tree}, {name} receiver: {medians} (ratios {ratios})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
