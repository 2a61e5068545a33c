"""alembic environment for membank.

Runs the incremental revisions in versions/ and, when the database ends at
head, re-applies the idempotent files of db/ (functions, procedures,
privileges) in the same transaction. The files are sent with the driver
directly and parameters off, so `%` and `:name` inside function bodies reach
the server untouched.

Offline (``membank db sql``, ``alembic upgrade --sql``) the same revisions and
db/ files are written out as one psql script instead: no BEGIN/COMMIT of its
own (it is applied with ``psql -1``, in one transaction, and refuses to run
outside one), a guard that the database is at the script's starting revision,
the revisions' SQL files as they are, the version table's rows, and the db/
files when the script ends at head.
"""

from __future__ import annotations

import os

from alembic import context
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine, pool

from membank import database, paths, settings

config = context.config
VERSION_TABLE = config.get_main_option("version_table", "membank_alembic_version")


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


# membank's roles are cluster-wide objects: a database whose migration found them already on the coordinator (made
# for another database) never created them, so Citus never recorded them in this database and a worker that lacks
# them (a server added to the cluster after they were made) failed the first GRANT sent to it ("role membank_reader
# does not exist"). Before the migrations, each role and membership the coordinator has is made on every worker that
# lacks it, with DDL propagation off there (the command runs on the worker). A worker added after `membank db
# upgrade` needs nothing: the GRANTs made the roles distributed objects of the database, which citus_add_node
# creates on the new node (docs/scale-out.md, "Tenant roles on every node").
ENSURE_ROLES_ON_WORKERS = r"""
select w.nodename, w.nodeport, w.success, w.result
from pg_catalog.run_command_on_workers(pg_catalog.format($cmd$
do $roles$
declare
    _role text;
    _pair text[];
begin
    perform pg_catalog.set_config('citus.enable_ddl_propagation', 'off', true);
    foreach _role in array %L::text[] loop
        if not exists (select from pg_catalog.pg_roles where rolname = _role) then
            execute pg_catalog.format('create role %%I nologin', _role);
        end if;
    end loop;
    foreach _pair slice 1 in array coalesce(nullif(%L::text[], '{}'), '{{"",""}}') loop
        continue when _pair[1] = '';
        if not exists (select from pg_catalog.pg_auth_members as m
                       where m.roleid = pg_catalog.to_regrole(pg_catalog.quote_ident(_pair[1]))
                         and m.member = pg_catalog.to_regrole(pg_catalog.quote_ident(_pair[2]))) then
            execute pg_catalog.format('grant %%I to %%I', _pair[1], _pair[2]);
        end if;
    end loop;
end
$roles$
$cmd$,
(select coalesce(pg_catalog.array_agg(r.rolname::text), '{}') from pg_catalog.pg_roles as r
 where r.rolname in ('membank_reader', 'membank_writer', 'membank_worker', 'membank_admin')),
(select coalesce(pg_catalog.array_agg(array[g.rolname::text, u.rolname::text]), '{}')
 from pg_catalog.pg_auth_members as m
 join pg_catalog.pg_roles as g on g.oid = m.roleid
 join pg_catalog.pg_roles as u on u.oid = m.member
 where g.rolname in ('membank_reader', 'membank_writer', 'membank_worker', 'membank_admin')
   and u.rolname in ('membank_reader', 'membank_writer', 'membank_worker', 'membank_admin')))) as w
"""


def _ensure_roles_on_workers(connection) -> None:
    """On a Citus coordinator: membank's roles and their memberships on every worker (see ENSURE_ROLES_ON_WORKERS)."""
    if not paths.is_citus(connection):
        return
    failed = [row for row in connection.exec_driver_sql(ENSURE_ROLES_ON_WORKERS,
                                                           execution_options={"no_parameters": True}).fetchall() if not row[2]]
    if failed:
        raise RuntimeError("membank's roles could not be made on worker(s) "
                           + "; ".join(f"{host}:{port}: {result}" for host, port, _, result in failed))


def run_migrations_online() -> None:
    engine = create_engine(_url(), poolclass=pool.NullPool)
    heads = set(ScriptDirectory.from_config(config).get_heads())
    with engine.connect() as connection:
        context.configure(connection=connection, transaction_per_migration=False,
                          version_table=VERSION_TABLE)
        with context.begin_transaction():
            _ensure_roles_on_workers(connection)
            context.run_migrations()
            if set(context.get_context().get_current_heads()) == heads:
                _apply_db_files(connection)
    engine.dispose()


# The script's first statement: refuse to run outside one transaction (a failed statement would leave a
# half-installed schema) or on a database at another revision (its DDL would meet objects it does not expect).
# Autocommit runs each statement in a transaction of its own, which starts with the statement; under psql -1 (or any
# BEGIN) the transaction began with an earlier statement.
GUARD = """\
do $guard$
declare
    _current text;
begin
    if pg_catalog.transaction_timestamp() = pg_catalog.statement_timestamp() then
        raise exception 'this membank script must run in one transaction'
            using errcode = 'no_active_sql_transaction',
                  hint = 'apply it with psql -v ON_ERROR_STOP=1 -1 -f FILE (or inside BEGIN ... COMMIT)';
    end if;
    if pg_catalog.to_regclass('{table}') is not null then
        execute 'select max(version_num) from {table}' into _current;
    end if;
    if _current is distinct from {expected} then
        raise exception 'the database is at membank revision %, this script upgrades from revision %',
            coalesce(_current, 'base (not installed)'), {shown}
            using errcode = 'object_not_in_prerequisite_state',
                  hint = pg_catalog.format('generate the script from the database''s revision: membank db sql%s',
                                           coalesce(' --from ' || _current, ''));
    end if;
end
$guard$;"""

# Online, env.py sets this for the db/ files' transaction on a Citus coordinator; the script does it when it finds
# the citus extension.
CITUS = """\
do $citus$
begin
    if exists (select from pg_catalog.pg_extension where extname = 'citus') then
        perform pg_catalog.set_config('citus.enable_unsafe_triggers', 'on', true);
    end if;
end
$citus$;"""


def _literal(value: str | None) -> str:
    return "null" if value is None else "'" + value.replace("'", "''") + "'"


def run_migrations_offline() -> None:
    script = ScriptDirectory.from_config(config)
    start = context.get_starting_revision_argument()
    start = script.get_revision(start).revision if start not in (None, "base") else None
    destination = script.get_revision(context.get_revision_argument())
    context.configure(dialect_name="postgresql", literal_binds=True, transactional_ddl=False,
                      transaction_per_migration=False, version_table=VERSION_TABLE)
    impl = context.get_context().impl
    impl.static_output(GUARD.format(table=VERSION_TABLE, expected=_literal(start),
                                    shown=_literal(start or "base (not installed)")))
    with context.begin_transaction():
        context.run_migrations()
    if destination is not None and destination.revision in script.get_heads():
        impl.static_output("-- The idempotent db/ files, re-applied at head.")
        impl.static_output(CITUS)
        for path in paths.db_files():
            impl.static_output(f"-- {path.relative_to(paths.sql_root())}\n{path.read_text().rstrip()}")


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
