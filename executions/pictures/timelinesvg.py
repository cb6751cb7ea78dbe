"""An execution's timeline (timeline.py) drawn as SVG on the server, with no script: a lane per
row, spans as bars and moments as marks on one time axis, each with its tooltip (`<title>`).

The axis is linear, except that a quiet stretch longer than a share of the rest (a day's wait
among attempts of milliseconds) is cut to a fixed width and labelled with how long it lasted, so
short attempts stay visible beside long waits. Every text goes through ElementTree, which
escapes it; classes and geometry are made here.
"""

import bisect
import itertools
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from datetime import datetime

from orquestador.display import age, utc

from .svgsafety import svg_element as el
from .svgsafety import svg_text
from .timeline import Lane, Timeline, duration

WIDTH = 980  # px of the whole drawing: it fits beside the admin's navigation sidebar at 1400 px
LABEL_WIDTH = 200  # px of the lane titles
PLOT_LEFT, PLOT_RIGHT = LABEL_WIDTH + 8, WIDTH - 24
AXIS_Y = 36  # px: the time axis
LANES_TOP = 46
LANE_HEIGHT = 30
BAR_TOP, BAR_HEIGHT = 7, 15  # px within a lane
MIN_BAR = 3  # px: the narrowest bar drawn, so an attempt of a millisecond still shows
CHAR_WIDTH = 6.4  # px of an average character at 11 px, to decide whether a label fits
BREAK_WIDTH = 54  # px a cut stretch takes
BREAK_SHARE = 0.3  # a quiet stretch longer than this share of the uncut rest is cut
MIN_BREAK_SECONDS = 2.0  # never cut a stretch shorter than this
MAX_BREAKS = 12
TICK_SPACING = 96  # px between axis ticks at least
NICE_STEPS = (
    0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30,
    60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400, 172800, 604800,
)  # fmt: skip
LEGEND = (
    ("succeeded", "succeeded"),
    ("failed", "failed"),
    ("unknown", "outcome unknown"),
    ("running", "running"),
    ("waiting", "waiting for an event"),
    ("accepted", "awaiting a callback"),
    ("backoff", "backoff before a retry"),
    ("queued", "queued"),
    ("operator", "with an operator"),
)
STYLE = """
.tl text { font-family: var(--font-family-primary, sans-serif); font-size: 11px;
  fill: var(--body-fg, #333); }
.tl .tl-lane-title { font-size: 12px; font-weight: bold; }
.tl .tl-lane-sub, .tl .tl-tick, .tl .tl-note { fill: var(--body-quiet-color, #666);
  font-size: 10px; }
.tl .tl-stripe { fill: var(--darkened-bg, #f6f6f6); }
.tl .tl-axis, .tl .tl-grid { stroke: var(--hairline-color, #ccc); stroke-width: 1; }
.tl .tl-cut { fill: var(--body-quiet-color, #999); opacity: 0.12; }
.tl .tl-cut-label { font-style: italic; }
.tl .tl-cut-mark { stroke: var(--body-quiet-color, #777); stroke-width: 1.5; }
.tl .tl-now { stroke: #c2410c; stroke-width: 1.5; stroke-dasharray: 4 3; }
.tl .tl-bar-label { font-size: 10px; fill: #fff; pointer-events: none; }
.tl .tl-dark-label { font-size: 10px; fill: #222; pointer-events: none; }
.tl .tl-succeeded { fill: #2f8a4a; } .tl .tl-failed { fill: #c93b3b; }
.tl .tl-unknown { fill: #e0a000; } .tl .tl-running { fill: #2f6fd0; }
.tl .tl-waiting { fill: #8a96a3; } .tl .tl-accepted { fill: #7c5cc4; }
.tl .tl-queued { fill: #d5d9df; } .tl .tl-suspended { fill: #b9c0c8; }
.tl .tl-operator { fill: #f6c56b; }
.tl .tl-backoff { fill: none; stroke: #c93b3b; stroke-width: 1.5; stroke-dasharray: 4 2; }
.tl .tl-open { stroke: #222; stroke-width: 1; stroke-dasharray: 2 2; }
.tl .tl-mark { stroke: #fff; stroke-width: 1; fill: #374151; }
.tl .tl-mark-takeover, .tl .tl-mark-interrupted, .tl .tl-mark-ended-failed { fill: #c93b3b; }
.tl .tl-mark-reconciliation, .tl .tl-mark-proposal { fill: #d08700; }
.tl .tl-mark-completed, .tl .tl-mark-resolved { fill: #2f8a4a; }
.tl .tl-mark-probe, .tl .tl-mark-lookup { fill: #2f6fd0; }
.tl .tl-mark-compensating, .tl .tl-mark-compensated { fill: #7c5cc4; }
"""
DARK_LABELS = frozenset({"unknown", "queued", "suspended", "operator"})


@dataclass(frozen=True)
class Piece:
    start: float  # seconds from the origin
    end: float
    left: float  # px
    right: float
    cut: bool


class Scale:
    """Seconds from the origin to x, piece by piece; cut pieces have a fixed width."""

    def __init__(self, pieces: list[Piece]) -> None:
        self.pieces = pieces
        self._starts = [piece.start for piece in pieces]

    def x(self, seconds: float) -> float:
        if not self.pieces or seconds <= self.pieces[0].start:
            return self.pieces[0].left if self.pieces else PLOT_LEFT
        i = max(0, bisect.bisect_right(self._starts, seconds) - 1)
        piece = self.pieces[i]
        if seconds >= piece.end or piece.end == piece.start:
            return piece.right if seconds >= piece.end else piece.left
        share = (seconds - piece.start) / (piece.end - piece.start)
        return piece.left + share * (piece.right - piece.left)


def build_scale(moments: list[float], left: float, right: float) -> Scale:
    """The axis over these moments (seconds from the origin, any order) between `left` and
    `right` px: the longest quiet stretches cut while each is over BREAK_SHARE of the rest."""
    times = sorted(set(moments))
    gaps = list(itertools.pairwise(times))
    cut: set[int] = set()
    for _ in range(MAX_BREAKS):
        linear = sum(b - a for i, (a, b) in enumerate(gaps) if i not in cut)
        candidates = [
            (b - a, i)
            for i, (a, b) in enumerate(gaps)
            if i not in cut
            and b - a > MIN_BREAK_SECONDS
            and b - a > BREAK_SHARE * linear
            and linear - (b - a) > 0
        ]
        if not candidates:
            break
        cut.add(max(candidates)[1])
    linear = sum(b - a for i, (a, b) in enumerate(gaps) if i not in cut)
    per_second = (right - left - BREAK_WIDTH * len(cut)) / linear if linear > 0 else 0.0
    pieces, x = [], left
    for i, (a, b) in enumerate(gaps):
        width = BREAK_WIDTH if i in cut else (b - a) * per_second
        pieces.append(Piece(a, b, x, x + width, i in cut))
        x += width
    return Scale(pieces)


def _offset(seconds: float) -> str:
    if seconds == 0:
        return "0"
    if seconds < 60 and seconds != int(seconds):
        return f"+{seconds:.3g} s"
    return f"+{age(seconds)}"


def _ticks(root: ET.Element, scale: Scale, height: float) -> None:
    """Ticks along each uncut stretch, and the cut stretches with how long they lasted."""
    runs: list[list[Piece]] = []
    for piece in scale.pieces:
        if piece.cut:
            runs.append([])
            _cut(root, piece, height)
        elif runs and runs[-1]:
            runs[-1].append(piece)
        else:
            runs.append([piece])
    cuts = [(p.left + p.right) / 2 for p in scale.pieces if p.cut]
    for run in (r for r in runs if r):
        start, end = run[0].start, run[-1].end
        px = run[-1].right - run[0].left
        if end <= start or px < 40:
            continue
        per_second = px / (end - start)
        step = next((s for s in NICE_STEPS if s * per_second >= TICK_SPACING), NICE_STEPS[-1])
        tick = (int(start / step) + (0 if start % step == 0 else 1)) * step
        while tick <= end + 1e-9:
            x = scale.x(tick)
            if any(abs(x - c) < BREAK_WIDTH / 2 + 24 for c in cuts):  # the cut's label is there
                tick += step
                continue
            el("line", root, class_="tl-grid", x1=f"{x:.1f}", y1=AXIS_Y, x2=f"{x:.1f}", y2=height)
            label = el("text", root, class_="tl-tick", x=f"{x:.1f}", y=AXIS_Y - 6)
            label.set("text-anchor", "middle")
            svg_text(label, _offset(round(tick, 6)))
            tick += step


def _cut(root: ET.Element, piece: Piece, height: float) -> None:
    mid = (piece.left + piece.right) / 2
    band = el("rect", root, class_="tl-cut", x=f"{piece.left + 3:.1f}", y=AXIS_Y)
    band.set("width", f"{piece.right - piece.left - 6:.1f}")
    band.set("height", f"{height - AXIS_Y:.1f}")
    svg_text(
        el("title", band),
        f"{duration(piece.end - piece.start)} of the axis drawn short, so the rest stays readable",
    )
    for dx in (-4, 4):
        el(
            "line", root, class_="tl-cut-mark",
            x1=f"{mid + dx - 3:.1f}", y1=AXIS_Y + 5, x2=f"{mid + dx + 3:.1f}", y2=AXIS_Y - 5,
        )  # fmt: skip
    label = el("text", root, class_="tl-tick tl-cut-label", x=f"{mid:.1f}", y=AXIS_Y - 6)
    label.set("text-anchor", "middle")
    svg_text(label, "(" + " ".join(duration(piece.end - piece.start).split()[:2]) + ")")


def _lane(
    root: ET.Element, lane: Lane, top: float, scale: Scale, origin: datetime, end: float
) -> None:
    def sec(moment: datetime) -> float:
        return (moment - origin).total_seconds()

    title = el("text", root, class_="tl-lane-title", x=8, y=top + 13)
    svg_text(title, lane.title, 26)
    svg_text(el("title", title), lane.title)
    sub = el("text", root, class_="tl-lane-sub", x=8, y=top + 25)
    svg_text(sub, lane.subtitle, 36)
    svg_text(el("title", sub), lane.subtitle)
    for span in sorted(lane.spans, key=lambda s: s.kind != "backoff"):
        x0 = scale.x(sec(span.start))
        x1 = scale.x(sec(span.end)) if span.end is not None else scale.x(end)
        width = max(MIN_BAR, x1 - x0)
        if span.kind == "backoff":
            mid = top + BAR_TOP + BAR_HEIGHT / 2
            shape = el("rect", root, class_="tl-backoff", x=f"{x0:.1f}", y=f"{mid - 4:.1f}")
            shape.set("width", f"{width:.1f}")
            shape.set("height", "8")
        else:
            shape = el("rect", root, class_=f"tl-{span.kind}", x=f"{x0:.1f}", y=top + BAR_TOP)
            shape.set("width", f"{width:.1f}")
            shape.set("height", str(BAR_HEIGHT))
            shape.set("rx", "2")
            if span.end is None:
                shape.set("class", f"tl-{span.kind} tl-open")
        svg_text(el("title", shape), span.title)
        if span.label and width >= len(span.label) * CHAR_WIDTH + 6 and span.kind != "backoff":
            dark = span.kind in DARK_LABELS
            text = el(
                "text", root, class_="tl-dark-label" if dark else "tl-bar-label",
                x=f"{x0 + 4:.1f}", y=top + BAR_TOP + 11,
            )  # fmt: skip
            svg_text(text, span.label)
        elif span.kind == "backoff" and span.label and width >= len(span.label) * CHAR_WIDTH:
            text = el("text", root, class_="tl-tick", x=f"{x0 + 2:.1f}", y=top + BAR_TOP - 1)
            svg_text(text, span.label)
    free_from = 0.0
    for mark in sorted(lane.marks, key=lambda m: m.at):
        x = scale.x(sec(mark.at))
        cy = top + BAR_TOP + BAR_HEIGHT / 2
        shape = el(
            "polygon", root, class_=f"tl-mark tl-mark-{mark.kind}",
            points=f"{x:.1f},{cy - 7:.1f} {x + 6:.1f},{cy:.1f} {x:.1f},{cy + 7:.1f} "
            f"{x - 6:.1f},{cy:.1f}",
        )  # fmt: skip
        svg_text(el("title", shape), mark.title)
        wide = len(mark.label) * CHAR_WIDTH
        if x + 8 >= free_from and x + 8 + wide < WIDTH:
            text = el("text", root, class_="tl-dark-label", x=f"{x + 8:.1f}", y=top + 4)
            svg_text(text, mark.label)
            free_from = x + 8 + wide + 6
        elif x + 8 >= free_from and x - 8 - wide > max(free_from, PLOT_LEFT):  # no room right
            text = el("text", root, class_="tl-dark-label", x=f"{x - 8:.1f}", y=top + 4)
            text.set("text-anchor", "end")
            svg_text(text, mark.label)
            free_from = x + 6


LEGEND_ROW = 20  # px between the legend's rows


def _legend(root: ET.Element, top: float) -> float:
    """The legend from `top`, wrapped to the width; return where it ends."""
    x = 8.0
    for kind, words in LEGEND:
        if x + 19 + len(words) * 6 > WIDTH:
            x, top = 8.0, top + LEGEND_ROW
        if kind == "backoff":
            box = el("rect", root, class_="tl-backoff", x=f"{x:.1f}", y=top + 3, width=14, height=8)
        else:
            box = el("rect", root, class_=f"tl-{kind}", x=f"{x:.1f}", y=top, width=14, height=14)
        box.set("rx", "2")
        text = el("text", root, class_="tl-note", x=f"{x + 19:.1f}", y=top + 11)
        svg_text(text, words)
        x += 19 + len(words) * 6 + 18
    if x + 70 > WIDTH:
        x, top = 8.0, top + LEGEND_ROW
    text = el("text", root, class_="tl-note", x=f"{x:.1f}", y=top + 11)
    svg_text(text, "◆ a moment")
    return top + LEGEND_ROW


def timeline_svg(timeline: Timeline) -> str:
    """The timeline as SVG markup to inline in a page."""
    origin = timeline.start
    end = (timeline.end - origin).total_seconds()
    # Open spans end at "now" for a live execution (a backoff may be due later), else at the end.
    now = (timeline.now - origin).total_seconds() if timeline.now is not None else end
    moments = [0.0, end, now]
    for lane in timeline.lanes:
        for span in lane.spans:
            moments.append((span.start - origin).total_seconds())
            if span.end is not None:
                moments.append((span.end - origin).total_seconds())
        moments.extend((mark.at - origin).total_seconds() for mark in lane.marks)
    scale = build_scale(moments, PLOT_LEFT, PLOT_RIGHT)
    lanes_bottom = LANES_TOP + LANE_HEIGHT * len(timeline.lanes)
    root = el("svg", None, class_="tl", width=WIDTH)
    root.set("role", "img")
    root.set("aria-label", "Timeline of the execution")
    el("style", root).text = STYLE  # ours, constant
    for i in range(len(timeline.lanes)):
        if i % 2 == 0:
            el("rect", root, class_="tl-stripe", x=0, y=LANES_TOP + i * LANE_HEIGHT,
               width=WIDTH, height=LANE_HEIGHT)  # fmt: skip
    origin_label = el("text", root, class_="tl-note", x=8, y=AXIS_Y - 6)
    svg_text(origin_label, f"0 = {utc(origin)}")
    _ticks(root, scale, lanes_bottom)
    el("line", root, class_="tl-axis", x1=PLOT_LEFT, y1=AXIS_Y, x2=PLOT_RIGHT, y2=AXIS_Y)
    for i, lane in enumerate(timeline.lanes):
        _lane(root, lane, LANES_TOP + i * LANE_HEIGHT, scale, origin, now)
    if timeline.now is not None:
        x = scale.x(now)
        el("line", root, class_="tl-now", x1=f"{x:.1f}", y1=AXIS_Y, x2=f"{x:.1f}", y2=lanes_bottom)
        label = el("text", root, class_="tl-note", x=f"{x - 4:.1f}", y=lanes_bottom + 12)
        label.set("text-anchor", "end")
        svg_text(label, "now")
    height = round(_legend(root, lanes_bottom + 16))
    root.set("height", str(height))
    root.set("viewBox", f"0 0 {WIDTH} {height}")
    return ET.tostring(root, encoding="unicode")
