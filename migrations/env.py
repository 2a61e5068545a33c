"""alembic environment for membank.

Runs the incremental revisions in versions/ and, when the database ends at
head, re-applies the idempotent files of db/ (functions, procedures,
privileges) in the same transaction. The files are sent with the driver
directly and parameters off, so `%` and `:name` inside function bodies reach
the server untouched.
"""

from __future__ import annotations

import os

from alembic import context
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine, pool

from membank import database, paths, settings

config = context.config


def _url() -> str:
    url = (config.attributes.get("url") or os.environ.get(settings.ENV_DATABASE_URL)
           or config.get_main_option("sqlalchemy.url"))
    return settings.sqlalchemy_url(url or database.database_url())


def _apply_db_files(connection) -> None:
    if paths.is_citus(connection):
        # CREATE OR REPLACE TRIGGER on a distributed table (membank db distribute);
        # for this transaction's DDL only. README, "Scale out on Citus", says why.
        connection.exec_driver_sql("set local citus.enable_unsafe_triggers to on")
    for path in paths.db_files():
        paths.run_sql(connection, path.read_text())


def run_migrations_online() -> None:
    engine = create_engine(_url(), poolclass=pool.NullPool)
    heads = set(ScriptDirectory.from_config(config).get_heads())
    with engine.connect() as connection:
        context.configure(connection=connection, transaction_per_migration=False,
                          version_table=config.get_main_option("version_table", "membank_alembic_version"))
        with context.begin_transaction():
            context.run_migrations()
            if set(context.get_context().get_current_heads()) == heads:
                _apply_db_files(connection)
    engine.dispose()


if context.is_offline_mode():
    raise SystemExit("membank migrations run online only: the db/ files are applied against the live database")
run_migrations_online()
