"""The house: sqlfluff lints every SQL file, and the client's modules import each other without a circle."""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest
from sqlfluff.core import FluffConfig, Linter
from sqlfluff.core.errors import SQLFluffSkipFile

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "pyclient" / "membank"
SQL_FILES = sorted(p for folder in ("db", "migrations") for p in (ROOT / folder).rglob("*.sql"))


def test_sqlfluff_skips_no_sql_file():
    """sqlfluff silently skips a file over large_file_skip_byte_limit; the project's .sqlfluff must cover them all."""
    cwd = os.getcwd()
    os.chdir(ROOT)  # sqlfluff reads .sqlfluff from the working directory up
    try:
        config = FluffConfig.from_root()
        skipped = []
        for path in SQL_FILES:
            try:
                Linter.load_raw_file_and_config(str(path.relative_to(ROOT)), config)
            except SQLFluffSkipFile:
                skipped.append(path.name)
    finally:
        os.chdir(cwd)
    assert len(SQL_FILES) > 50 and skipped == []
    biggest = max(SQL_FILES, key=lambda p: p.stat().st_size)
    assert biggest.stat().st_size > 20_000  # sqlfluff's default limit: the setting is what lets it in


def _module(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """membank module -> the membank modules it imports anywhere (top level or inside a function)."""
    modules = {_module(p): p for p in PACKAGE.rglob("*.py")}
    graph = {}
    for name, path in modules.items():
        deps = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                deps |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                deps |= {f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules else node.module
                         for a in node.names}
        graph[name] = {d for d in deps if d in modules and d != name and d != "membank"}
    return graph


def test_no_import_circle_in_the_client():
    graph = import_graph()
    assert {"membank.settings", "membank.embedded", "membank.migrate", "membank.database"} <= set(graph)
    state: dict[str, str] = {}

    def visit(node: str, path: list[str]) -> None:
        state[node] = "open"
        for dep in sorted(graph[node]):
            if state.get(dep) == "open":
                pytest.fail("import circle: " + " -> ".join(path[path.index(dep):] + [dep]))
            if dep not in state:
                visit(dep, path + [dep])
        state[node] = "done"

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    # A leaf but for its errors: the environment's settings, refused with membank's own exception classes.
    assert graph["membank.settings"] <= {"membank.errors"} and graph["membank.errors"] == set()
