"""A fresh, migrated database for a benchmark run on the configured server."""

from __future__ import annotations

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
