"""The pictures on the admin's pages, with the real `dot` and real PostgreSQL: a flow's state
machine drawn within bounds and cached per version, `dot` stopped at its time limit, the attempt
history the settlement statements write, the timeline drawn from a real execution's rows, and
the pages that show them (a finished execution no longer promising a next attempt), each under
the Content-Security-Policy with no inline script."""

import html
import json
import os
import shutil
import stat
import xml.etree.ElementTree as ET

import pytest
from django.utils import timezone

from actions.registry import use_registry
from executions.models import ActionAttempt, Flow
from executions.pictures import diagram
from executions.pictures.svgsafety import SVG_NS
from executions.pictures.timeline import execution_timeline
from tests.conftest import ROOT
from tests.integration.reconciliation.conftest import RESOLVE, VIEW, _user
from tests.support.bigflow import big_flow, big_flow_registry
from tests.support.csp import assert_policy_held
from tests.support.eventful import Eventful
from tests.support.worker import create_flow, enqueue

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def dot():
    if shutil.which("dot") is None:
        message = "Graphviz's dot is not installed (`apt-get install graphviz`)"
        if os.environ.get("CI") == "true":
            pytest.fail("CI must draw the pictures: " + message)
        pytest.skip(message)


@pytest.fixture
def operator(db):
    return _user("olga", *VIEW, *RESOLVE)


@pytest.fixture
def viewer(client, db):
    """A client logged in as staff who may read every page here."""
    _user("vera", *VIEW)
    client.login(username="vera", password="pw-vera")
    return client


@pytest.fixture
def big(runtime_conn, dot):
    """The 20-state, 40-transition flow, published, with its capabilities configured."""
    with use_registry(big_flow_registry()):
        yield Flow.objects.get(pk=create_flow(runtime_conn, big_flow()))


def test_flow_picture__draws_every_state_and_transition_of_a_big_flow(big):
    picture = diagram.flow_picture(big)
    assert picture.problem is None
    for i in range(20):
        assert f'id="flow-s{i}"' in picture.svg
    for t in range(40):
        assert f'id="flow-t{t}"' in picture.svg
    assert "<script" not in picture.svg
    # Legible at 1400 px: its 11 px text fits, unscaled, beside the admin's navigation sidebar.
    width = int(picture.svg.split('width="', 1)[1].split('"', 1)[0])
    assert width <= 1000


def test_flow_picture__is_drawn_once_per_flow_version(big, monkeypatch):
    diagram._cache.clear()
    calls = []
    real = diagram.run_dot
    monkeypatch.setattr(diagram, "run_dot", lambda text: calls.append(text) or real(text))
    first = diagram.flow_picture(big)
    again = diagram.flow_picture(Flow.objects.get(pk=big.pk))
    assert first is again and len(calls) == 1


def test_run_dot__is_stopped_at_its_time_limit(tmp_path, monkeypatch):
    slow = tmp_path / "dot"
    slow.write_text("#!/bin/sh\nexec sleep 30\n")
    slow.chmod(slow.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setattr(diagram, "_dot_binary", lambda: str(slow))
    started = timezone.now()
    with pytest.raises(diagram.DiagramUnavailable, match=r"longer than 0\.5 s"):
        diagram.run_dot("digraph {}", timeout=0.5)
    assert (timezone.now() - started).total_seconds() < 5


def test_flow_picture__says_why_when_dot_is_missing(big, monkeypatch):
    diagram._cache.clear()
    monkeypatch.setattr(diagram, "_dot_binary", lambda: None)
    picture = diagram.flow_picture(big)
    assert picture.svg is None and "not installed" in picture.problem


# -- the attempt history and the timeline ----------------------------------------------------
@pytest.fixture
def eventful(runtime_conn, runtime_dsn):
    return Eventful(runtime_conn, runtime_dsn)


def test_settlement__keeps_each_attempt_that_did_not_succeed(eventful, operator):
    execution = eventful.to_reconciliation()
    kept = [
        (a.action_id, a.attempt, a.status, a.error_code)
        for a in ActionAttempt.objects.filter(execution=execution).order_by("id")
    ]
    # The reserve's first attempt died with its worker: nothing settled it.
    assert kept == [
        ("customer", 1, "FAILED", "HTTP_503"),
        ("customer", 2, "FAILED", "HTTP_429"),
        ("charge", 1, "UNKNOWN", "TIMEOUT_AFTER_SEND"),
    ]
    for attempt in ActionAttempt.objects.filter(execution=execution):
        assert attempt.started_at <= attempt.finished_at
    # While the case is open the charge is drawn as it ended, with nothing settled since.
    lanes = {lane.title: lane for lane in execution_timeline(execution, now=timezone.now()).lanes}
    assert [(s.kind, s.label) for s in lanes["charge"].spans] == [
        ("unknown", "#1 TIMEOUT_AFTER_SEND")
    ]
    assert lanes["charge"].marks == []


def test_timeline__draws_attempts_backoffs_takeover_probe_resolution_and_wait(eventful, operator):
    eventful.to_reconciliation()
    execution = eventful.resolve_and_finish(operator)
    timeline = execution_timeline(execution, now=timezone.now())
    lanes = {lane.title: lane for lane in timeline.lanes}
    assert list(lanes) == [
        "execution",
        "operators and probes",
        "customer",
        "reserve",
        "charge",
        "approval",
        "receipt",
    ]
    customer = lanes["customer"]
    assert [s.kind for s in customer.spans if s.kind != "backoff"] == [
        "failed",
        "failed",
        "succeeded",
    ]
    backoffs = [s for s in customer.spans if s.kind == "backoff"]
    assert len(backoffs) == 2 and all(s.end > s.start for s in backoffs)
    assert [m.kind for m in lanes["reserve"].marks] == ["interrupted"]
    assert [s.label for s in lanes["reserve"].spans] == ["#2"]
    assert [s.kind for s in lanes["charge"].spans] == ["unknown"]
    assert [m.label for m in lanes["charge"].marks] == ["→ SUCCEEDED"]
    assert [(s.kind, s.label) for s in lanes["approval"].spans] == [("waiting", "timed out")]
    own = [m.kind for m in lanes["execution"].marks]
    assert own[:2] == ["accepted", "takeover"] and own[-1] == "completed"
    assert {"reconciliation", "resumed"} <= set(own)
    assert {s.kind for s in lanes["execution"].spans} == {"queued", "operator", "suspended"}
    assert [m.kind for m in lanes["operators and probes"].marks] == ["probe", "resolved"]
    assert timeline.live is False


# -- the pages -------------------------------------------------------------------------------
def test_flow_page__draws_the_state_machine_above_the_fields(viewer, big):
    page = assert_policy_held(viewer.get(f"/admin/executions/flow/{big.pk}/change/"))
    assert page.index('id="flow-picture"') < page.index("<fieldset")
    assert '<svg xmlns="http://www.w3.org/2000/svg"' in page and "<script>alert" not in page


def test_flow_page__draws_compensations_folds_the_definition_and_names_the_product(
    viewer, runtime_conn, dot
):
    definition = json.loads((ROOT / "examples" / "checkout.json").read_text())
    flow = Flow.objects.get(pk=create_flow(runtime_conn, definition))
    picture = diagram.flow_picture(flow)
    assert picture.problem is None, picture.problem
    root = ET.fromstring(picture.svg)  # noqa: S314 (cleaned SVG drawn from our own flow)
    edges = {g.get("id"): g for g in root.iter(f"{{{SVG_NS}}}g") if g.get("id")}
    for aid, words in ((0, "undo reserve: stock.release@1"), (1, "undo charge: payments.refund@1")):
        edge = edges[f"flow-undo-t0-a{aid}-s0"]
        assert [t.text for t in edge.iter(f"{{{SVG_NS}}}text")] == [words]
        assert next(edge.iter(f"{{{SVG_NS}}}path")).get("stroke-dasharray")  # dashed

    page = assert_policy_held(viewer.get(f"/admin/executions/flow/{flow.pk}/change/"))
    assert "undo reserve: stock.release@1" in page
    folded = page.split('<details id="flow-definition">', 1)[1].split("</details>", 1)[0]
    assert folded.startswith("<summary>2 states, 1 transitions: show the JSON</summary><pre>")
    shown = html.unescape(folded.split("<pre>", 1)[1].split("</pre>", 1)[0])
    assert json.loads(shown) == definition and '\n  "states": [\n    "DRAFT",' in shown
    assert "<title>" in page and "| orquestador admin</title>" in page
    assert "orquestador administration" in page and "Django administration" not in page


def test_request_page__highlights_its_state_and_the_transition_in_flight(viewer, runtime_conn, big):
    accepted = enqueue(runtime_conn, big.pk, transition_id="charge", state="RESERVED")
    page = assert_policy_held(
        viewer.get(f"/admin/executions/request/{accepted.request_id}/change/")
    )
    reserved = big.definition["states"].index("RESERVED")
    charge = [t["id"] for t in big.definition["transitions"]].index("charge")
    assert f"#flow-s{reserved} path" in page and f"#flow-t{charge} path" in page
    assert f"#flow-in-s{reserved}-t{charge} path" in page
    assert "In flight: transition charge" in page


def test_execution_page__draws_the_timeline_and_no_next_attempt_once_finished(
    viewer, eventful, operator
):
    eventful.to_reconciliation()
    execution = eventful.resolve_and_finish(operator)
    page = assert_policy_held(viewer.get(f"/admin/executions/execution/{execution.pk}/change/"))
    assert 'id="execution-timeline"' in page and 'class="tl"' in page
    assert "(SUCCEEDED: no next attempt)" in page
    assert "Next attempt at" in page and "(in " not in page.split("Next attempt at", 1)[1][:200]


def test_case_page__draws_the_timeline(client, eventful, operator):
    execution = eventful.to_reconciliation()
    client.force_login(operator)
    page = assert_policy_held(
        client.get(f"/admin/reconciliation/reconciliationcase/{execution.pk}/change/")
    )
    assert page.index('id="execution-timeline"') < page.index('id="case-checkpoints"')
