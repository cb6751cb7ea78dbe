"""Module docstrings stay short (STYLE.md): what the module holds and its invariants, with the
reasoning in docs/; no apology for a module's size and no note addressed to a tool."""

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
APPS = ("executions", "orquestador", "actions", "reconciliation")
MOST_LINES = 10

# "past 400 lines" and the like, and notes that answer a duplicate checker rather than a reader.
SIZE_APOLOGY = re.compile(r"\b(past|over|beyond|above) \d{3,} lines\b", re.IGNORECASE)
TOOL_NOTES = re.compile(
    r"not logic|signature repeats|(by|in) (shape|form) only|duplicate checker", re.IGNORECASE
)


def _modules(*tops: str) -> list[Path]:
    return sorted(
        path
        for top in tops
        for path in (ROOT / top).rglob("*.py")
        if "migrations" not in path.parts and ".venv" not in path.parts
    )


def _docstring_lines(path: Path) -> int:
    body = ast.parse(path.read_text(), filename=str(path)).body
    first = body[0] if body else None
    if not (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)):
        return 0
    assert first.end_lineno is not None
    return first.end_lineno - first.lineno + 1


def test_module_docstrings__at_most_ten_lines_under_the_apps():
    long = {
        str(path.relative_to(ROOT)): lines
        for path in _modules(*APPS)
        if (lines := _docstring_lines(path)) > MOST_LINES
    }
    assert long == {}


@pytest.mark.parametrize("pattern", [SIZE_APOLOGY, TOOL_NOTES], ids=["size", "tools"])
def test_code__no_apology_for_size_nor_note_to_a_tool(pattern):
    found = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in _modules(*APPS, "tests", "bench", "scripts")
        if path != Path(__file__).resolve()
        for number, line in enumerate(path.read_text().splitlines(), start=1)
        if pattern.search(line)
    ]
    assert found == []
