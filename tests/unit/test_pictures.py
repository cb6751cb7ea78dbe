"""The pictures' pure parts: a flow's DOT text (every label escaped, ids from positions), the
SVG cleaner, the timeline's axis with its cut stretches, and a timeline of 20 actions and 50
attempts drawn without one unescaped text."""

import json
import xml.etree.ElementTree as ET
from datetime import UTC, datetime, timedelta

import pytest

from executions.pictures import diagram
from executions.pictures.svgsafety import SVG_NS, SvgRefused, clean_svg
from executions.pictures.timeline import Lane, Mark, Span, Timeline, duration
from executions.pictures.timelinesvg import (
    BREAK_WIDTH,
    MIN_BAR,
    PLOT_LEFT,
    PLOT_RIGHT,
    build_scale,
    timeline_svg,
)
from tests.conftest import ROOT
from tests.support.bigflow import big_flow

HOSTILE = '<script>alert("x")</script> & \x1b[31m \ud800'
T0 = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def _parse(svg: str) -> ET.Element:
    return ET.fromstring(svg)  # noqa: S314 (SVG this test just drew)


def _tags(svg: str) -> set[str]:
    return {element.tag.rpartition("}")[2] for element in _parse(svg).iter()}


# -- the flow's DOT text ---------------------------------------------------------------------
def test_flow_dot__escapes_every_name_and_ids_come_from_positions():
    definition = {
        "initialState": HOSTILE,
        "states": [HOSTILE, 'DONE"];x->y;["'],
        "transitions": [
            {
                "id": "go",
                "from": [HOSTILE],
                "actions": [{"id": "a", "capability": "c<b>", "version": 1, "input": {}}],
                "decision": {"hitPolicy": "FIRST", "rules": [
                    {"id": "r<i>", "when": True, "target": 'DONE"];x->y;["', "outcome": "o"}
                ]},
            }
        ],
    }  # fmt: skip
    text = diagram.flow_dot(definition, {("c<b>", 1): diagram.Capability("READ_ONLY")})
    assert "<script>" not in text and "&lt;script&gt;" in text
    assert "c&lt;b&gt;@1" in text and "r&lt;i&gt;" in text
    assert '"];x->y;["' not in text  # a name never ends an attribute or adds an edge
    assert "\x1b" not in text and "\ud800" not in text
    assert 's0 -> t0 [id="flow-in-s0-t0"]' in text
    assert 't0 -> s1 [id="flow-out-t0-s1"' in text


def test_flow_dot__a_trailing_backslash_never_escapes_a_closing_quote():
    definition = {
        "initialState": "A\\",
        "states": ["A\\", "B"],
        "transitions": [{"id": "go\\", "from": ["A\\"], "actions": []}],
    }
    text = diagram.flow_dot(definition, {})
    assert '\\"' not in text and 'tooltip="state A&#92;"' in text


def test_flow_dot__draws_each_compensation_as_a_dashed_edge_back_named_by_its_action():
    definition = json.loads((ROOT / "examples" / "checkout.json").read_text())
    text = diagram.flow_dot(definition, {})
    undo = [line.strip() for line in text.splitlines() if "flow-undo-" in line]
    assert len(undo) == 2, text  # reserve and charge, each back to DRAFT (s0)
    assert undo[0].startswith('t0:a0 -> s0 [id="flow-undo-t0-a0-s0", style=dashed')
    assert "label=<undo reserve: stock.release@1>" in undo[0]
    assert undo[1].startswith('t0:a1 -> s0 [id="flow-undo-t0-a1-s0", style=dashed')
    assert "label=<undo charge: payments.refund@1>" in undo[1]
    assert 'PORT="a0"' in text and 'PORT="a1"' in text
    # A transition that does not opt in never compensates: nothing drawn.
    definition["transitions"][0]["onFailure"] = "reconcile"
    assert "flow-undo-" not in diagram.flow_dot(definition, {})


def test_flow_dot__marks_effects_waits_and_asynchronous_calls():
    definition = big_flow()
    caps = {
        ("payments.charge", 1): diagram.Capability("NON_IDEMPOTENT_WRITE"),
        ("kyc.verify", 1): diagram.Capability("READ_ONLY", is_async=True),
    }
    text = diagram.flow_dot(definition, caps)
    charge = diagram.EFFECT_STYLE["NON_IDEMPOTENT_WRITE"][0]
    assert f'BGCOLOR="{charge}" ID="flow-t10-a1"' in text  # charge's 2nd action: the charge
    assert "<B>kyc</B>  read · ↩ async<BR/>" in text and ">kyc.verify@1</FONT>" in text
    assert "<B>manager</B>  wait<BR/>" in text and ">manager.approval ≤ 2 d</FONT>" in text
    assert "<B>customer</B>  effect unknown<BR/>" in text  # not in this catalog
    assert text.count('shape=box, style="rounded,filled", fillcolor="#fbfbfc"') == 40


def test_shown__is_one_printable_line_cut_to_its_length():
    assert diagram.shown("a\nb\tc") == "a b c"
    assert diagram.shown("x\x07y") == "x\ufffdy"
    assert diagram.shown("z" * 50, 10) == "z" * 9 + "…"


# -- the SVG cleaner -------------------------------------------------------------------------
def test_clean_svg__drops_scripts_handlers_foreign_content_and_outside_links():
    dirty = (
        '<?xml version="1.0"?><!DOCTYPE svg><svg xmlns="http://www.w3.org/2000/svg" '
        'xmlns:xlink="http://www.w3.org/1999/xlink" width="100pt" height="50pt" onload="x()">'
        "<script>alert(1)</script><style>*{}</style>"
        '<foreignObject><div xmlns="http://www.w3.org/1999/xhtml">x</div></foreignObject>'
        '<g id="n"><a xlink:href="https://example.org/" xlink:title="t"><text>&lt;b&gt;</text>'
        '</a><a xlink:href="#n"><path d="M0,0" onclick="y()"/></a></g></svg>'
    )
    svg = clean_svg(dirty, label="a <label>")
    assert _tags(svg) == {"svg", "g", "a", "text", "path"}
    assert "onload" not in svg and "onclick" not in svg and "example.org" not in svg
    assert 'xlink:href="#n"' in svg and "&lt;b&gt;" in svg
    root = _parse(svg)
    assert (root.get("width"), root.get("height")) == ("100", "50")
    assert root.get("aria-label") == "a <label>"


@pytest.mark.parametrize("text", ["<svg", "<html/>", "not xml"])
def test_clean_svg__refuses_what_is_not_svg(text):
    with pytest.raises(SvgRefused):
        clean_svg(text, label="x")


# -- the timeline's axis ---------------------------------------------------------------------
def test_build_scale__stays_linear_when_nothing_dominates():
    scale = build_scale([0, 1, 2, 3, 4], 0, 400)
    assert not any(piece.cut for piece in scale.pieces)
    assert [round(scale.x(t)) for t in (0, 1, 2.5, 4)] == [0, 100, 250, 400]


def test_build_scale__cuts_a_day_among_milliseconds_and_keeps_order():
    moments = [0, 0.05, 0.1, 0.35, 0.4, 86_400.4, 86_400.45]
    scale = build_scale(moments, PLOT_LEFT, PLOT_RIGHT)
    cut = [piece for piece in scale.pieces if piece.cut]
    assert [(piece.start, piece.end) for piece in cut] == [(0.4, 86_400.4)]
    assert cut[0].right - cut[0].left == BREAK_WIDTH
    xs = [scale.x(t) for t in sorted(moments)]
    assert xs == sorted(xs) and xs[0] == PLOT_LEFT and round(xs[-1]) == PLOT_RIGHT
    # The 50 ms attempts get real width once the day is cut.
    assert scale.x(0.05) - scale.x(0) > 50


def test_build_scale__never_cuts_short_stretches():
    scale = build_scale([0, 0.01, 1.5], 0, 1000)
    assert not any(piece.cut for piece in scale.pieces)


def test_duration__has_the_precision_of_a_timeline():
    assert [duration(s) for s in (0.0084, 2.44, 75, 90_000)] == [
        "8 ms",
        "2.4 s",
        "1 min",
        "1 d 1 h",
    ]


# -- a whole timeline ------------------------------------------------------------------------
def _big_timeline() -> Timeline:
    spans = [Span(at(0), at(0.2), "queued", "queued", "q"), Span(at(40), None, "operator", "", "")]
    marks = [Mark(at(0), "accepted", "accepted", "a"), Mark(at(20), "takeover", "takeover", "t")]
    lanes = [Lane("execution", "go · RECONCILIATION_REQUIRED", spans, marks)]
    t, attempts = 0.3, 0
    for i in range(20):
        spans = []
        tries = 4 if i < 10 else 1  # 10 x 4 + 10 x 1 = 50 attempts
        for k in range(tries):
            status = "failed" if k < tries - 1 else "succeeded"
            spans.append(Span(at(t), at(t + 0.02), status, f"#{k + 1}", f"{HOSTILE} {i} {k}"))
            attempts += 1
            t += 0.02
            if k < tries - 1:
                spans.append(Span(at(t), at(t + 0.5 * 2**k), "backoff", "backoff", "b"))
                t += 0.5 * 2**k
        lanes.append(Lane(f"action-{i}-{HOSTILE}", "cap@1 · read", spans, []))
    lanes[3].spans.append(Span(at(t), at(t + 86_400), "waiting", "waiting", "w"))
    assert attempts == 50
    return Timeline(T0, at(t + 86_401), True, lanes, [])


def test_timeline_svg__draws_20_actions_and_50_attempts_inside_the_plot():
    svg = timeline_svg(_big_timeline())
    root = _parse(svg)
    bars = [
        r for r in root.iter(f"{{{SVG_NS}}}rect")
        if r.get("class") in ("tl-failed", "tl-succeeded")
        and float(r.get("y")) > 40  # not the legend's swatches
        and r.find(f"{{{SVG_NS}}}title") is not None
    ]  # fmt: skip
    assert len(bars) == 50
    for bar in bars:
        x, width = float(bar.get("x")), float(bar.get("width"))
        assert width >= MIN_BAR and PLOT_LEFT <= x and x + width <= PLOT_RIGHT + MIN_BAR
    assert float(root.get("height")) < 800  # 21 lanes, the axis and the legend fit a screen
    assert any(r.get("class") == "tl-cut" for r in root.iter(f"{{{SVG_NS}}}rect"))


def test_timeline_svg__escapes_every_text_and_has_no_script():
    svg = timeline_svg(_big_timeline())
    assert "<script>" not in svg and "&lt;script&gt;" in svg
    assert _tags(svg) <= {"svg", "style", "rect", "line", "text", "title", "polygon"}
    texts = [e.text for e in _parse(svg).iter(f"{{{SVG_NS}}}title")]
    assert any(text and text.startswith(HOSTILE.split(" ")[0]) for text in texts)
