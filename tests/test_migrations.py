"""Migrations: upgrade from empty, downgrade to base, upgrade again, no-op second upgrade."""

import json
import os
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from membank import MemoryBank, migrate

ROOT = Path(__file__).resolve().parent.parent


def membank_objects(url: str) -> dict[str, int]:
    with psycopg.connect(url) as conn:
        return dict(conn.execute("""
            select 'schemas', count(*) from pg_namespace where nspname like 'membank%%'
            union all
            select 'functions', count(*) from pg_proc p join pg_namespace n on n.oid = p.pronamespace
            where n.nspname like 'membank%%'
            union all
            select 'version_table', count(*) from pg_class where relname = 'membank_alembic_version'
        """).fetchall())


def schema_dump(url: str) -> str:
    with psycopg.connect(url) as conn:
        rows = conn.execute("""
            select n.nspname || '.' || p.proname || '(' || pg_get_function_identity_arguments(p.oid) || ') '
                   || md5(pg_get_functiondef(p.oid))
            from pg_proc p join pg_namespace n on n.oid = p.pronamespace
            where n.nspname in ('membank', 'membank_private')
            union all
            select c.oid::regclass::text || ' '
                   || md5(string_agg(a.attname || ':' || format_type(a.atttypid, a.atttypmod), ',' order by a.attnum))
            from pg_class c join pg_namespace n on n.oid = c.relnamespace join pg_attribute a on a.attrelid = c.oid
            where n.nspname in ('membank', 'membank_private') and a.attnum > 0 group by c.oid
            order by 1
        """).fetchall()
    return "\n".join(r[0] for r in rows)


def test_upgrade_downgrade_upgrade(empty_db_url):
    assert migrate.current(empty_db_url) is None
    assert membank_objects(empty_db_url) == {"schemas": 0, "functions": 0, "version_table": 0}
    migrate.upgrade(empty_db_url)
    assert migrate.current(empty_db_url) == migrate.head()
    objects = membank_objects(empty_db_url)
    assert objects["schemas"] == 3 and objects["functions"] > 20  # membank, membank_private, membank_extensions
    first = schema_dump(empty_db_url)
    with MemoryBank(empty_db_url, max_size=1) as bank:
        bank.create_memory({"u": "1"}, "survives a second upgrade")
    migrate.upgrade(empty_db_url)  # second upgrade: nothing changes
    assert schema_dump(empty_db_url) == first
    with MemoryBank(empty_db_url, max_size=1) as bank:
        assert [m.fact for m in bank.list_memories({"u": "1"}).memories] == ["survives a second upgrade"]
    migrate.downgrade("base", empty_db_url)
    assert migrate.current(empty_db_url) is None
    assert membank_objects(empty_db_url)["schemas"] == 0
    assert membank_objects(empty_db_url)["functions"] == 0
    migrate.upgrade(empty_db_url)
    assert schema_dump(empty_db_url) == first


def test_plain_alembic_cli_with_alembic_ini(empty_db_url):
    env = {**os.environ, "MEMBANK_DATABASE_URL": empty_db_url}
    alembic = [sys.executable, "-m", "alembic", "-c", str(ROOT / "alembic.ini")]
    done = subprocess.run([*alembic, "upgrade", "head"], env=env, capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert migrate.current(empty_db_url) == migrate.head()
    with MemoryBank(empty_db_url, max_size=1) as bank:
        assert bank.create_memory({"u": "1"}, "via alembic").fact == "via alembic"
    done = subprocess.run([*alembic, "current"], env=env, capture_output=True, text=True, cwd=ROOT)
    assert migrate.head() in done.stdout


def test_revision_chain_runs_in_file_order():
    """A DBA reading migrations/versions/ sees the order alembic applies: ids are the file prefixes, one head, no gaps."""
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    script = ScriptDirectory.from_config(Config(str(ROOT / "alembic.ini")))
    chain = [rev.revision for rev in reversed(list(script.walk_revisions("base", "heads")))]
    files = sorted(p.name[:4] for p in (ROOT / "migrations" / "versions").glob("[0-9][0-9][0-9][0-9]_*.py"))
    assert script.get_heads() == [files[-1]]
    assert chain == files
    assert files == [f"{n:04d}" for n in range(1, len(files) + 1)]
    for rev in script.walk_revisions("base", "heads"):
        module_file = Path(rev.path).name
        assert module_file.startswith(rev.revision + "_"), module_file


def test_0013_keeps_bound_roles_restricted_and_app_state(empty_db_url):
    """Bindings made by name before 0013 move to the role's OID (a dropped role's rows go); app: state survives."""
    import uuid

    migrate.upgrade(empty_db_url, "0012")
    live, gone = f"membank_mig_{uuid.uuid4().hex[:8]}", f"membank_mig_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(empty_db_url, autocommit=True) as conn:
        conn.execute(f'create role "{live}"')
        try:
            conn.execute("insert into membank_private.scope_bindings (role_name, scope) values (%s, '{\"u\": \"1\"}'),"
                         " (%s, '{\"u\": \"2\"}')", (live, gone))
            conn.execute("insert into membank_private.app_states (app_name, state) values ('shop', '{\"banner\": 1}')")
            migrate.upgrade(empty_db_url)
            rows = conn.execute("select r.rolname, b.scope from membank_private.scope_bindings as b"
                                " join pg_roles as r on r.oid = b.role_oid").fetchall()
            assert rows == [(live, {"u": "1"})]
            assert conn.execute("select count(*) from membank_private.bound_roles").fetchone()[0] == 1
            assert conn.execute("select membank_private.app_state('shop')").fetchone()[0] == {"banner": 1}
            # Its last binding removed, the migrated role stays restricted (to nothing).
            conn.execute("select membank.unbind_role_from_scope(%s, '{\"u\": \"1\"}')", (live,))
            assert conn.execute("select scope from membank.list_scope_bindings(%s)", (live,)).fetchall() == [(None,)]
            migrate.downgrade("0012", empty_db_url)
            assert conn.execute("select state from membank_private.app_states").fetchall() == [({"banner": 1},)]
        finally:
            migrate.downgrade("base", empty_db_url)
            conn.execute(f'drop role "{live}"')


def test_0016_keeps_rows_and_keys_every_row_by_scope_id(empty_db_url):
    """0016 turns the generated scope_id into a plain, checked column and keys every row by it, keeping the rows;
    its downgrade brings back the generated column with the same values."""
    migrate.upgrade(empty_db_url, "0015")
    with psycopg.connect(empty_db_url, autocommit=True) as conn:
        try:
            name = conn.execute("insert into membank_private.memories (scope, fact) values ('{\"u\": \"1\"}', 'kept')"
                                " returning name").fetchone()[0]
            migrate.upgrade(empty_db_url)
            keys = dict(conn.execute("""
                select c.conrelid::regclass::text, pg_get_constraintdef(c.oid) from pg_constraint as c
                where c.conrelid in ('membank_private.memories'::regclass, 'membank_private.memory_revisions'::regclass)
                  and c.contype = 'p'""").fetchall())
            assert keys == {"membank_private.memories": "PRIMARY KEY (name, scope_id)",
                            "membank_private.memory_revisions": "PRIMARY KEY (memory_name, revision, scope_id)"}
            assert conn.execute("select attgenerated from pg_attribute where attrelid = 'membank_private.memories'"
                                "::regclass and attname = 'scope_id'").fetchone()[0] == ""
            with MemoryBank(empty_db_url, max_size=1) as bank:
                assert [m.fact for m in bank.list_memories({"u": "1"}).memories] == ["kept"]
                assert bank.get_memory(str(name)).fact == "kept"
            migrate.downgrade("0015", empty_db_url)
            assert conn.execute("select attgenerated from pg_attribute where attrelid = 'membank_private.memories'"
                                "::regclass and attname = 'scope_id'").fetchone()[0] == "s"
            assert conn.execute("select scope_id = md5('{\"u\": \"1\"}'::jsonb::text)::uuid, fact"
                                " from membank_private.memories").fetchall() == [(True, "kept")]
        finally:
            migrate.downgrade("base", empty_db_url)


def test_0021_names_each_restricted_role_and_keeps_it_restricted(empty_db_url):
    """0021 records each restricted role's name for the Citus workers (rows of roles dropped since go); a role bound
    before it stays bound to exactly its scope."""
    import uuid

    migrate.upgrade(empty_db_url, "0020")
    live, gone = f"membank_mig_{uuid.uuid4().hex[:8]}", f"membank_mig_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(empty_db_url, autocommit=True) as conn:
        conn.execute(f'create role "{live}"')
        conn.execute(f'create role "{gone}"')
        try:
            for role, user in ((live, "1"), (gone, "2")):
                oid = conn.execute("select oid from pg_roles where rolname = %s", (role,)).fetchone()[0]
                conn.execute("insert into membank_private.bound_roles (role_oid) values (%s)", (oid,))
                conn.execute("insert into membank_private.scope_bindings (role_oid, scope_id, scope)"
                             " values (%s, md5(%s::jsonb::text)::uuid, %s::jsonb)",
                             (oid, json.dumps({"u": user}), json.dumps({"u": user})))
            conn.execute(f'drop role "{gone}"')
            migrate.upgrade(empty_db_url)
            assert conn.execute("select role_name::text, worker_oids from membank_private.bound_roles").fetchall() \
                == [(live, {})]
            assert conn.execute("select role_name::text, scope from membank.list_scope_bindings()").fetchall() \
                == [(live, {"u": "1"})]
            conn.execute(f'grant membank_reader to "{live}"')
            conn.execute(f'set role "{live}"')
            assert conn.execute("select count(*) from membank.list_memories(scope => '{\"u\": \"1\"}')"
                                ).fetchone() == (0,)
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute("select * from membank.list_memories(scope => '{\"u\": \"2\"}')")
        finally:
            conn.execute("reset role")
            migrate.downgrade("base", empty_db_url)
            conn.execute(f'drop role "{live}"')
