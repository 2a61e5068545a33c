"""CI fails when the Citus tests skip (tests/ci_skips.py), and only then; run in a pytest of their own."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

INNER = '''
import pytest

@pytest.mark.citus
def test_on_the_cluster():
    pytest.skip("no Citus cluster: no citus-14.0.1.tar.gz")

def test_elsewhere():
    pytest.skip("not here")
'''


def run_inner(folder: Path, ci: str | None) -> subprocess.CompletedProcess:
    (folder / "test_inner.py").write_text(INNER)
    (folder / "pytest.ini").write_text("[pytest]\nmarkers =\n    citus: on the cluster\n")
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "PYTEST_ADDOPTS")}
    env["PYTHONPATH"] = str(Path(__file__).parent)
    if ci is not None:
        env["CI"] = ci
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "ci_skips", "-p", "no:cacheprovider",
                           "-rA", str(folder)], cwd=folder, env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("ci", ["true", "1"])
def test_in_ci_a_skipped_citus_test_fails_the_run(tmp_path, ci):
    done = run_inner(tmp_path, ci)
    assert done.returncode == 1, done.stdout
    assert "1 failed, 1 skipped" in done.stdout
    assert "a citus test was skipped in CI" in done.stdout and "no citus-14.0.1.tar.gz" in done.stdout


def test_outside_ci_the_citus_tests_skip_with_their_reason(tmp_path):
    done = run_inner(tmp_path, None)
    assert done.returncode == 0, done.stdout
    assert "2 skipped" in done.stdout and "no Citus cluster: no citus-14.0.1.tar.gz" in done.stdout


SERVER_INNER = '''
import pytest

@pytest.fixture
def postgresql():
    return "a database"

@pytest.fixture
def db_url(postgresql):
    return postgresql

def test_reaches_the_server(db_url):
    assert db_url == "a database"

def test_reaches_no_server():
    pass
'''


@pytest.mark.parametrize("option, outcome", [(True, "1 passed, 1 deselected"), (False, "2 passed")])
def test_server_tests_only_leaves_out_exactly_the_tests_without_a_server_fixture(tmp_path, option, outcome):
    """CI's PostgreSQL 15 stage (--server-tests-only) keeps every test whose fixtures reach the server."""
    (tmp_path / "test_inner.py").write_text(SERVER_INNER)
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "PYTEST_ADDOPTS")}
    env["PYTHONPATH"] = str(Path(__file__).parent)
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "server_tests", "-p", "no:cacheprovider", "-rA",
                           *(["--server-tests-only"] if option else []), str(tmp_path)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout
    assert outcome in done.stdout
    assert ("PASSED test_inner.py::test_reaches_no_server" in done.stdout) is not option
