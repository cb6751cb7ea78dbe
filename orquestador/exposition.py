"""The Prometheus text exposition format, version 0.0.4: metric families in, text out, for the
web process's `/metrics` (executions/metrics/views.py) and the worker's endpoint
(executions/worker/metrics.py). Written by hand, not with prometheus_client: why in
docs/adr/0005-metrics-without-a-client-library.md.

Invariants: every family has one `# HELP` and one `# TYPE` line before its samples; label values
and help text are escaped as the format requires; numbers are written so that Go's ParseFloat
reads them back exactly (`+Inf`, `-Inf`, `NaN` for the special values).
"""

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

Labels = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Sample:
    """One line: the family's name plus `suffix` (`_bucket`, `_sum`, `_count` or ""), its labels
    and its value."""

    value: float
    labels: Labels = ()
    suffix: str = ""


@dataclass(frozen=True)
class Family:
    """One metric: its name, type (`counter`, `gauge` or `histogram`), help text and samples."""

    name: str
    kind: str
    help: str
    samples: list[Sample] = field(default_factory=list)


def number(value: float) -> str:
    """A sample value or bound as the format writes it."""
    if isinstance(value, bool | int):
        return str(int(value))
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


def _label_value(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _labels(labels: Labels) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{k}="{_label_value(v)}"' for k, v in labels) + "}"


def render(families: Iterable[Family]) -> str:
    """The exposition of these families, in order, ending with a newline."""
    lines: list[str] = []
    for family in families:
        lines.append(f"# HELP {family.name} {_help(family.help)}")
        lines.append(f"# TYPE {family.name} {family.kind}")
        for sample in family.samples:
            lines.append(
                f"{family.name}{sample.suffix}{_labels(sample.labels)} {number(sample.value)}"
            )
    return "\n".join(lines) + "\n"
