"""A flow version drawn as its state machine, for the admin's flow and request pages
(docs/adr/0012-pictures-drawn-on-the-server.md). Invariants: the DOT text is written here from
the definition, every name escaped and cut to a length, every node and edge id made from
positions (never from the flow's text); `dot -Tsvg` runs with a time limit on bounded input; only
the SVG elements and attributes svgsafety.py expects are kept; the drawing is cached per flow
version (flows are immutable). Transitions are boxes listing their actions tinted by effect, each
compensation a dashed edge back to where the request stays; a request's page highlights its
state, transition and action with a style sheet over those ids (`highlight`), so one drawing
serves every request.
"""

import html
import logging
import shutil
import subprocess
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from actions.base import IntegrationConfigError
from actions.registry import IntegrationUnavailable, Registry, get_registry
from orquestador.display import age
from orquestador.workerconfig import WorkerConfigError

from ..flows.compensations import COMPENSATE, opts_in
from ..models import Flow
from .svgsafety import SvgRefused, clean_svg, printable

logger = logging.getLogger("executions.pictures.diagram")

DOT_TIMEOUT_SECONDS = 5.0  # seconds `dot` may take for one flow before the page says so
MAX_STATES = 200  # a flow with more is listed, not drawn
MAX_TRANSITIONS = 400
MAX_ACTIONS_DRAWN = 40  # actions drawn per transition; the rest are counted
LABEL_CHARS = 40  # characters of a name drawn; the whole name is in the tooltip
RULES_ON_EDGE = 3  # rule ids written on one edge; the rest are counted
CACHE_ENTRIES = 128  # drawings kept per process (one per flow version)
FONT = "DejaVu Sans,Verdana,sans-serif"  # dot measures the first; Verdana is about as wide

# Tints of an action row by its effect (with the effect also said in words), and its words.
EFFECT_STYLE = {
    "READ_ONLY": ("#e3f2e6", "read"),
    "IDEMPOTENT_WRITE": ("#dce8fa", "idempotent"),
    "NON_IDEMPOTENT_WRITE": ("#fbdcc8", "non-idempotent"),
}
WAIT_TINT = "#ececec"
UNKNOWN_TINT = "#ffffff"


@dataclass(frozen=True)
class Capability:
    """What the catalog of this process says of a capability@version."""

    effect: str | None  # None: not known here (unconfigured, or refused)
    is_async: bool = False
    note: str = ""  # why the effect is unknown, or the contract's limits, for the tooltip


@dataclass(frozen=True)
class Picture:
    """A flow's drawing (SVG markup, safe to inline) or why there is none."""

    svg: str | None
    problem: str | None = None
    states: tuple[str, ...] = ()
    transitions: tuple[str, ...] = ()


# ------------------------------------------------------------------------------
# Escaping
# ------------------------------------------------------------------------------
def shown(value: Any, limit: int = LABEL_CHARS) -> str:
    """A name as drawn: one line of printable characters, cut to `limit` (not yet escaped)."""
    return printable(value, limit)


def _esc(value: Any, limit: int = LABEL_CHARS) -> str:
    """Escaped for a Graphviz HTML-like label or its attribute values. A backslash too: in a
    quoted DOT string it would escape the closing quote."""
    return html.escape(shown(value, limit), quote=True).replace("\\", "&#92;")


# ------------------------------------------------------------------------------
# What the catalog says
# ------------------------------------------------------------------------------
def capability_of(registry: Registry, capability: str, version: int) -> Capability:
    """The effect and asynchrony of capability@version in `registry`."""
    try:
        binding = registry.resolve(capability, version)
    except IntegrationUnavailable as exc:
        return Capability(None, note=exc.reason)
    contract = binding.contract
    note = f"at most {contract.max_attempts} attempts, {age(contract.timeout_seconds)} each"
    if binding.route.is_async:
        note += f"; callback within {age(contract.callback_timeout_seconds)}"
    return Capability(contract.effect, binding.route.is_async, note)


def _capabilities(definition: dict) -> dict[tuple[str, int], Capability]:
    """What this process's catalog says of each capability the flow calls."""
    keys = {
        (str(action["capability"]), int(action.get("version") or 0))
        for transition in definition.get("transitions") or ()
        for action in transition.get("actions") or ()
        if "capability" in action
    }
    try:
        registry = get_registry()
    except (IntegrationConfigError, WorkerConfigError) as exc:
        unknown = Capability(None, note=f"the catalog cannot be read here ({exc})")
        return dict.fromkeys(keys, unknown)
    return {key: capability_of(registry, *key) for key in keys}


# ------------------------------------------------------------------------------
# DOT
# ------------------------------------------------------------------------------
def _action_row(tid: int, aid: int, action: dict, caps: dict) -> str:
    number = f"{aid + 1}"
    name = _esc(action.get("id"), 28)
    cell_id = f"flow-t{tid}-a{aid}"
    if "wait" in action:
        wait = action.get("wait") or {}
        seconds = wait.get("timeoutSeconds")
        limit = f" ≤ {age(seconds)}" if isinstance(seconds, int | float) else ""
        on_timeout = "on timeout: its payload" if "onTimeout" in wait else "on timeout: fails"
        text = (
            f"{number} <B>{name}</B>  wait<BR/>"
            f'<FONT POINT-SIZE="9.5" COLOR="#4b5563">{_esc(wait.get("event"), 32)}{limit}</FONT>'
        )
        tint, tip = WAIT_TINT, f"{shown(action.get('id'))}: waits for event "
        tip += f"{shown(wait.get('event'))}{limit}; {on_timeout}"
    else:
        key = (str(action.get("capability")), int(action.get("version") or 0))
        cap = caps.get(key) or Capability(None)
        tint, words = EFFECT_STYLE.get(cap.effect or "", (UNKNOWN_TINT, "effect unknown"))
        capability = _esc(f"{key[0]}@{key[1]}", 36)
        text = f"{number} <B>{name}</B>  {words}{' · ↩ async' if cap.is_async else ''}<BR/>"
        text += f'<FONT POINT-SIZE="9.5" COLOR="#4b5563">{capability}</FONT>'
        tip = f"{shown(action.get('id'))}: {shown(key[0], 200)}@{key[1]}, {words}"
        if cap.note:
            tip += f"; {shown(cap.note, 200)}"
    return (
        f'<TR><TD ALIGN="LEFT" BALIGN="LEFT" BGCOLOR="{tint}" ID="{cell_id}" HREF="#{cell_id}" '
        f'PORT="a{aid}" TOOLTIP="{html.escape(tip, quote=True)}">{text}</TD></TR>'
    )


def _transition_label(tid: int, transition: dict, caps: dict) -> str:
    decision = transition.get("decision") or {}
    policy = decision.get("hitPolicy")
    # FIRST is the common policy; the others change what the rules mean, so they are said.
    tag = (
        f'  <FONT POINT-SIZE="10" COLOR="#555555">{_esc(policy, 8)}</FONT>'
        if policy != "FIRST"
        else ""
    )
    rows = [f'<TR><TD ALIGN="LEFT"><B>{_esc(transition.get("id"))}</B>{tag}</TD></TR>']
    actions = list(transition.get("actions") or ())
    for aid, action in enumerate(actions[:MAX_ACTIONS_DRAWN]):
        rows.append(_action_row(tid, aid, action, caps))
    if len(actions) > MAX_ACTIONS_DRAWN:
        rows.append(
            f'<TR><TD ALIGN="LEFT">… and {len(actions) - MAX_ACTIONS_DRAWN} more actions</TD></TR>'
        )
    if not actions:
        rows.append('<TR><TD ALIGN="LEFT"><I>no actions</I></TD></TR>')
    return (
        '<<TABLE BORDER="0" CELLBORDER="0" CELLSPACING="2" CELLPADDING="3">'
        + "".join(rows)
        + "</TABLE>>"
    )


def _edge_label(rules: list[dict]) -> str:
    ids = [_esc(rule.get("id"), 24) for rule in rules]
    if len(ids) > RULES_ON_EDGE:
        ids = [*ids[:RULES_ON_EDGE], f"+{len(ids) - RULES_ON_EDGE}"]
    return "<" + ", ".join(ids) + ">"


def _compensation_edges(tid: int, transition: dict, sources: list[int]) -> list[str]:
    """A dashed edge from each compensated action back to the states the transition leaves,
    named by its compensating action: where a failure after it returns the request to."""
    if not opts_in(transition):
        return []  # its compensations never run: a failure goes to an operator
    edges = []
    for aid, action in enumerate(list(transition.get("actions") or ())[:MAX_ACTIONS_DRAWN]):
        undo = action.get(COMPENSATE)
        if not isinstance(undo, dict):
            continue
        capability = f"{shown(undo.get('capability'), 200)}@{shown(undo.get('version'), 12)}"
        tip = (
            f"{shown(action.get('id'))}: undone by {capability} when a later action fails; "
            "the request stays where it was"
        )
        label = f"undo {_esc(action.get('id'), 24)}: {_esc(capability, 36)}"
        for s in sources:
            edges.append(
                f'  t{tid}:a{aid} -> s{s} [id="flow-undo-t{tid}-a{aid}-s{s}", style=dashed, '
                'color="#b45309", fontcolor="#92400e", constraint=false, '
                f'tooltip="{_esc(tip, 400)}", label=<{label}>];'
            )
    return edges


def flow_dot(definition: dict, caps: dict[tuple[str, int], Capability]) -> str:
    """The DOT text of a flow definition: ids from positions, every label escaped."""
    states = [str(state) for state in definition.get("states") or ()]
    index = {state: i for i, state in enumerate(states)}
    transitions = list(definition.get("transitions") or ())
    leaving = {state for t in transitions for state in t.get("from") or () if state in index}
    lines = [
        "digraph flow {",
        f'  graph [rankdir=TB, nodesep=0.15, ranksep=0.35, pad=0.15, fontname="{FONT}", '
        'bgcolor="transparent", outputorder=edgesfirst];',
        f'  node [fontname="{FONT}", fontsize=11, penwidth=1.2];',
        f'  edge [fontname="{FONT}", fontsize=11, color="#6b7280", fontcolor="#374151", '
        "arrowsize=0.7];",
        '  start [id="flow-start", shape=circle, width=0.16, fixedsize=true, label="", '
        'style=filled, fillcolor="#374151", color="#374151"];',
    ]
    initial = index.get(str(definition.get("initialState")))
    for i, state in enumerate(states):
        final = state not in leaving
        attrs = [
            f'id="flow-s{i}"',
            "shape=box",
            'style="rounded,filled"',
            'fillcolor="#eef1f5"' if final else 'fillcolor="#ffffff"',
            'color="#374151"',
            "penwidth=2.4" if i == initial else "penwidth=1.2",
            'margin="0.18,0.06"',
            f'tooltip="state {_esc(state, 200)}{" (final)" if final else ""}"',
            f"label=<<B>{_esc(state)}</B>>",
        ]
        lines.append(f"  s{i} [{', '.join(attrs)}];")
    if initial is not None:
        lines.append(f'  start -> s{initial} [id="flow-start-edge"];')
    for tid, transition in enumerate(transitions):
        lines.append(
            f'  t{tid} [id="flow-t{tid}", shape=box, style="rounded,filled", '
            'fillcolor="#fbfbfc", color="#9ca3af", margin=0, '
            f'tooltip="transition {_esc(transition.get("id"), 200)}", '
            f"label={_transition_label(tid, transition, caps)}];"
        )
        sources = [index[state] for state in transition.get("from") or () if state in index]
        for s in sources:
            lines.append(f'  s{s} -> t{tid} [id="flow-in-s{s}-t{tid}"];')
        targets: dict[int, list[dict]] = {}
        for rule in (transition.get("decision") or {}).get("rules") or ():
            if rule.get("target") in index:
                targets.setdefault(index[rule["target"]], []).append(rule)
        for s, rules in targets.items():
            lines.append(
                f'  t{tid} -> s{s} [id="flow-out-t{tid}-s{s}", color="#374151", '
                f"label={_edge_label(rules)}];"
            )
        lines.extend(_compensation_edges(tid, transition, sources))
    lines.append("}")
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------
# Running dot, and the cache
# ------------------------------------------------------------------------------
def _dot_binary() -> str | None:
    return shutil.which("dot")


def run_dot(text: str, *, timeout: float = DOT_TIMEOUT_SECONDS) -> str:
    """SVG from `dot -Tsvg` on `text`, within `timeout` seconds; DiagramUnavailable otherwise."""
    binary = _dot_binary()
    if binary is None:
        raise DiagramUnavailable("Graphviz's dot is not installed on this server")
    try:
        done = subprocess.run(  # noqa: S603 (a fixed binary and arguments; the input is ours)
            [binary, "-Tsvg"],
            input=text.encode("utf-8"),
            capture_output=True,
            timeout=timeout,
            check=False,
            env={"PATH": "/usr/bin:/bin", "LC_ALL": "C.UTF-8"},
        )
    except subprocess.TimeoutExpired:
        raise DiagramUnavailable(f"drawing took longer than {timeout:g} s") from None
    if done.returncode != 0:
        problem = done.stderr.decode("utf-8", "replace").strip()[:300]
        logger.warning("dot failed", extra={"returncode": done.returncode, "stderr": problem})
        raise DiagramUnavailable(f"dot failed (exit {done.returncode})")
    return done.stdout.decode("utf-8", "replace")


class DiagramUnavailable(Exception):
    """The picture cannot be drawn here; the message says why, for the page."""


_cache: OrderedDict[tuple[Any, ...], Picture] = OrderedDict()
_cache_lock = threading.Lock()


def flow_picture(flow: Flow) -> Picture:
    """The flow version's drawing, cached per version (and per what the catalog says of it)."""
    try:
        return _flow_picture(flow)
    except (AttributeError, TypeError, ValueError):  # not the shape loadflow checks
        logger.exception("flow not drawn", extra={"flow_id": flow.pk})
        return Picture(None, "its definition does not have the shape of a flow")


def _flow_picture(flow: Flow) -> Picture:
    definition = flow.definition if isinstance(flow.definition, dict) else {}
    states = tuple(str(s) for s in definition.get("states") or ())
    transitions = tuple(str(t.get("id")) for t in definition.get("transitions") or ())
    if len(states) > MAX_STATES or len(transitions) > MAX_TRANSITIONS:
        return Picture(
            None,
            f"too large to draw here ({len(states)} states, {len(transitions)} transitions; "
            f"at most {MAX_STATES} and {MAX_TRANSITIONS})",
        )
    caps = _capabilities(definition)
    key = (flow.pk, flow.checksum, tuple(sorted(caps.items())))
    with _cache_lock:
        if key in _cache:
            _cache.move_to_end(key)
            return _cache[key]
    try:
        text = flow_dot(definition, caps)
        svg = clean_svg(run_dot(text), label=f"State machine of flow {shown(flow)}")
    except (DiagramUnavailable, SvgRefused) as exc:
        return Picture(None, str(exc), states, transitions)
    picture = Picture(svg, None, states, transitions)
    with _cache_lock:
        _cache[key] = picture
        while len(_cache) > CACHE_ENTRIES:
            _cache.popitem(last=False)
    return picture


# ------------------------------------------------------------------------------
# A request's highlight
# ------------------------------------------------------------------------------
HIGHLIGHT = "#c2410c"


def highlight(
    picture: Picture, *, state: str | None, transition: str | None, action: int | None
) -> str:
    """A style sheet (ids made here, no flow text) that marks the request's state, the transition
    in flight, the edge into it and its current action (position in the transition)."""
    rules = []
    s = picture.states.index(state) if state is not None and state in picture.states else None
    t = (
        picture.transitions.index(transition)
        if transition is not None and transition in picture.transitions
        else None
    )
    if s is not None:
        rules.append(
            f"#flow-s{s} path {{ stroke: {HIGHLIGHT}; stroke-width: 3.5px; fill: #fff1d6; }}"
        )
    if t is not None:
        rules.append(f"#flow-t{t} path {{ stroke: {HIGHLIGHT}; stroke-width: 3.5px; }}")
        if s is not None:
            rules.append(
                f"#flow-in-s{s}-t{t} path {{ stroke: {HIGHLIGHT}; stroke-width: 3px; }} "
                f"#flow-in-s{s}-t{t} polygon {{ stroke: {HIGHLIGHT}; fill: {HIGHLIGHT}; }}"
            )
        if action is not None:
            rules.append(
                f"#a_flow-t{t}-a{int(action)} polygon "
                f"{{ stroke: {HIGHLIGHT}; stroke-width: 2.5px; }}"
            )
    return "<style>" + " ".join(rules) + "</style>" if rules else ""
