"""Reading a metrics scrape in tests: a strict check of the text format, then prometheus_client's
own parser, which must read the same samples.

`scrape(text)` fails the test on any line that is not exactly what the Prometheus text format
0.0.4 allows (one HELP and one TYPE per family, before its samples; sample names of the family's
type; escaped label values; numbers Go can parse), on a histogram whose buckets are not
cumulative or whose `+Inf` bucket is not its count, on a repeated series, and on names that break
the conventions (`orquestador_` prefix, `_total` counters, `_seconds` units).
"""

import math
import re
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_VALUE = r"[+-]?(?:[0-9]+(?:\.[0-9]*)?(?:[eE][+-]?[0-9]+)?|\.[0-9]+(?:[eE][+-]?[0-9]+)?|Inf)|NaN"
_LABEL = r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\[\\"n])*)"'
_SAMPLE = re.compile(rf"({_NAME})(?:\{{({_LABEL}(?:,{_LABEL})*)\}})? ({_VALUE})")
_HELP = re.compile(rf"# HELP ({_NAME}) (.*)")
_TYPE = re.compile(rf"# TYPE ({_NAME}) (counter|gauge|histogram)")
_UUID = re.compile(
    r"[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}"
)

Labels = tuple[tuple[str, str], ...]


@dataclass
class Scrape:
    text: str
    types: dict[str, str]
    samples: dict[tuple[str, Labels], float]

    def value(self, name: str, **labels: str) -> float:
        return self.samples[(name, tuple(sorted(labels.items())))]

    def label_values(self) -> set[str]:
        return {v for _, labels in self.samples for _, v in labels}


def _float(text: str) -> float:
    return float(text.replace("Inf", "inf"))


def scrape(text: str) -> Scrape:
    """Check `text` strictly and return its samples; fail the test on anything out of place."""
    assert text.endswith("\n"), "the exposition must end with a newline"
    types: dict[str, str] = {}
    helped: set[str] = set()
    samples: dict[tuple[str, Labels], float] = {}
    family = kind = None
    buckets: dict[tuple[str, Labels], list[tuple[float, float]]] = {}
    for number, line in enumerate(text[:-1].split("\n"), start=1):
        where = f"line {number}: {line!r}"
        if match := _HELP.fullmatch(line):
            name = match[1]
            assert name not in helped and name not in types, f"{where}: family repeated"
            helped.add(name)
            family, kind = name, None
            continue
        if match := _TYPE.fullmatch(line):
            assert match[1] == family and kind is None, f"{where}: TYPE must follow its HELP"
            family, kind = match[1], match[2]
            types[family] = kind
            continue
        match = _SAMPLE.fullmatch(line)
        assert match, f"{where}: not a sample line of the text format"
        assert family is not None and kind is not None, f"{where}: sample before HELP and TYPE"
        name, value = match[1], _float(match[match.lastindex])
        labels = tuple(
            sorted(
                (k, v.replace('\\"', '"').replace("\\n", "\n").replace("\\\\", "\\"))
                for k, v in re.findall(_LABEL, match[2] or "")
            )
        )
        allowed = {"histogram": {f"{family}_bucket", f"{family}_sum", f"{family}_count"}}.get(
            kind, {family}
        )
        assert name in allowed, f"{where}: {name} is not a sample of {kind} {family}"
        assert (name, labels) not in samples, f"{where}: series repeated"
        samples[(name, labels)] = value
        if name.endswith("_bucket"):
            le = dict(labels)["le"]
            rest = tuple(item for item in labels if item[0] != "le")
            buckets.setdefault((family, rest), []).append((_float(le), value))
    _check_conventions(types)
    _check_histograms(types, samples, buckets)
    _check_reference_parser(text, samples)
    return Scrape(text, types, samples)


def _check_conventions(types: dict[str, str]) -> None:
    for name, kind in types.items():
        assert name.startswith("orquestador_"), f"{name}: every metric is orquestador_*"
        assert (kind == "counter") == name.endswith("_total"), f"{name}: _total is for counters"
        if "second" in name:
            assert name.endswith("_seconds"), f"{name}: a time is in base units, _seconds"


def _check_histograms(types, samples, buckets) -> None:
    for family in (name for name, kind in types.items() if kind == "histogram"):
        assert any(f == family for f, _ in buckets), f"{family}: a histogram has buckets"
    for (family, rest), series in buckets.items():
        bounds = [b for b, _ in series]
        counts = [c for _, c in series]
        assert bounds == sorted(bounds) and math.isinf(bounds[-1]), f"{family}: le order"
        assert counts == sorted(counts), f"{family}: buckets must be cumulative"
        assert counts[-1] == samples[(f"{family}_count", rest)], f"{family}: +Inf is the count"
        assert (f"{family}_sum", rest) in samples


def _check_reference_parser(text: str, samples: dict[tuple[str, Labels], float]) -> None:
    parsed = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    assert parsed.keys() == samples.keys()
    for key, value in samples.items():
        assert parsed[key] == value or (math.isnan(value) and math.isnan(parsed[key])), key


def assert_no_identifiers(text: str, *forbidden: str) -> None:
    """No UUID-shaped text, and none of `forbidden` (ids, owners, tenants, lease owners)."""
    assert not _UUID.search(text), _UUID.search(text)
    for word in forbidden:
        assert word not in text, f"{word!r} leaked into the metrics"
