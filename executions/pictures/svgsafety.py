"""SVG that is safe to put inline in an admin page: only the shapes, text, links within the page
and tooltips a drawing needs.

`clean_svg` parses a drawing (Graphviz's output, diagram.py), keeps the elements and attributes
on its allow-lists and drops everything else (scripts, styles, event handlers, foreign objects,
links that leave the page), then serialises it again, so every text and attribute comes out
escaped whatever went in. `svg_element` builds one element for the drawings made here
(timelinesvg.py) the same way.
"""

import re
import unicodedata
import xml.etree.ElementTree as ET

SVG_NS = "http://www.w3.org/2000/svg"
XLINK_NS = "http://www.w3.org/1999/xlink"
MAX_SVG_CHARS = 4_000_000  # characters of a drawing accepted at most

ET.register_namespace("", SVG_NS)
ET.register_namespace("xlink", XLINK_NS)

ELEMENTS = frozenset(
    {"svg", "g", "title", "path", "polygon", "polyline", "ellipse", "circle", "rect", "line"}
    | {"text", "a"}
)
ATTRIBUTES = frozenset(
    {
        "id",
        "class",
        "width",
        "height",
        "viewBox",
        "transform",
        "fill",
        "fill-opacity",
        "stroke",
        "stroke-width",
        "stroke-opacity",
        "stroke-dasharray",
        "points",
        "d",
        "cx",
        "cy",
        "r",
        "rx",
        "ry",
        "x",
        "y",
        "x1",
        "y1",
        "x2",
        "y2",
        "text-anchor",
        "font-family",
        "font-size",
        "font-weight",
        "font-style",
        "text-decoration",
    }
)
_XLINK_HREF = f"{{{XLINK_NS}}}href"
_XLINK_TITLE = f"{{{XLINK_NS}}}title"
_PREAMBLE = re.compile(r"^.*?(?=<svg\b)", re.DOTALL)
_POINTS = re.compile(r"(-?[0-9.]+)(pt)?$")


def printable(value: object, limit: int) -> str:
    """One line of printable characters (controls and unpaired surrogates replaced), cut to
    `limit`: what any drawing shows of a name or a text it did not write itself."""
    text = "".join(
        "\ufffd" if unicodedata.category(ch) in ("Cc", "Cs", "Co", "Cn") else ch
        for ch in " ".join(str(value).split())
    )
    return text if len(text) <= limit else text[: limit - 1] + "…"


class SvgRefused(Exception):
    """The drawing is not SVG this module can keep."""


def _local(tag: str) -> str | None:
    namespace, _, name = tag.rpartition("}")
    return name if namespace == "{" + SVG_NS else None


def _clean(element: ET.Element) -> None:
    for child in list(element):
        name = _local(child.tag) if isinstance(child.tag, str) else None
        if name not in ELEMENTS:
            element.remove(child)
            continue
        _clean(child)
    for attribute in list(element.attrib):
        value = element.attrib[attribute]
        if attribute in ATTRIBUTES or attribute == _XLINK_TITLE:
            continue
        if attribute == _XLINK_HREF and value.startswith("#"):
            continue  # a link within the page
        del element.attrib[attribute]


def _pixels(value: str | None) -> str | None:
    found = _POINTS.match(value or "")
    return str(round(float(found.group(1)))) if found else None


def clean_svg(text: str, *, label: str) -> str:
    """The drawing in `text`, cleaned and serialised again, sized 1 unit = 1 px, labelled."""
    if len(text) > MAX_SVG_CHARS:
        raise SvgRefused(f"the drawing is over {MAX_SVG_CHARS} characters")
    try:
        root = ET.fromstring(_PREAMBLE.sub("", text, count=1))  # noqa: S314 (our own output)
    except ET.ParseError as exc:
        raise SvgRefused(f"the drawing is not well-formed SVG ({exc})") from None
    if _local(root.tag) != "svg":
        raise SvgRefused("the drawing is not SVG")
    _clean(root)
    # Graphviz sizes in points; one unit per pixel keeps 12-point text at 12 px.
    for attribute in ("width", "height"):
        pixels = _pixels(root.get(attribute))
        if pixels is not None:
            root.set(attribute, pixels)
    root.set("role", "img")
    root.set("aria-label", label)
    return ET.tostring(root, encoding="unicode")


def svg_text(element: ET.Element, value: object, limit: int = 300) -> ET.Element:
    """Set `element`'s text to `value`, printable and cut to `limit`; return the element."""
    element.text = printable(value, limit)
    return element


def svg_element(tag: str, parent: ET.Element | None = None, **attributes: object) -> ET.Element:
    """An SVG element (under `parent` when given); `class_` sets class. Values become strings."""
    attrs = {
        ("class" if key == "class_" else key.replace("_", "-")): str(value)
        for key, value in attributes.items()
        if value is not None
    }
    qualified = f"{{{SVG_NS}}}{tag}"
    if parent is None:
        return ET.Element(qualified, attrs)
    return ET.SubElement(parent, qualified, attrs)
