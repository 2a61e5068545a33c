"""The suite stays inside its own sandbox.

Running the suite as root once started root's default Valkey in the real
data folder and left it running: a README command ran with only
MEMBANK_DATABASE_URL overridden. The session now points HOME, the XDG dirs and
MEMBANK_DATA_DIR at a folder under /tmp and unsets MEMBANK_DATABASE_URL and
MEMBANK_VALKEY_URL (conftest.py); commands a test runs get ``cli_env``: the
test's own servers and an empty fake HOME and data dir that must stay empty.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

from conftest import SANDBOX_DIRS, files_under, processes_under

SCOPE = json.dumps({"user_id": "sandbox-u1"})


def test_the_session_runs_in_a_sandbox(sandbox):
    assert sandbox.is_relative_to("/tmp")
    for var, sub in SANDBOX_DIRS.items():
        assert Path(os.environ[var]) == sandbox / sub, var
    # The session's own default data dir holds no server: nothing started one there.
    data = sandbox / SANDBOX_DIRS["MEMBANK_DATA_DIR"]
    assert not (data / "valkey").exists() and not (data / "pg").exists(), files_under(data)


def _membank(*args: str) -> subprocess.CompletedProcess:
    # os.environ is cli_env's: the test's database and Valkey, the fake HOME and data dir.
    return subprocess.run([sys.executable, "-m", "membank.cli", *args], env=dict(os.environ),
                          capture_output=True, text=True, timeout=120)


def test_cli_subprocesses_leave_home_and_data_dir_untouched_and_no_server_running(cli_env):
    """The commands that reach Valkey (allow-once grants, erase's buffer keys) use the test's server, in processes
    of their own; afterwards the fake HOME and data dir are empty and no process runs from them (cli_env checks)."""
    for args in (["permissions", "allow-once", "--scope", SCOPE, "--tool", "run_shell", "--command", "make deploy",
                  "--session", "s1"],
                 ["permissions", "check", "--scope", SCOPE, "--tool", "run_shell", "--command", "make deploy",
                  "--session", "s1"],
                 ["erase", "--scope", SCOPE, "--force"],
                 ["valkey", "url"]):
        out = _membank(*args)
        assert out.returncode == 0, (args, out.stdout, out.stderr)
    assert _membank("valkey", "url").stdout.strip() == os.environ["MEMBANK_VALKEY_URL"]
    # Only the empty folders cli_env made: no file in the fake HOME or data dir, no server running from them.
    subs = [sub for var, sub in SANDBOX_DIRS.items() if var != "XDG_CACHE_HOME"]
    made = {str(Path(sub).parents[i]) for sub in subs for i in range(len(Path(sub).parents) - 1)}
    assert set(files_under(cli_env)) == made | set(subs)
    assert processes_under(cli_env) == []


def test_a_test_session_removes_its_own_server_folder():
    """Every run used to leave its /tmp/membank-test-* folder behind (empty: only its pg/ was deleted)."""
    root = Path(__file__).resolve().parent.parent
    run = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "tests/test_readme.py",
                          "-k", "test_every_page_has_a_contents_list"],
                         cwd=root, env=dict(os.environ), capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    folder = Path(re.search(r"^membank test server: .*, in (/tmp/membank-test-\S+)$", run.stdout, re.M).group(1))
    assert not folder.exists(), files_under(folder)


def test_a_session_ended_by_sigterm_stops_its_server_and_removes_its_folder(tmp_path):
    """`timeout` or CI's cleanup sends SIGTERM: the session's server and folder used to outlive it."""
    (tmp_path / "test_inner.py").write_text(
        "import time\n\ndef test_waits():\n    print('READY', flush=True)\n    time.sleep(120)\n")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent)}
    run = subprocess.Popen([sys.executable, "-m", "pytest", "-p", "conftest", "-p", "no:cacheprovider", "-s",
                            str(tmp_path / "test_inner.py")], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
    lines = []
    for line in run.stdout:
        lines.append(line)
        if "READY" in line:
            run.send_signal(signal.SIGTERM)
            break
    lines += run.stdout.readlines()
    assert run.wait(timeout=120) == 2, "".join(lines)  # pytest's "interrupted"
    output = "".join(lines)
    folder = Path(re.search(r"^membank test server: .*, in (/tmp/membank-test-\S+)$", output, re.M).group(1))
    assert not folder.exists(), files_under(folder)
    assert processes_under(folder) == []
