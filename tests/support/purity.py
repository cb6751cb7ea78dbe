"""What a module imports, read from its source: for the tests that keep pure modules pure."""

import ast
from pathlib import Path
from types import ModuleType


def imported_modules(module: ModuleType) -> set[str]:
    """Every module `module` imports, as written (relative ones keep their leading dots)."""
    imported = set()
    for node in ast.walk(ast.parse(Path(module.__file__).read_text())):
        if isinstance(node, ast.Import):
            imported.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            imported.add("." * node.level + (node.module or ""))
    return imported
