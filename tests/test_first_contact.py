"""What a new user meets in the first minutes: a wrong database URL, a missing extra, list arguments given
as a string, an empty query, durations, the table view, the demo's deleted memory, the package's name."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import tomllib
from datetime import timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner

from membank import MemoryBank, errors
from membank.cli import main

ROOT = Path(__file__).resolve().parent.parent
SCOPE = {"user_id": "first-contact"}


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nobody listens once it is closed


def _cli(env_url: str, *args: str) -> tuple[subprocess.CompletedProcess, float]:
    env = {**os.environ, "MEMBANK_DATABASE_URL": env_url}
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "membank.cli", *args], env=env, capture_output=True, text=True,
                          timeout=120)
    return done, time.monotonic() - started


def _wrong_urls(db_url: str) -> dict[str, tuple[str, str]]:
    """Wrong URLs (all with a password that must never be printed) and what the one line must name."""
    missing_db = db_url.replace("@/", "@/no_such_database_x", 1).split("?")[0] + "?" + db_url.split("?", 1)[1]
    return {
        "refused": (f"postgresql://alice:s3cretpw@127.0.0.1:{_closed_port()}/shop", 'database "shop" on 127.0.0.1:'),
        "missing database": (missing_db.replace("postgres@", "postgres:s3cretpw@"),
                             'database "no_such_database_x'),
        "unparsable": ("postgres ql:/alice:s3cretpw@@", "MEMBANK_DATABASE_URL is not a PostgreSQL URL"),
    }


@pytest.mark.parametrize("case", ["refused", "missing database", "unparsable"])
def test_a_wrong_database_url_fails_fast_with_one_line_exit_2(db_url, case):
    url, names = _wrong_urls(db_url)[case]
    done, seconds = _cli(url, "memories", "list", "--scope", json.dumps(SCOPE))
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert lines[0].startswith("error: ") and names in lines[0] and "hint: " in lines[0], lines[0]
    assert "s3cretpw" not in done.stderr + done.stdout and "Traceback" not in done.stderr
    # The design bound is a few seconds (libpq connect_timeout 2 s, no pool retries); loose for a busy machine.
    assert seconds < 20, seconds


def test_a_wrong_database_url_fails_fast_in_the_demo_and_db_commands(db_url):
    url, names = _wrong_urls(db_url)["refused"]
    for args in (["demo"], ["db", "upgrade"], ["db", "current"], ["worker", "--once"]):
        done, _ = _cli(url, *args)
        assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, (args, done.stderr)
        assert names in done.stderr, (args, done.stderr)


def test_the_python_client_raises_a_clear_error_quickly(db_url):
    for case, (url, names) in _wrong_urls(db_url).items():
        started = time.monotonic()
        with pytest.raises(errors.DatabaseUnavailableError) as info:
            MemoryBank(url)
        assert time.monotonic() - started < 20, case
        assert names.replace("MEMBANK_DATABASE_URL", "the database URL") in str(info.value), (case, info.value)
        assert "s3cretpw" not in str(info.value) and info.value.hint
        assert isinstance(info.value, ConnectionError)


def test_mcp_without_the_extra_is_one_line_exit_2(db_url):
    # sys.modules["mcp"] = None makes `import mcp` fail as if the [mcp] extra were not installed.
    code = "import sys; sys.modules['mcp'] = None; from membank.cli import main; main(['mcp'])"
    done = subprocess.run([sys.executable, "-c", code], env={**os.environ, "MEMBANK_DATABASE_URL": db_url},
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stderr.strip().count("\n") == 0, done.stderr
    assert "[mcp] extra" in done.stderr and "pip install -e '.[mcp]'" in done.stderr


@pytest.mark.parametrize("call", ["create_memory", "retrieve_memories", "generate_memories", "list_memories"])
def test_a_string_where_a_list_of_topics_belongs_names_topics(bank, conn, call):
    from conftest import count_all_rows

    before = count_all_rows(conn)
    calls = {
        "create_memory": lambda: bank.create_memory(SCOPE, "x", topics="USER_PREFERENCES"),
        "retrieve_memories": lambda: bank.retrieve_memories(SCOPE, "x", topics="USER_PREFERENCES"),
        "generate_memories": lambda: bank.generate_memories(SCOPE, facts=["x"], topics="USER_PREFERENCES"),
        "list_memories": lambda: bank.list_memories(SCOPE, topics="USER_PREFERENCES"),
    }
    with pytest.raises(errors.InvalidArgumentError) as info:
        calls[call]()
    assert info.value.argument == "topics" and "must be a list" in info.value.message
    assert "['USER_PREFERENCES']" in info.value.hint
    assert count_all_rows(conn) == before


def test_an_empty_query_lists_the_scope_in_python_and_cli(db_url, bank):
    facts = ["User is allergic to peanuts", "User lives in Lisbon"]
    for fact in facts:
        bank.create_memory(SCOPE, fact)
    for query in (None, "", "   "):
        assert [r.memory.fact for r in bank.retrieve_memories(SCOPE, query)] == facts
    assert [r.memory.fact for r in bank.retrieve_memories(SCOPE, "", top_k=1)] == facts[:1]
    result = CliRunner(env={"MEMBANK_DATABASE_URL": db_url}).invoke(
        main, ["memories", "retrieve", "--scope", json.dumps(SCOPE), "--query", ""])
    assert result.exit_code == 0 and [r["fact"] for r in json.loads(result.stdout)] == facts


@pytest.fixture
def cli(db_url):
    runner = CliRunner(env={"MEMBANK_DATABASE_URL": db_url})

    def run(*args: str, code: int = 0):
        result = runner.invoke(main, list(args), catch_exceptions=False)
        assert result.exit_code == code, result.output
        return result

    return run


def test_every_duration_option_takes_the_same_syntax(cli, bank):
    scope = json.dumps(SCOPE)
    made = json.loads(cli("memories", "create", "--scope", scope, "--fact", "tea", "--ttl", "1d").stdout)
    memory = bank.get_memory(made["name"])
    assert memory.expire_time - memory.create_time == timedelta(days=1)
    updated = json.loads(cli("memories", "update", made["name"], "--ttl", "90m").stdout)
    assert updated["revision"] == 2
    for seconds in ("3600", "45s"):
        cli("memories", "create", "--scope", scope, "--fact", f"x{seconds}", "--ttl", seconds)
    op = json.loads(cli("generate", "--scope", scope, "--fact", "The user is vegetarian", "--ttl", "12h").stdout)
    created = bank.get_memory(op["generated_memories"][0]["memory"]["name"])
    assert created.expire_time - created.create_time == timedelta(hours=12)
    for bad in ("0", "1x", "-5m"):
        result = cli("memories", "create", "--scope", scope, "--fact", "y", "--ttl", bad, code=2)
        assert "--ttl" in result.output and "30d, 12h" in result.output or "more than zero" in result.output
    assert "30d, 12h, 90m, 45s" in cli("compact", "--scope", scope, "--older-than", "soon", code=2).output


def test_output_is_a_table_for_people_and_json_for_scripts(cli):
    scope = json.dumps(SCOPE)
    made = json.loads(cli("memories", "create", "--scope", scope, "--fact", "User likes jasmine tea").stdout)
    table = cli("memories", "list", "--scope", scope, "--output", "table").stdout
    header, row = table.splitlines()[-2:]
    assert header.split()[:3] == ["name", "revision", "fact"] and row.startswith(made["name"])
    assert "User likes jasmine tea" in row and "{" not in table
    listed = cli("memories", "list", "--scope", scope, "--output", "json").stdout
    assert json.loads(listed)["memories"][0]["name"] == made["name"]
    assert json.loads(cli("memories", "list", "--scope", scope).stdout) == json.loads(listed)  # not a terminal
    one = cli("memories", "get", made["name"], "--output", "table").stdout
    assert one.splitlines()[0].split() == ["name", made["name"]] and len(one.splitlines()) < 15
    # a retrieval's table shows how each result was judged: its fused score and its relevance (0..1)
    found = json.loads(cli("memories", "retrieve", "--scope", scope, "--query", "jasmine tea").stdout)
    table = cli("memories", "retrieve", "--scope", scope, "--query", "jasmine tea", "--output", "table").stdout
    header, row = table.splitlines()[-2:]
    assert header.split()[:4] == ["name", "revision", "score", "relevance"] and row.startswith(made["name"])
    assert row.split()[3] == f"{found[0]['relevance']:.4f}"


def test_output_defaults_to_a_table_on_a_terminal(db_url):
    import pty

    primary, secondary = pty.openpty()
    env = {**os.environ, "MEMBANK_DATABASE_URL": db_url}
    done = subprocess.run([sys.executable, "-m", "membank.cli", "memories", "list", "--scope", json.dumps(SCOPE)],
                          env=env, stdout=secondary, stderr=subprocess.PIPE, timeout=120)
    os.close(secondary)
    out = os.read(primary, 65536).decode()
    os.close(primary)
    assert done.returncode == 0 and out.split() == ["memories", "(none)"], out


def test_the_demo_shows_that_tennis_was_deleted(cli):
    out = cli("demo").output
    lines = out.splitlines()
    start = lines.index("recall: Does Maya play tennis?")
    answer = lines[start + 1:start + 8]
    said = next(i for i, line in enumerate(answer) if "was DELETED in s3" in line)
    assert "Maya plays tennis every Sunday morning." in answer[said]
    assert answer[said + 1].split() == ["revision", "1", "CREATED", "Maya", "plays", "tennis", "every", "Sunday",
                                        "morning."]
    assert answer[said + 2].split()[:3] == ["revision", "2", "DELETED"]
    # questions that live memories answer say nothing about deleted ones
    allergy = lines.index("recall: What is Maya allergic to?")
    assert not any("DELETED" in line for line in lines[allergy:allergy + 5])


def test_the_distribution_name_is_ours_and_the_import_name_is_membank():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["name"] == "membank-pg"  # `pip index versions membank-pg`: no such project on PyPI
    assert "membank-pg[adk,mcp,langgraph]" in project["optional-dependencies"]["test"]
    assert project["scripts"] == {"membank": "membank.cli:main"}
    from membank import package_version

    assert package_version() == project["version"]
    assert CliRunner().invoke(main, ["--version"]).output == f"membank {project['version']}\n"


def test_a_page_token_in_the_table_is_whole_and_takes_the_next_page(cli):
    scope = json.dumps({"user_id": "pages"})
    for i in range(3):
        cli("memories", "create", "--scope", scope, "--fact", f"fact number {i}")
    first = cli("memories", "list", "--scope", scope, "--page-size", "2", "--output", "table").stdout
    token = next(line.split(None, 1)[1] for line in first.splitlines() if line.startswith("next_page_token"))
    assert "…" not in token and len(token) > 100
    rest = json.loads(cli("memories", "list", "--scope", scope, "--page-size", "2", "--page-token", token).stdout)
    assert [m["fact"] for m in rest["memories"]] == ["fact number 2"] and rest["next_page_token"] is None
