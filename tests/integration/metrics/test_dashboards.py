"""The shipped Grafana dashboard and Prometheus alert rules: promtool accepts the rules and passes
their tests, every alert has a case that fires it, and every metric either names is one the web
process and the worker export."""

import asyncio
import json
import os
import subprocess
import threading
from pathlib import Path

import pytest
import yaml
from django.test import Client

from actions.base import ActionContext, ActionResult, Binding, Contract, Outcome, Route
from executions.worker.callmetrics import CALL_OUTCOMES, CALL_SECONDS, CALLS, CallMetrics
from executions.worker.calls import adapter_call
from executions.worker.metrics import WorkerMetrics
from orquestador.exposition import render
from tests.support.dashboards import (
    ALERTS,
    ALERTS_TEST,
    DASHBOARD,
    ROOT,
    dashboard_expressions,
    exported_series,
    metric_names,
    rule_test_series,
    rules,
)
from tests.support.prometheus import scrape

PROMTOOL_DEADLINE = 120.0  # seconds: the first run may download and unpack the package


@pytest.fixture(scope="module")
def promtool() -> str:
    """scripts/test exports PROMTOOL; a bare pytest run asks the helper (cached in .local/)."""
    path = (
        os.environ.get("PROMTOOL")
        or subprocess.run(
            [ROOT / "scripts" / "promtool"],
            capture_output=True,
            text=True,
            check=True,
            timeout=PROMTOOL_DEADLINE,
        ).stdout.strip()
    )
    assert Path(path).is_file(), path
    return path


def run(promtool: str, *args: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [promtool, *map(str, args)], capture_output=True, text=True, timeout=PROMTOOL_DEADLINE
    )


def test_alert_rules__pass_promtool_check(promtool):
    checked = run(promtool, "check", "rules", ALERTS)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(rules())} rules found" in checked.stdout


def test_alert_rules__pass_their_promtool_tests(promtool):
    tested = run(promtool, "test", "rules", ALERTS_TEST)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "SUCCESS" in tested.stdout


def test_promtool__fails_a_broken_rule_and_a_wrong_expectation(promtool, tmp_path):
    broken = tmp_path / "broken.yml"
    broken.write_text(
        "groups:\n- name: g\n  rules:\n  - alert: A\n    expr: sum(orquestador_queue_due\n"
    )
    assert run(promtool, "check", "rules", broken).returncode != 0
    wrong = tmp_path / "wrong_test.yml"
    wrong.write_text(
        ALERTS_TEST.read_text()
        .replace("alerts.yml", str(ALERTS))
        .replace("severity: critical", "severity: page")
    )
    failed = run(promtool, "test", "rules", wrong)
    assert failed.returncode != 0
    assert "OrquestadorDatabaseUnreadable" in failed.stdout + failed.stderr


def test_alert_rules__each_has_a_case_that_fires_it():
    cases = yaml.safe_load(ALERTS_TEST.read_text())["tests"]
    fired = {
        check["alertname"]
        for case in cases
        for check in case["alert_rule_test"]
        if check["exp_alerts"]
    }
    assert fired == {rule["alert"] for rule in rules()}
    assert all(rule["labels"]["severity"] in {"warning", "critical"} for rule in rules())


class _Raises:
    name = "test.raises"

    def call(self, ctx: ActionContext, binding: Binding) -> ActionResult:
        raise RuntimeError("boom")


class _Succeeds:
    name = "test.succeeds"

    def call(self, ctx: ActionContext, binding: Binding) -> ActionResult:
        return ActionResult(outcome=Outcome.SUCCEEDED, output={})


def binding(capability: str, adapter: object) -> Binding:
    contract = Contract(capability=capability, version=3, effect="READ_ONLY", max_attempts=1)
    route = Route(capability=capability, version=3, adapter=adapter.name)  # type: ignore[attr-defined]
    return Binding(contract=contract, route=route, adapter=adapter)  # type: ignore[arg-type]


def context() -> ActionContext:
    return ActionContext(
        input={},
        request_id="r",
        execution_id="e",
        action_id="a",
        owner="o",
        scope="s",
        external_key="e:a",
        attempt=1,
        cancelled=threading.Event(),
    )


def test_adapter_call__counts_and_times_each_call_by_capability_and_outcome():
    ok, raising = binding("dash.ok", _Succeeds()), binding("dash.raises", _Raises())
    before_ok = CALLS.value("dash.ok@3", "SUCCEEDED")
    before_unknown = CALLS.value("dash.raises@3", "UNKNOWN")
    assert asyncio.run(adapter_call(ok, context(), dict)).outcome == Outcome.SUCCEEDED
    assert asyncio.run(adapter_call(ok, context(), dict)).outcome == Outcome.SUCCEEDED
    assert asyncio.run(adapter_call(raising, context(), dict)).outcome == Outcome.UNKNOWN
    assert CALLS.value("dash.ok@3", "SUCCEEDED") == before_ok + 2
    assert CALLS.value("dash.raises@3", "UNKNOWN") == before_unknown + 1
    found = scrape(WorkerMetrics().text())  # the worker serves them with its own
    assert found.value(CALL_OUTCOMES, capability="dash.ok@3", outcome="SUCCEEDED") >= 2
    assert found.value(CALL_OUTCOMES, capability="dash.ok@3", outcome="UNKNOWN") == 0
    assert found.value(f"{CALL_SECONDS}_count", capability="dash.raises@3") >= 1


def test_call_metrics__histogram_buckets_are_cumulative_per_capability():
    metrics = CallMetrics()
    assert metrics.families() == []  # no call yet: no histogram without buckets
    for seconds in (0.001, 0.2, 0.2, 60.0):
        metrics.call_done(capability="pay@1", outcome="SUCCEEDED", seconds=seconds)
    metrics.call_done(capability="ship@2", outcome="TRANSIENT", seconds=0.04)
    found = scrape(render(metrics.families()))
    assert found.value(f"{CALL_SECONDS}_bucket", capability="pay@1", le="0.005") == 1
    assert found.value(f"{CALL_SECONDS}_bucket", capability="pay@1", le="0.25") == 3
    assert found.value(f"{CALL_SECONDS}_bucket", capability="pay@1", le="30.0") == 3
    assert found.value(f"{CALL_SECONDS}_bucket", capability="pay@1", le="+Inf") == 4
    assert found.value(f"{CALL_SECONDS}_sum", capability="pay@1") == pytest.approx(60.401)
    assert found.value(CALL_OUTCOMES, capability="ship@2", outcome="TRANSIENT") == 1
    assert found.value(CALL_OUTCOMES, capability="ship@2", outcome="SUCCEEDED") == 0


@pytest.mark.django_db(transaction=True)
def test_dashboard_and_rules__name_only_metrics_the_processes_export(client: Client):
    web = client.get("/metrics")
    assert web.status_code == 200
    # A worker that has called an adapter exports the call families too.
    asyncio.run(adapter_call(binding("dash.any", _Succeeds()), context(), dict))
    worker = WorkerMetrics()
    worker.track_slots(slots=2, busy=lambda: 0)  # as the scheduler does at start
    exported = exported_series(web.content.decode(), worker.text())
    dashboard = metric_names(dashboard_expressions())
    alerting = metric_names([r["expr"] for r in rules()] + rule_test_series())
    assert dashboard - exported == set()
    assert alerting - exported == set()
    # What the dashboard must show: backlog and oldest due age, claim latency, per-route calls,
    # the reconciliation backlog and its age, lease losses, probes.
    assert {
        "orquestador_queue_depth",
        "orquestador_queue_oldest_due_age_seconds",
        "orquestador_worker_claim_latency_seconds_bucket",
        "orquestador_action_call_seconds_bucket",
        "orquestador_action_calls_total",
        "orquestador_reconciliation_backlog",
        "orquestador_reconciliation_oldest_age_seconds",
        "orquestador_worker_lease_losses_total",
        "orquestador_worker_probes_total",
    } <= dashboard


def test_dashboard__panels_are_unique_do_not_overlap_and_use_the_chosen_data_source():
    dashboard = json.loads(DASHBOARD.read_text())
    panels = dashboard["panels"]
    assert len({p["id"] for p in panels}) == len(panels)
    cells: set[tuple[int, int]] = set()
    for panel in panels:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]
        mine = {
            (x, y)
            for x in range(grid["x"], grid["x"] + grid["w"])
            for y in range(grid["y"], grid["y"] + grid["h"])
        }
        assert not mine & cells, f"{panel['title']} overlaps another panel"
        cells |= mine
        for target in panel.get("targets", []):
            assert target["datasource"]["uid"] == "${datasource}", panel["title"]
            assert target["expr"].count("(") == target["expr"].count(")"), target["expr"]
    assert [v["name"] for v in dashboard["templating"]["list"]] == ["datasource"]
