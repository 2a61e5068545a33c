"""docs/ cannot go stale: the generated references equal what the code says, and docs/ covers every public
SQL function, CLI command and client method. No page narrates the history of the work."""

from __future__ import annotations

import re
from pathlib import Path

import click
import pytest

from membank import docs
from membank.cli import _LAZY_COMMANDS, main
from membank.client import MemoryBank, PendingOperation

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"


def test_the_generated_pages_match_a_freshly_migrated_database(db_url):
    """db_url is a clone of a template migrated to head by this code: the catalog the page must describe."""
    for path, text in docs.pages(db_url).items():
        assert path.exists(), f"{path.name} is missing: run python -m membank.docs"
        assert path.read_text() == text, f"{path.name} is stale: run python -m membank.docs"


def test_the_generator_checks_and_writes(db_url, tmp_path, monkeypatch):
    monkeypatch.setattr(docs, "docs_dir", lambda: tmp_path)
    assert docs.main(["--check", "--url", db_url]) == 1  # nothing there yet
    assert docs.main(["--url", db_url]) == 0
    assert docs.main(["--check", "--url", db_url]) == 0
    page = tmp_path / "cli.md"
    page.write_text(page.read_text().replace("# CLI\n", "# CLI\n\nA hand-written paragraph.\n", 1))
    assert docs.main(["--url", db_url]) == 0 and "A hand-written paragraph." in page.read_text()  # kept


def test_every_public_sql_function_is_documented(conn):
    names = {r["proname"] for r in conn.execute(
        "select p.proname from pg_proc as p join pg_namespace as n on n.oid = p.pronamespace"
        " where n.nspname = 'membank'").fetchall()}
    views = {r["relname"] for r in conn.execute(
        "select c.relname from pg_class as c join pg_namespace as n on n.oid = c.relnamespace"
        " where n.nspname = 'membank' and c.relkind = 'v'").fetchall()}
    reference = (DOCS / "sql-reference.md").read_text()
    assert len(names) > 60
    missing = sorted(n for n in names | views if f"\n### {n}\n" not in reference)
    assert missing == []


def _command_paths(group: click.Group, prefix: str) -> list[str]:
    out = []
    names = set(group.commands) | (set(_LAZY_COMMANDS) if group is main else set())
    for name in sorted(names):
        command = group.get_command(click.Context(group), name)
        out.append(f"{prefix} {name}")
        if isinstance(command, click.Group):
            out += _command_paths(command, f"{prefix} {name}")
    return out


def test_every_cli_command_is_documented():
    reference = (DOCS / "cli.md").read_text()
    paths = _command_paths(main, "membank")
    assert len(paths) > 40 and "membank memories retrieve" in paths and "membank mcp" in paths
    assert [p for p in paths if f"\n### {p}\n" not in reference] == []


def test_a_lazy_commands_one_line_help_is_its_own():
    """`membank --help` lists lazy commands without importing them; the line must be the command's own."""
    for name, (_, _, line) in _LAZY_COMMANDS.items():
        assert main.get_command(click.Context(main), name).get_short_help_str(limit=10**6) == line, name


@pytest.mark.parametrize("cls", [MemoryBank, PendingOperation])
def test_every_public_client_method_is_documented(cls):
    reference = (DOCS / "python-client.md").read_text()
    public = [n for n in dir(cls) if not n.startswith("_")]
    assert len(public) >= (40 if cls is MemoryBank else 2)
    assert [n for n in public if f"\n#### {cls.__name__}.{n}\n" not in reference] == []


# Words that tell the story of the work rather than what the code does now.
HISTORY = [
    re.compile(r"\bissue ?#?\d+", re.IGNORECASE),
    re.compile(r"\bsession [1-9]\d*(?:'s)? (?:run|end|start|code|figures|changes)|\bin session \d\b", re.IGNORECASE),
    re.compile(r"§ ?\d"),
    re.compile(r"`[0-9a-f]{7}` (?:is main|adds|gives)|\bpre-issue\b|\bbefore issue\b", re.IGNORECASE),
]


def _repository_texts() -> list[Path]:
    pages = [ROOT / "README.md", *DOCS.glob("*.md"), *(ROOT / "examples").glob("*.py")]
    for folder in ("pyclient", "tests", "bench", "db", "migrations"):
        pages += [p for p in (ROOT / folder).rglob("*") if p.suffix in (".py", ".sql", ".md")]
    return [p for p in pages if p.name != Path(__file__).name and "snapshots" not in p.parts]


def test_no_text_narrates_the_history_of_the_work():
    found = []
    for path in _repository_texts():
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            if any(p.search(line) for p in HISTORY):
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert found == []
