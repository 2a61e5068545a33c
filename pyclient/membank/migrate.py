"""Schema migrations through alembic: upgrade, downgrade, current."""

from __future__ import annotations

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine, pool

from membank import paths, settings


def alembic_config(url: str) -> Config:
    """Return the alembic Config of membank's migrations, bound to ``url`` (a libpq URL or conninfo).

    Callers choose the database (``membank.database.database_url()``), so
    that this module does not depend on the embedded server, which migrates
    through it.
    """
    root = paths.sql_root()
    cfg = Config(str(root / "alembic.ini"))
    cfg.set_main_option("script_location", str(root / "migrations"))
    cfg.attributes["url"] = url
    return cfg


def upgrade(url: str, revision: str = "head") -> None:
    """Upgrade the database to ``revision`` (default head) and re-apply the db/ files at head."""
    command.upgrade(alembic_config(url), revision)


def downgrade(revision: str, url: str) -> None:
    """Downgrade the database to ``revision`` (``base`` removes membank entirely)."""
    command.downgrade(alembic_config(url), revision)


def current(url: str) -> str | None:
    """Return the database's current revision id, or None before the first upgrade."""
    cfg = alembic_config(url)
    engine = create_engine(settings.sqlalchemy_url(cfg.attributes["url"]), poolclass=pool.NullPool)
    try:
        with engine.connect() as conn:
            context = MigrationContext.configure(
                conn, opts={"version_table": cfg.get_main_option("version_table")})
            return context.get_current_revision()
    finally:
        engine.dispose()


def head() -> str:
    """Return the newest revision id that this version of membank ships."""
    return ScriptDirectory.from_config(alembic_config("postgresql://unused")).get_current_head()
