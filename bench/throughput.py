"""The `throughput` section of bench/worker.py: our no-op executions/s, by processes and by
concurrency.

K runworker processes at --concurrency for each K of --processes, then 1 and 2 processes at each
--more-concurrency; each run is Bench.throughput (N executions accepted in one transaction,
executions/s = N / (last finished_at - commit), with the worker's RSS, CPU, connections and
context switches and PostgreSQL's CPU and commits). The claim section adds a run with history.
"""

from typing import TYPE_CHECKING

from bench.procstat import switches_text

if TYPE_CHECKING:
    from bench.worker import Bench


def run(bench: "Bench", *, processes: list[int], executions: int, more: list[int]) -> dict:
    """The runs at each count of `processes`, then at each of `more` concurrency (none: skipped)."""
    report = {"throughput": [bench.throughput(k, executions, f"{k}-proc") for k in processes]}
    if more:
        values = ", ".join(map(str, more))
        print(f"throughput at WORKER_CONCURRENCY={values}:", flush=True)
        report["throughput_more_concurrency"] = [
            bench.throughput(k, executions, f"{k}-proc-c{c}", c) for c in more for k in (1, 2)
        ]
    return report


def summary_lines(report: dict) -> list[str]:
    lines = []
    if "throughput" in report:
        lines.append(
            "  executions/s by processes: "
            + ", ".join(
                f"{r['processes']}: {r['executions_per_second']}" for r in report["throughput"]
            )
        )
        if report.get("throughput_more_concurrency"):
            lines.append(
                "  executions/s at higher concurrency: "
                + ", ".join(
                    f"{r['processes']}x{r['concurrency']}: {r['executions_per_second']}"
                    for r in report["throughput_more_concurrency"]
                )
            )
        lines.append(
            "  worker peak RSS (MiB): "
            + ", ".join(str(max(m["VmHWM"] for m in r["rss_mib"])) for r in report["throughput"])
        )
        lines.append(
            "  per execution at 1 process: worker CPU "
            f"{report['throughput'][0]['worker_cpu_ms_per_execution']} ms, PostgreSQL CPU "
            f"{report['throughput'][0]['postgres_cpu_ms_per_execution']} ms, "
            f"{report['throughput'][0]['commits_per_execution']} commits, "
            f"{switches_text(report['throughput'][0]['context_switches_per_execution'])} context "
            "switches"
        )
    if "throughput_history" in report:
        lines.append(
            f"  executions/s with history: {report['throughput_history']['executions_per_second']}"
        )
    return lines
