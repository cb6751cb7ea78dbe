"""The metric names the shipped dashboard and alert rules mention, and the families a scrape
declares, so a test can hold the first to the second."""

import json
import re
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "docker" / "grafana" / "orquestador.json"
ALERTS = ROOT / "docker" / "prometheus" / "alerts.yml"
ALERTS_TEST = ROOT / "docker" / "prometheus" / "alerts_test.yml"

_METRIC = re.compile(r"\borquestador_[a-zA-Z0-9_]+")
_TYPE = re.compile(r"^# TYPE (\S+) (\S+)$", re.MULTILINE)
_HISTOGRAM_SERIES = ("_bucket", "_sum", "_count")


def dashboard_expressions() -> list[str]:
    dashboard: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]


def rules() -> list[dict[str, Any]]:
    return [r for g in yaml.safe_load(ALERTS.read_text())["groups"] for r in g["rules"]]


def rule_test_series() -> list[str]:
    cases = yaml.safe_load(ALERTS_TEST.read_text())["tests"]
    return [s["series"] for case in cases for s in case["input_series"]]


def metric_names(texts: list[str]) -> set[str]:
    return {name for text in texts for name in _METRIC.findall(text)}


def exported_series(*expositions: str) -> set[str]:
    """Every series name these scrapes' `# TYPE` lines declare (a histogram's three)."""
    names = set()
    for text in expositions:
        for name, kind in _TYPE.findall(text):
            if kind == "histogram":
                names.update(name + suffix for suffix in _HISTOGRAM_SERIES)
            else:
                names.add(name)
    return names
