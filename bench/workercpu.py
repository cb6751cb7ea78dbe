"""The worker's CPU per execution on the slow provider, code against code, alternating.

    .venv/bin/python bench/workercpu.py [--trees A,B] [--rounds 3] [--levels WARNING,INFO]
        [--calls 3000] [--concurrency 200] [--profile]

One throwaway cluster and one 100 ms provider (bench/provider.py), as bench/worker.py's slow
section; then, round after round, one `runworker` of each TREE (a checkout with its own
manage.py: this one by default, an older commit extracted beside it for an A/B) runs --calls
executions of the slow flow at each level, the trees' order swapped every round so both see the
same load. Printed: each run, then per tree and level the median worker CPU per execution,
executions/s and commits per execution. With --profile, each tree runs once more under cProfile
(bench/profiled_worker.py, the loop thread's CPU) at each level: Python calls per execution
(startup included, so read them from runs of the same size) and the --top functions with the
most own and cumulative time.
"""

import argparse
import pstats
import statistics
import sys
from contextlib import ExitStack
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.worker import Bench  # noqa: E402


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trees", default=str(ROOT))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--levels", default="WARNING,INFO")
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--concurrency", type=int, default=200)
    parser.add_argument("--delay", type=float, default=0.1)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--top", type=int, default=40)
    args = parser.parse_args(argv)
    trees = [str(Path(t).resolve()) for t in args.trees.split(",")]
    levels = args.levels.split(",")
    with ExitStack() as stack:
        bench = Bench.scratch(
            stack, "workercpu.", concurrency=args.concurrency, log_level=levels[0]
        )
        base = bench.base
        _, integrations = bench.slow_route(stack, args.delay)
        env = {"INTEGRATIONS_FILE": str(integrations), "SIMULATION_MODE": "false"}

        def run(tree: str, level: str, command: tuple[str, ...], extra: dict) -> dict:
            return bench.throughput(
                1,
                args.calls,
                f"{Path(tree).name} {level}",
                args.concurrency,
                flow_id=bench.slow_flow_id,
                env={**env, "LOG_LEVEL": level, **extra},
                command=command,
            )

        results: dict[tuple[str, str], list[dict]] = {}
        for index in range(args.rounds):
            order = trees if index % 2 == 0 else trees[::-1]
            for level in levels:
                for tree in order:
                    command = (str(Path(tree) / "manage.py"), "runworker")
                    results.setdefault((tree, level), []).append(run(tree, level, command, {}))
        print("medians:")
        for (tree, level), runs in results.items():
            cpu = statistics.median(r["worker_cpu_ms_per_execution"] for r in runs)
            rate = statistics.median(r["executions_per_second"] for r in runs)
            commits = statistics.median(r["commits_per_execution"] for r in runs)
            spread = sorted(r["worker_cpu_ms_per_execution"] for r in runs)
            print(
                f"  {tree} {level}: worker CPU {cpu:.3f} ms/execution ({spread}), "
                f"{rate:.0f} executions/s, {commits:.2f} commits/execution"
            )
        if args.profile:
            for level in levels:
                for tree in trees:
                    out = base / f"profile-{Path(tree).name}-{level}.pstats"
                    command = (str(ROOT / "bench" / "profiled_worker.py"), tree)
                    run(tree, level, command, {"BENCH_PROFILE_FILE": str(out)})
                    stats = pstats.Stats(str(out))
                    print(
                        f"profile {tree} {level}: "
                        f"{stats.total_calls / args.calls:.0f} Python calls/execution, "
                        f"{stats.total_tt / args.calls * 1000:.3f} ms profiled CPU/execution"
                    )
                    if args.top:
                        stats.sort_stats("tottime").print_stats(args.top)
                        stats.sort_stats("cumulative").print_stats(args.top)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
