"""Schema migrations through alembic: upgrade, downgrade, current, and the SQL script of an upgrade."""

from __future__ import annotations

from contextlib import contextmanager

from alembic import command
from alembic.config import Config
from alembic.util import CommandError
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine, pool
from sqlalchemy.exc import DBAPIError

from membank import paths, settings
from membank.errors import SetupError


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
    """Upgrade the database to ``revision`` (default head) and re-apply the db/ files at head.

    Raises membank.errors.SetupError, with nothing changed, when ``revision`` or the database's recorded
    revision is not one this version ships (a newer membank migrated the database).
    """
    with _owner_only(), _known_revisions(url, revision):
        command.upgrade(alembic_config(url), revision)


def downgrade(revision: str, url: str) -> None:
    """Downgrade the database to ``revision`` (``base`` removes membank entirely).

    Raises membank.errors.SetupError, as upgrade does, for a revision this version does not ship.
    """
    with _owner_only(), _known_revisions(url, revision):
        command.downgrade(alembic_config(url), revision)


@contextmanager
def _owner_only():
    """Turn a 42501 from the version table or the DDL into a SetupError that says which role migrates.

    An application login (membank_admin's too) may call the API but not read
    ``membank_alembic_version`` nor change the schema; without this, ``membank
    db upgrade``, ``current``, ``distribute`` and ``convert`` run as such a
    login ended in a SQLAlchemy traceback.
    """
    try:
        yield
    except DBAPIError as err:
        if getattr(err.orig, "sqlstate", None) != "42501":
            raise
        diag = getattr(err.orig, "diag", None)
        reason = (diag.message_primary if diag is not None else None) or str(err.orig).splitlines()[0]
        raise SetupError(
            f"this login may not read or migrate membank's schema ({reason}); nothing was changed",
            hint="run membank db upgrade, current, distribute and convert as the role that installed membank "
                 "(the database's owner) or a superuser; the membank_* roles only call the API") from None


@contextmanager
def _known_revisions(url: str, revision: str):
    """Turn alembic's "Can't locate revision" into a SetupError naming the revision and what to do."""
    try:
        yield
    except CommandError as err:
        if "Can't locate revision" not in str(err):
            raise
        recorded = current(url)
        shipped = [s.revision for s in ScriptDirectory.from_config(alembic_config(url)).walk_revisions()]
        if recorded is not None and recorded not in shipped:
            raise SetupError(
                f"the database is at revision {recorded}, which this membank does not ship (its newest is "
                f"{head()}): a newer membank migrated it; nothing was changed",
                hint="run the membank that migrated it (or a newer one), or restore the database from before") from None
        raise SetupError(f"revision {revision!r} is not one this membank ships ({shipped[-1]} to {head()})",
                         hint="see `membank db current`; give a revision id such as "
                              f"{head()}, 'head' or 'base'") from None


def sql_script(from_revision: str | None = None, to_revision: str = "head") -> str:
    """Return the psql script that upgrades a database from ``from_revision`` (None: an empty one) to ``to_revision``.

    The script is what ``upgrade`` runs (alembic's offline mode over the same migration files, then the db/ files
    when it ends at head), for ``psql -v ON_ERROR_STOP=1 -1 -f``: it records each revision in the version table, so
    ``upgrade`` or a later script continues from it, and its first statement refuses to run outside one transaction
    (25P01) or on a database at another revision than ``from_revision`` (55000). No database is read.

    Raises membank.errors.SetupError naming the revision when either is not one this membank ships, or when
    ``to_revision`` is older than ``from_revision`` (the script only upgrades).
    """
    import io

    cfg = alembic_config("postgresql://unused")
    script = ScriptDirectory.from_config(cfg)
    start = None if from_revision in (None, "base") else _shipped(script, from_revision, "--from")
    end = _shipped(script, to_revision, "--to")
    if start is not None and start != end and start not in {r.revision for r in script.iterate_revisions(end, "base")}:
        raise SetupError(f"--to {to_revision} is older than --from {from_revision}: the script only upgrades",
                         hint="give a --to at or after --from (default head); `membank db downgrade` goes back")
    cfg.output_buffer = io.StringIO()
    command.upgrade(cfg, f"{start}:{end}" if start else end, sql=True)
    header = (f"-- membank {_package_version()}: schema upgrade from revision {start or 'base (empty database)'} "
              f"to {end}.\n-- Apply in one transaction: psql -v ON_ERROR_STOP=1 -1 -f membank.sql\n\n")
    return header + cfg.output_buffer.getvalue()


def _shipped(script: ScriptDirectory, revision: str, option: str) -> str:
    """The id of ``revision`` (an id, 'head'), or SetupError naming it and ``option``."""
    from alembic.util import CommandError as AlembicError

    try:
        found = script.get_revision(revision)
    except AlembicError:
        found = None
    if found is None:
        raise SetupError(f"{option} {revision!r} is not a revision this membank ships ({head()} is the newest)",
                         hint=f"see `membank db current`; give a revision id such as {head()}, or 'head'")
    return found.revision


def _package_version() -> str:
    from membank import package_version

    return package_version()


def current(url: str) -> str | None:
    """Return the database's current revision id, or None before the first upgrade."""
    cfg = alembic_config(url)
    engine = create_engine(settings.sqlalchemy_url(cfg.attributes["url"]), poolclass=pool.NullPool)
    try:
        with _owner_only(), engine.connect() as conn:
            context = MigrationContext.configure(
                conn, opts={"version_table": cfg.get_main_option("version_table")})
            return context.get_current_revision()
    finally:
        engine.dispose()


def head() -> str:
    """Return the newest revision id that this version of membank ships."""
    return ScriptDirectory.from_config(alembic_config("postgresql://unused")).get_current_head()
