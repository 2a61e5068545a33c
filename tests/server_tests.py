"""``--server-tests-only``: run only the tests that reach the session's PostgreSQL server.

A test reaches the server when its fixtures include ``postgresql`` (its own
database, cloned from the template) or ``membank_proc`` (the server itself),
directly or through others (``db_url``, ``conn``, ``bank``, ``cli_env``, ...).
The rest never touch it: embedders, the Valkey buffer, argument parsing, and
the README and first-hour commands, which start the embedded PostgreSQL 18 of
their own whatever server the session runs. They pass or fail the same on any
server, so CI runs them once, in its PostgreSQL 18 stage; the PostgreSQL 15
stage passes this option and leaves them out (reported as deselected, never
as skipped). Without the option every test runs.
"""

from __future__ import annotations

import pytest

SERVER_FIXTURES = frozenset({"postgresql", "membank_proc"})


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--server-tests-only", action="store_true", default=False,
        help="run only the tests that use the session's PostgreSQL server (the postgresql or membank_proc fixture, "
             "directly or through another); deselect the rest, which run the same on any server. CI's PostgreSQL 15 "
             "stage uses it.")


def reaches_server(item: pytest.Item) -> bool:
    """Whether the test's fixture closure includes the session's server or a database on it."""
    return bool(SERVER_FIXTURES & set(getattr(item, "fixturenames", ())))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not config.getoption("--server-tests-only"):
        return
    kept = [item for item in items if reaches_server(item)]
    left_out = [item for item in items if not reaches_server(item)]
    if left_out:
        config.hook.pytest_deselected(items=left_out)
        items[:] = kept
