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


def test_every_result_column_has_a_meaning(db_url, conn):
    """Every column of what a function returns (rows or a composite) is listed in the SQL reference with a meaning
    from the catalog: COMMENT ON COLUMN of the composite type, or the function comment's Columns: block, which names
    exactly the function's columns (none missing, none stale)."""
    columns = docs.result_columns(db_url)
    assert {"retrieve_memories", "list_memories", "get_operation", "evidence_verdicts", "claim_embedding_jobs",
            "claim_generation_jobs", "embedding_backlog"} <= set(columns)
    assert [f"{name}.{c['name']}" for name, cs in columns.items() for c in cs if not c["meaning"]] == []
    assert next(c for c in columns["retrieve_memories"] if c["name"] == "similarity") == {
        "name": "similarity", "type": "double precision",
        "meaning": "1 - distance (cosine similarity, -1..1); null when distance is."}
    rows = conn.execute("select p.proname, obj_description(p.oid, 'pg_proc') as comment from pg_proc as p"
                        " where p.pronamespace = 'membank'::regnamespace").fetchall()
    blocks = {r["proname"]: docs.split_columns(r["comment"] or "")[1] for r in rows}
    for name, block in blocks.items():
        if block:
            assert list(block) == [c["name"] for c in columns[name]], name
    assert sum(1 for b in blocks.values() if b) >= 9


def test_erase_scopes_documented_counts_are_the_ones_it_returns(conn):
    comment = conn.execute("select obj_description('membank.erase_scope(jsonb, boolean)'::regprocedure, 'pg_proc')"
                           ).fetchone()["obj_description"]
    documented = re.findall(r'"(\w+)"', comment.split('"counts": {', 1)[1].split("}", 1)[0])
    counts = conn.execute("select membank.erase_scope(scope => '{\"user_id\": \"nobody\"}') as e").fetchone()["e"]
    assert "user_states" in documented and sorted(documented) == sorted(counts["counts"])


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
