"""A fresh, migrated database for a benchmark run on the configured server.

Benches run side by side: each run works in a database of its own. Without
``--db`` a bench names its database ``membank_bench_<stem>_<pid>_<random>``
and drops it when the run ends; with ``--db NAME`` it (re)creates NAME and
keeps it (to inspect it, or to reuse it where a bench offers ``--reuse``).
Two runs given the same ``--db`` still collide: the second drops the first's
database (``drop database ... with (force)``).
"""

from __future__ import annotations

import argparse
import atexit
import os
import secrets
import sys
from pathlib import Path

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "pyclient"))

from membank import database, migrate  # noqa: E402


def fresh_database(name: str) -> str:
    """Drop and create database ``name`` next to membank's own (embedded or MEMBANK_DATABASE_URL); migrate it."""
    base = database.database_url()
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(sql.SQL("drop database if exists {} with (force)").format(sql.Identifier(name)))
        conn.execute(sql.SQL("create database {}").format(sql.Identifier(name)))
    url = make_conninfo(base, dbname=name)
    migrate.upgrade(url)
    return url


def drop_database(name: str) -> None:
    """Drop database ``name`` if it exists (its connections are ended); a server already gone is only reported."""
    try:
        with psycopg.connect(database.database_url(), autocommit=True) as conn:
            conn.execute(sql.SQL("drop database if exists {} with (force)").format(sql.Identifier(name)))
    except psycopg.OperationalError as err:
        print(f"note: could not drop the bench database {name}: {err}", file=sys.stderr)


def add_db_argument(parser: argparse.ArgumentParser, stem: str) -> None:
    """Add ``--db NAME`` to a bench's parser; see ``database_name``."""
    parser.add_argument("--db", default=None, metavar="NAME",
                        help=f"database to (re)create and keep; default: membank_bench_{stem}_<pid>_<random>, "
                             "dropped at the end, so that runs side by side never touch each other's")


def database_name(given: str | None, stem: str) -> str:
    """``given`` (kept), or a name unique to this run whose database is dropped when the process exits."""
    if given:
        return given
    name = f"membank_bench_{stem}_{os.getpid()}_{secrets.token_hex(3)}"
    atexit.register(drop_database, name)
    return name


def add_compare_argument(parser: argparse.ArgumentParser) -> None:
    """Add ``--compare-checkout PATH``: a second database migrated by another checkout's code (see ``checkout_database``)."""
    parser.add_argument("--compare-checkout", type=Path, default=None, metavar="PATH",
                        help="another checkout of membank with its own .venv (e.g. a git worktree of the code before "
                             "a change): a second database is migrated with its code and measured in the same run, "
                             "interleaved")


def checkout_database(checkout: Path, stem: str) -> str:
    """A fresh database next to this run's, migrated by ``checkout``'s code (its .venv/bin/python); dropped at exit."""
    import subprocess

    name = database_name(None, f"{stem}_base")
    base = database.database_url()
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(sql.SQL("drop database if exists {} with (force)").format(sql.Identifier(name)))
        conn.execute(sql.SQL("create database {}").format(sql.Identifier(name)))
    url = make_conninfo(base, dbname=name)
    python = checkout.resolve() / ".venv" / "bin" / "python"
    subprocess.run([str(python), "-c", "import sys; from membank import migrate; migrate.upgrade(sys.argv[1])", url],
                   check=True, cwd=checkout)
    return url


def stat_statements(conn: psycopg.Connection) -> bool:
    """True when pg_stat_statements is loaded (shared_preload_libraries); creates the extension in this database."""
    loaded = "pg_stat_statements" in conn.execute("show shared_preload_libraries").fetchone()[0]
    if loaded:
        conn.execute("create extension if not exists pg_stat_statements")
    return loaded
