"""Where membank's SQL and migrations are, installed or in a checkout."""

from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent


def sql_root() -> Path:
    """Return the folder holding ``db/``, ``migrations/`` and ``alembic.ini``.

    A wheel carries them in ``membank/_sql``; an editable install or a source
    checkout reads them from the repository root. Raises FileNotFoundError
    when neither exists (a broken install).
    """
    for root in (_PACKAGE / "_sql", _PACKAGE.parent.parent):
        if (root / "alembic.ini").is_file() and (root / "db").is_dir():
            return root
    raise FileNotFoundError(f"membank SQL files not found next to {_PACKAGE}; reinstall membank")


def db_files() -> list[Path]:
    """Return the idempotent SQL files in load order.

    Functions (numbered), then procedures (numbered), then privileges last so
    that grants see every object.
    """
    db = sql_root() / "db"
    files = sorted((db / "functions").glob("*.sql")) + sorted((db / "procedures").glob("*.sql"))
    return files + [db / "privileges.sql"]


def run_sql(connection, text: str) -> None:
    """Execute SQL text on a SQLAlchemy connection with parameters off.

    The driver then sends it as is, so ``%`` and ``:name`` inside function
    bodies are not taken for placeholders. On a Citus coordinator the text
    goes one statement at a time: Citus forwards some DDL (``CREATE TRIGGER``
    on a distributed table) to the shards with the whole query string, which
    fails when that string holds several commands.
    """
    if not is_citus(connection):
        connection.exec_driver_sql(text, execution_options={"no_parameters": True})
        return
    for statement in split_statements(text):
        connection.exec_driver_sql(statement, execution_options={"no_parameters": True})


def is_citus(connection) -> bool:
    """Whether the database has the citus extension (remembered per DBAPI connection)."""
    info = connection.info
    if "membank_citus" not in info:
        found = connection.exec_driver_sql("select 1 from pg_catalog.pg_extension where extname = 'citus'")
        info["membank_citus"] = found.first() is not None
    return info["membank_citus"]


def split_statements(text: str) -> list[str]:
    """The statements of SQL text, comment-only pieces dropped (sqlparse knows dollar quoting)."""
    import sqlparse

    return [s for s in sqlparse.split(text) if sqlparse.format(s, strip_comments=True).strip()]


def run_sql_file(connection, revision_file: str, direction: str) -> None:
    """Run ``<revision>.<direction>.sql`` that lies beside an alembic revision file.

    In alembic's offline mode (``membank db sql``) the file's text is written to the script as it is.
    """
    from alembic import op

    path = Path(revision_file).with_suffix(f".{direction}.sql")
    migration = op.get_context()
    if migration.as_sql:
        migration.impl.static_output(path.read_text().rstrip())
        return
    run_sql(connection, path.read_text())
