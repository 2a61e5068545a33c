"""Every CLI and SQL example of the README runs as written against a fresh database.

The README's ```bash blocks are read line by line (``\\`` continuations
joined); each ``membank`` command runs in process through click's runner (no
process start-up per line, to keep the test bounded), a ``printf '%s\\n' ... |``
prefix becomes its stdin, and the placeholder ``NAME`` becomes the name the
last ``create`` (or, for ``operations``, ``generate``) printed. A command is
either run or listed in SKIPPED with the reason and the test that covers it,
so a new README example is run unless someone says why not. The ```sql
blocks run statement by statement, ``'…'`` / ``'…uuid…'`` replaced by the
name the last ``create_memory`` / ``generate_memories`` returned and the
elided query vector by a real one.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import SANDBOX_DIRS, files_under
from membank.cli import main

README = Path(__file__).resolve().parent.parent / "README.md"

# Commands not run here (prefix of the command line -> why, and where it is covered).
SKIPPED = {
    "membank worker": "runs until Ctrl-C (the `--once` form is run)",
    "membank db downgrade": "removes the database; tests/test_cli.py::test_times_are_iso_8601_and_downgrade_asks",
    "membank audit": "tests/test_audit.py",
    "membank mcp": "a server that runs until stopped; tests/test_mcp.py",
}
RUN_ANYWAY = ("membank worker --once",)
# Commands whose documented outcome includes a non-zero exit (prefix -> allowed exit codes, why).
EXIT_CODES = {"membank permissions check": ((0, 1), "exit 1 is its answer 'not allowed' (no rule allows it)")}


def blocks(language: str) -> list[str]:
    """The README's fenced blocks of one language, in order."""
    return re.findall(rf"^```{language}\n(.*?)^```", README.read_text(), flags=re.MULTILINE | re.DOTALL)


def commands(block: str) -> list[list[str]]:
    """Shell lines of a block as argument lists (comments dropped, continuations joined)."""
    out, pending = [], ""
    for line in block.splitlines():
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        words = shlex.split(pending + line, comments=True)
        pending = ""
        if words:
            out.append(words)
    return out


def membank_commands() -> list[list[str]]:
    """Every shell line of the README that runs membank (possibly behind a pipe)."""
    found = []
    for block in blocks("bash"):
        for words in commands(block):
            if "membank" in words and (words[0] == "membank" or "|" in words):
                found.append(words)
    return found


def skipped(words: list[str]) -> bool:
    line = " ".join(words[words.index("membank"):])
    if any(line.startswith(keep) for keep in RUN_ANYWAY):
        return False
    return any(line.startswith(prefix) for prefix in SKIPPED)


def test_readme_cli_examples_run_as_written(cli_env, sandbox):
    # cli_env: this test's database and Valkey, a fake HOME and data dir that must stay empty (issue 22 §8: the
    # README's `membank erase` and `permissions allow-once` reached the user's default Valkey).
    runner = CliRunner()
    names: dict[str, str] = {}
    ran = []
    for words in membank_commands():
        if skipped(words):
            continue
        stdin = None
        if "|" in words:
            producer, words = words[:words.index("|")], words[words.index("|") + 1:]
            assert producer[:2] == ["printf", "%s\\n"], f"only printf '%s\\n' pipes are supported: {producer}"
            stdin = "".join(arg + "\n" for arg in producer[2:])
        assert words[0] == "membank", words
        args = words[1:]
        kind = "operation" if args[:1] == ["operations"] else "memory"
        args = [names[kind] if a == "NAME" else a for a in args]
        result = runner.invoke(main, args, input=stdin, catch_exceptions=False)
        allowed = next((codes for prefix, (codes, _) in EXIT_CODES.items()
                        if " ".join(words).startswith(prefix)), (0,))
        assert result.exit_code in allowed, f"membank {' '.join(args)}\n{result.output}"
        ran.append(" ".join(args[:2]))
        if args[:2] == ["memories", "create"]:
            names.setdefault("memory", json.loads(result.stdout)["name"])  # the first one: it has no TTL
        if args[:1] == ["generate"]:
            names["operation"] = json.loads(result.stdout)["name"]
    # the README's CLI tour really ran, events before generate
    assert ran.index("events append") < ran.index("generate --scope")
    for expected in ("memories create", "memories get", "memories delete", "events list", "operations get",
                     "reembed --yes", "db upgrade", "--version", "permissions allow-once", "erase --scope"):
        assert expected in ran, expected
    # Nothing reached the session's own default data dir either (no server started there).
    assert files_under(sandbox / SANDBOX_DIRS["MEMBANK_DATA_DIR"]) == []


def test_every_skipped_readme_command_exists():
    lines = [" ".join(w[w.index("membank"):]) for w in membank_commands()]
    for prefix in SKIPPED:
        assert any(line.startswith(prefix) for line in lines), f"SKIPPED names a command the README lacks: {prefix}"


def _statements(block: str) -> list[str]:
    """SQL statements of a block: trailing ``-- comments`` dropped, split at a ``;`` that ends a line."""
    text = "\n".join(re.sub(r"(^|\s)--(\s.*)?$", "", line) for line in block.splitlines())
    return [s.strip() for s in re.split(r";\s*(?:\n|$)", text) if s.strip()]


def test_readme_sql_examples_run_as_written(conn, embedder):
    names: dict[str, str] = {}
    vector = "{" + ",".join(repr(float(x)) for x in embedder.embed_query("peanut allergy")) + "}"
    ran = 0
    for block in blocks("sql"):
        for statement in _statements(block):
            kind = "operation" if "get_operation" in statement else "memory"
            statement = re.sub(r"'…(uuid…)?'", lambda m: f"'{names[kind]}'", statement)
            statement = statement.replace("'{0.01, ...}'", f"'{vector}'")
            cursor = conn.execute(statement)
            rows = cursor.fetchall() if cursor.description else []
            ran += 1
            if "create_memory(" in statement and "name" in rows[0] and "memory" not in names:
                names["memory"] = str(rows[0]["name"])
            for starts in ("generate_memories", "compact_memories"):  # each returns an operation name (or null)
                if f"membank.{starts}(" in statement and rows[0][starts] is not None:
                    names["operation"] = str(rows[0][starts])
    assert ran >= 15 and names.keys() == {"memory", "operation"}


@pytest.mark.parametrize("needle", ["membank events append", "membank db psql", "membank mcp", "--embed-now"])
def test_readme_documents_the_new_commands(needle):
    assert needle in README.read_text()
