"""Every code block of the README and of docs/ runs as written, in order, on one fresh database per page.

Fences are read by language: ```sql blocks run statement by statement on
the page's database (``'…'`` / ``'…uuid…'`` become the name the last
``create_memory`` / ``generate_memories`` returned, the elided query vector a
real one; psql's ``\\gset [prefix]`` ending a statement and ``:'variable'``
work as in psql); ```python blocks run in one namespace per page with
MEMBANK_DATABASE_URL and MEMBANK_VALKEY_URL pointing at the test's servers;
```bash lines run ``membank`` in process through click's runner (a
``.venv/bin/`` prefix is dropped, ``source .venv/bin/activate`` is a no-op, a
``printf '%s\\n' ... |`` prefix becomes stdin, the placeholder ``NAME`` the
name the last ``create`` or ``generate`` printed); ```json blocks must parse.
```text blocks are output or layout, not code. A block that cannot run says
so in its fence (```bash no-run) and is listed in NO_RUN with the reason; a
command line that cannot run is listed in SKIPPED with where it is covered.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import SANDBOX_DIRS, files_under
from membank.cli import main

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
RUNNABLE = {"sql", "python", "bash", "json"}
NOT_CODE = {"text"}
FOREIGN = {"javascript"}  # another language's client: shown, never run here (always no-run, listed in NO_RUN)

# Blocks marked no-run: (page, first line) -> why it cannot run in a test.
NO_RUN = {
    ("README.md", "# 1. install and run the main job: a multi-session conversation turned into memories, then "
                  "recalled"): "it installs; CI (.ci/run) runs command 2 in a fresh virtual environment",
    ("benchmarks.md", ".venv/bin/python bench/retrieval_quality.py     # recall@k on LoCoMo per mode and category; "
                      "multilingual set"): "benchmarks take minutes to hours; bench/ is run by hand",
}
NO_RUN.update({
    ("operations.md", "revoke connect on database bank_b from public;"):
        "names a second membank database and its logins, which the test server does not have",
    ("testing.md", ".ci/pg15.sh ../shared/vendor ~/.cache/membank-ci"): "installs PostgreSQL 15 with apt; CI runs it",
    ("testing.md", ".venv/bin/pytest -m citus"): "the suite itself, on a Citus cluster; CI runs it",
    ("scale-out.md", "set citus.log_remote_commands = on;"):
        "needs a Citus coordinator; tests/test_citus_routing.py makes the same check on the test cluster",
    ("scale-out.md", "select citus_add_node('10.0.0.3', 5432);"):
        "needs a Citus coordinator and a new worker; tests/test_citus.py runs these calls on the test cluster",
    ("testing.md", "MEMBANK_FUZZ_EXAMPLES=300 .venv/bin/pytest -q -s tests/test_invariants.py"):
        "a test of the suite with more examples (15 minutes); the suite runs it with 20",
    ("testing.md", "MEMBANK_TEST_LOCAL_MODEL_URL=http://127.0.0.1:8080/v1 MEMBANK_TEST_LOCAL_MODEL=qwen2.5-0.5b-instruct "
                   ".venv/bin/pytest -m local_model -s"): "needs a local model server the suite does not have",
    ("generate-memories.md", "export MEMBANK_PROVIDER=openai:qwen2.5-7b-instruct          # the model name the server "
                             "serves"): "points membank at a local model server the tests do not have",
    ("README.md", "export MEMBANK_PROVIDER=openai:qwen2.5-7b-instruct       # the name the server serves the model "
                  "under"): "points membank at a local model server the tests do not have",
    ("testing.md", ".venv/bin/python bench/soak.py"): "a benchmark of 3 minutes plus the drain; bench/ is run by hand,"
                                                     " tests/test_soak.py runs its --smoke",
    ("memories.md", 'const { Client } = require("pg");'): "node-postgres: the suite has no Node.js; the same "
                                                             "call with psycopg runs above it",
    ("operations.md", "membank db sql > membank.sql                        # an empty database: everything up to "
                      "head"): "psql on a database of the DBA's; tests/test_sql_install.py runs the same commands",
    ("scale-out.md", "# 1. a database on every node (create database membank; create extension citus), and on the "
                     "coordinator"): "needs a Citus cluster and a source bank; tests/test_citus_convert.py runs the "
                                     "same steps",
})
NO_RUN.update({
    ("migrating.md", "membank import mem0 --url postgresql://mem0@db.example/mem0 --dry-run         # counts only, "
                     "writes nothing"): "needs a database holding a mem0 collection; tests/test_import_mem0.py "
                                        "creates one as mem0 does and runs the command",
})
# Command lines not run here (prefix -> why, and where they are covered).
SKIPPED = {
    "membank worker": "runs until Ctrl-C (the `--once` form is run)",
    "membank db downgrade": "removes the database; tests/test_cli.py::test_times_are_iso_8601_and_downgrade_asks",
    "membank audit": "tests/test_audit.py",
    "membank mcp": "a server that runs until stopped; tests/test_mcp.py",
}
RUN_ANYWAY = ("membank worker --once",)
# Commands whose documented outcome includes a non-zero exit (prefix -> allowed exit codes, why).
EXIT_CODES = {"membank permissions check": ((0, 1), "exit 1 is its answer 'not allowed' (no rule allows it)")}
FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```[ \t]*$", flags=re.MULTILINE | re.DOTALL)


def fences(page: Path) -> list[tuple[str, bool, str]]:
    """(language, no-run, body) of every fenced block of a page, in order."""
    out = []
    for info, body in FENCE.findall(page.read_text()):
        words = info.split()
        out.append((words[0] if words else "", "no-run" in words[1:], body))
    return out


def test_every_block_is_code_we_run_or_marked():
    no_run = {}
    for page in PAGES:
        for language, skip, body in fences(page):
            assert language in RUNNABLE | NOT_CODE | FOREIGN, (
                f"{page.name}: a ```{language} block (use {RUNNABLE | NOT_CODE | FOREIGN})")
            assert language not in FOREIGN or skip, f"{page.name}: a ```{language} block must be no-run"
            if skip:
                no_run[(page.name, body.splitlines()[0])] = True
    assert set(no_run) == set(NO_RUN), "a no-run block must be listed in NO_RUN with the reason (keep them few)"


# -- bash ------------------------------------------------------------------------------
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
            out.append([w.removeprefix(".venv/bin/") for w in words])
    return out


def skipped(words: list[str]) -> bool:
    line = " ".join(words[words.index("membank"):])
    if any(line.startswith(keep) for keep in RUN_ANYWAY):
        return False
    return any(line.startswith(prefix) for prefix in SKIPPED)


class Page:
    """The state of one page's run: its database, the names the last calls returned, what ran."""

    def __init__(self, conn) -> None:
        self.conn = conn
        self.names: dict[str, str] = {}
        self.variables: dict[str, str] = {}  # psql variables set by \gset
        self.ran: list[str] = []
        import sys
        import types

        # The page's code runs as a module of its own (pydantic resolves a model's annotations in its module).
        self.module = types.ModuleType("membank_docs_page")
        sys.modules[self.module.__name__] = self.module
        self.namespace = self.module.__dict__
        self.runner = CliRunner()

    def bash(self, block: str, where: str) -> None:
        for words in commands(block):
            if words[:2] == ["source", "activate"] or words == ["source", ".venv/bin/activate"]:
                continue
            assert "membank" in words, f"{where}: a shell line the test cannot run: {' '.join(words)}"
            if skipped(words):
                continue
            stdin = None
            if "|" in words:
                producer, words = words[:words.index("|")], words[words.index("|") + 1:]
                assert producer[:2] == ["printf", "%s\\n"], f"only printf '%s\\n' pipes are supported: {producer}"
                stdin = "".join(arg + "\n" for arg in producer[2:])
            assert words[0] == "membank", f"{where}: {words}"
            args = words[1:]
            kind = "operation" if args[:1] == ["operations"] else "memory"
            args = [self.names[kind] if a == "NAME" else a for a in args]
            result = self.runner.invoke(main, args, input=stdin, catch_exceptions=False)
            allowed = next((codes for prefix, (codes, _) in EXIT_CODES.items()
                            if " ".join(words).startswith(prefix)), (0,))
            assert result.exit_code in allowed, f"{where}: membank {' '.join(args)}\n{result.output}"
            self.ran.append(" ".join(args[:2]))
            self._remember(args, result.stdout)

    def _remember(self, args: list[str], stdout: str) -> None:
        try:
            printed = json.loads(stdout)
        except ValueError:
            return
        if args[:2] == ["memories", "create"]:
            self.names.setdefault("memory", printed["name"])  # the first one: later ones may expire
        if args[:1] == ["generate"] and isinstance(printed, dict) and printed.get("name"):
            self.names["operation"] = printed["name"]

    def sql(self, block: str) -> None:
        for statement in _statements(block):
            gset = re.search(r"\\gset(?:\s+(\w+))?$", statement)
            statement = statement[:gset.start()].rstrip() if gset else statement
            statement = re.sub(r":'(\w+)'", lambda m: "'" + self.variables[m.group(1)].replace("'", "''") + "'",
                               statement)
            kind = "operation" if "get_operation" in statement else "memory"
            statement = re.sub(r"'…(uuid…)?'", lambda m: f"'{self.names[kind]}'", statement)
            cursor = self.conn.execute(statement)
            rows = cursor.fetchall() if cursor.description else []
            if gset:  # as psql: one row, each column a variable (prefixed)
                assert len(rows) == 1, f"\\gset needs exactly one row: {statement}"
                self.variables.update({(gset.group(1) or "") + k: str(v) for k, v in rows[0].items()})
            self.ran.append(statement.split("(")[0])
            if "create_memory(" in statement and rows and "name" in rows[0] and "memory" not in self.names:
                self.names["memory"] = str(rows[0]["name"])
            for starts in ("generate_memories", "compact_memories"):  # each returns an operation name (or null)
                if f"membank.{starts}(" in statement and rows and rows[0].get(starts) is not None:
                    self.names["operation"] = str(rows[0][starts])

    def python(self, block: str, where: str) -> None:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(block, where, "exec"), self.namespace)  # noqa: S102 - the documentation's own code
        printed = out.getvalue().splitlines()
        for expected in promised_output(block):
            assert expected in printed, f"{where}: the text says it prints {expected!r}; it printed {printed}"
        self.ran.append("python")


def promised_output(block: str) -> list[str]:
    """What a block says it prints: a Python literal in the comment after a ``print(...)`` (same line or next)."""
    import ast

    lines = block.splitlines()
    promised = []
    for i, line in enumerate(lines):
        if not line.lstrip().startswith("print("):
            continue
        comment = line.split("  # ", 1)[1] if "  # " in line else None
        if comment is None and i + 1 < len(lines) and lines[i + 1].lstrip().startswith("# "):
            comment = lines[i + 1].lstrip()[2:]
        if comment is None:
            continue
        literal = comment.split("   (", 1)[0].strip()
        try:
            promised.append(str(ast.literal_eval(literal)))
        except (ValueError, SyntaxError):
            continue
    return promised


def _statements(block: str) -> list[str]:
    """SQL statements of a block: trailing ``-- comments`` dropped, split at a ``;`` that ends a line."""
    text = "\n".join(re.sub(r"(^|\s)--(\s.*)?$", "", line) for line in block.splitlines())
    text = re.sub(r"(\\gset(?:[ \t]+\w+)?)[ \t]*$", r"\1;", text, flags=re.M)  # psql's \gset ends a statement
    return [s.strip() for s in re.split(r";\s*(?:\n|$)", text) if s.strip()]


@pytest.fixture
def page_env(cli_env, own_valkey, monkeypatch, tmp_path, sandbox):
    """cli_env: this test's database, a fake HOME and data dir that must stay empty; a Valkey of the page's own."""
    from membank.buffer import server

    monkeypatch.setenv("MEMBANK_VALKEY_URL", server.url_for(own_valkey))
    monkeypatch.chdir(tmp_path)
    yield
    # Nothing reached the session's own default data dir either (no server started there).
    assert files_under(sandbox / SANDBOX_DIRS["MEMBANK_DATA_DIR"]) == []


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_every_block_of_the_page_runs_in_order_on_one_database(page, page_env, conn):
    run = Page(conn)
    python = []
    for number, (language, skip, body) in enumerate(fences(page), start=1):
        where = f"{page.name} block {number}"
        if skip or language in NOT_CODE:
            continue
        if language == "bash":
            run.bash(body, where)
        elif language == "sql":
            run.sql(body)
        elif language == "python":
            run.python(body, where)
            python.append((body, where))
        elif language == "json":
            json.loads(body)
    if page == README:  # the five tours really ran, in order
        assert run.ran.count("python") == 3 and "events append" in run.ran and "memories retrieve" in run.ran
        assert sum(s.startswith("select") for s in run.ran) >= 6
        # The README says so: running its Python examples again (tour.py, ADK, MCP) stores nothing twice.
        held = memories_held(conn)
        for body, where in python:
            run.python(body, f"{where}, run again")
        assert memories_held(conn) == held
    if page.name == "session-buffer.md":  # the page says so: running its example again adds no turn
        body, where = python[0]
        run.python(body, f"{where}, run again")
        from membank.buffer import SessionBuffer

        with SessionBuffer() as buffer:
            assert [t.text for t in buffer.window({"user_id": "u1"}, "s1")] == [
                "I moved to Lisbon", "How do you like it?"]


def memories_held(conn) -> list[tuple[str, str]]:
    """(scope, fact) of every memory of the database, sorted: duplicates show as repeated pairs."""
    rows = conn.execute("select scope::text as scope, coalesce(fact, structured_content::text) as fact "
                        "from membank_private.memories order by 1, 2").fetchall()
    return [(r["scope"], r["fact"]) for r in rows]


def test_every_skipped_command_is_in_the_docs():
    lines = [" ".join(w[w.index("membank"):]) for page in PAGES for language, _, body in fences(page)
             if language == "bash" for w in commands(body) if "membank" in w]
    for prefix in SKIPPED:
        assert any(line.startswith(prefix) for line in lines), f"SKIPPED names a command the docs lack: {prefix}"


# -- the first screen and the length -------------------------------------------------------
def test_the_readme_is_short_and_leads_with_the_two_commands():
    text = README.read_text()
    lines = text.splitlines()
    assert len(lines) <= 300, len(lines)
    first_screen = "\n".join(lines[:30])
    assert "python3 -m venv .venv && .venv/bin/pip install -e . && .venv/bin/membank demo" in first_screen
    assert ".venv/bin/pip install -e '.[test]' && .venv/bin/pytest" in first_screen
    for tour in ("### 1. SQL", "### 2. Python", "### 3. CLI", "### 4. Google ADK", "### 5. MCP"):
        assert tour in text


def test_no_doc_line_installs_another_project():
    for page in [*PAGES, ROOT / "examples" / "adk_agent.py", *sorted((ROOT / "pyclient").rglob("*.py"))]:
        for number, line in enumerate(page.read_text().splitlines(), start=1):
            if "pip install" in line and "membank" in line:
                assert re.search(r"pip install -e '?\.(\[[a-z,]+\])?'?", line), f"{page.name}:{number}: {line}"


def test_every_page_has_a_contents_list():
    for page in sorted((ROOT / "docs").glob("*.md")):
        assert "## Contents" in page.read_text() or "## Reference" in page.read_text(), page.name


def test_every_contents_list_links_every_section():
    """A section added to a page also goes into its Contents list (GitHub's anchors: lower case, punctuation dropped)."""
    for page in sorted((ROOT / "docs").glob("*.md")):
        text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
        if "## Contents" not in text:
            continue
        contents = text.split("## Contents", 1)[1].split("\n## ", 1)[0]
        linked = set(re.findall(r"\]\(#([^)]+)\)", contents))
        sections = [h for h in re.findall(r"^## (.+)$", text, flags=re.M) if h != "Contents"]
        missing = [h for h in sections if re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") not in linked]
        assert missing == [], f"{page.name}: not in its Contents list: {missing}"


def test_no_python_block_shows_a_value_it_does_not_print():
    """A bare expression shows its value in a REPL only; run as a script (as the pages say), it prints nothing."""
    import ast

    for page in PAGES:
        for number, (language, _, body) in enumerate(fences(page), start=1):
            if language != "python":
                continue
            bare = [node.lineno for node in ast.walk(ast.parse(body)) if isinstance(node, ast.Expr)
                    and not isinstance(node.value, (ast.Call, ast.Await, ast.Constant, ast.Yield))]
            assert bare == [], f"{page.name} block {number}, lines {bare}: print what the example shows"
