"""membank on a real Citus cluster (coordinator + 2 workers, tests/citus_cluster.py): `pytest -m citus`.

What runs on Citus today: `membank db upgrade` against the coordinator installs
membank and Citus carries the extensions, schemas, roles and functions to
every worker. The tables are not distributed yet (they stay on the
coordinator); that needs the schema port.
"""

from __future__ import annotations

import psycopg
import pytest

from membank import migrate

pytestmark = pytest.mark.citus

EXTENSIONS = ("btree_gin", "unaccent", "vector")
SCHEMAS = ("membank", "membank_extensions", "membank_private")
ROLES = ("membank_admin", "membank_reader", "membank_worker", "membank_writer")


def on_workers(conn: psycopg.Connection, command: str) -> list[tuple[int, bool, str]]:
    """``run_command_on_workers(command)``: (worker port, success, result) for each worker, by port."""
    return conn.execute("select nodeport, success, result from run_command_on_workers(%s) order by nodeport",
                        (command,)).fetchall()


def workers(db) -> list:
    """The cluster's workers in port order (the order of ``on_workers``)."""
    return sorted(db.cluster.workers, key=lambda w: w.port)


def catalog_fingerprint(conn: psycopg.Connection) -> list[tuple]:
    """Every membank function's signature with its body's md5 and ACL, and Citus's distributed objects."""
    functions = conn.execute(
        "select p.oid::regprocedure::text, md5(p.prosrc), coalesce(p.proacl::text, '')"
        " from pg_proc as p join pg_namespace as n on n.oid = p.pronamespace"
        " where n.nspname like 'membank%' order by 1").fetchall()
    distributed = conn.execute(
        "select pg_identify_object_as_address(classid, objid, objsubid)::text from pg_dist_object"
        " order by 1").fetchall()
    return functions + distributed


def test_the_cluster_has_two_active_workers(citus_database):
    with citus_database.connect() as c:
        active = c.execute("select node_port from citus_get_active_worker_nodes() order by 1").fetchall()
        assert [p for (p,) in active] == [w.port for w in workers(citus_database)]
        coordinator = c.execute("select nodeport from pg_dist_node where groupid = 0").fetchone()
        assert coordinator == (citus_database.cluster.coordinator.port,)
        assert c.execute("select extversion from pg_extension where extname = 'citus'").fetchone() == ("14.0-1",)


def test_upgrade_on_the_coordinator_reaches_head(citus_database):
    migrate.upgrade(citus_database.url)
    assert migrate.current(citus_database.url) == migrate.head()
    with citus_database.connect() as c:
        # The API answers through the coordinator (the tables are still local to it in phase 1).
        name = c.execute("select (membank.create_memory(scope => '{\"user_id\":\"u1\"}',"
                         " fact => 'likes tea')).name").fetchone()[0]
        assert c.execute("select (membank.get_memory(name => %s)).fact", (name,)).fetchone() == ("likes tea",)


def test_extensions_schemas_roles_and_api_reach_every_worker(citus_database):
    migrate.upgrade(citus_database.url)
    with citus_database.connect() as c:
        extensions = on_workers(c, "select string_agg(e.extname || ' in ' || n.nspname, ', ' order by e.extname)"
                                   " from pg_extension as e join pg_namespace as n on n.oid = e.extnamespace"
                                   f" where e.extname in {EXTENSIONS}")
        expected = ", ".join(f"{e} in membank_extensions" for e in EXTENSIONS)
        assert extensions == [(w.port, True, expected) for w in workers(citus_database)]
        schemas = on_workers(c, "select string_agg(nspname, ',' order by nspname) from pg_namespace"
                                f" where nspname in {SCHEMAS}")
        assert {r for (_, ok, r) in schemas if ok} == {",".join(SCHEMAS)} and len(schemas) == 2
        roles = on_workers(c, f"select string_agg(rolname, ',' order by rolname) from pg_roles where rolname in {ROLES}")
        assert {r for (_, ok, r) in roles if ok} == {",".join(ROLES)} and len(roles) == 2
        # The functions whose arguments use pgvector's type (the revokes that broke) reach every worker.
        with_vectors = ("select string_agg(p.pronamespace::regnamespace::text || '.' || p.proname, ','"
                        " order by 1) from pg_proc as p where p.pronamespace::regnamespace::text in"
                        " ('membank', 'membank_private')"
                        " and 'membank_extensions.vector'::regtype = any(p.proargtypes::oid[])")
        names = c.execute(with_vectors).fetchone()[0]
        assert names and "membank_private." in names
        assert on_workers(c, with_vectors) == [(w.port, True, names) for w in workers(citus_database)]
        # ... and the API with its grants.
        create_memory = c.execute("select 'membank.create_memory'::regproc::regprocedure::text").fetchone()[0]
        probe = f"select has_function_privilege('membank_writer', '{create_memory}', 'execute')"
        assert c.execute(probe).fetchone() == (True,)
        assert on_workers(c, probe) == [(w.port, True, "t") for w in workers(citus_database)]


def test_upgrade_again_is_a_no_op(citus_database):
    migrate.upgrade(citus_database.url)
    with citus_database.connect() as c:
        before = catalog_fingerprint(c)
        workers_before = on_workers(c, "select count(*) from pg_proc as p join pg_namespace as n"
                                       " on n.oid = p.pronamespace where n.nspname like 'membank%'")
    migrate.upgrade(citus_database.url)
    assert migrate.current(citus_database.url) == migrate.head()
    with citus_database.connect() as c:
        assert catalog_fingerprint(c) == before
        assert on_workers(c, "select count(*) from pg_proc as p join pg_namespace as n"
                             " on n.oid = p.pronamespace where n.nspname like 'membank%'") == workers_before


def test_a_second_install_copies_the_cached_build(citus_cluster, monkeypatch, tmp_path):
    """The session built (or found) Citus in the cache; installing again, e.g. into a fresh venv, never builds."""
    import citus_cluster as cc

    def no_build(stage):
        raise AssertionError(f"rebuilt Citus into {stage}")

    monkeypatch.setattr(cc, "_build", no_build)
    stage = cc.install_citus(tmp_path)  # an empty pginstall, as in a fresh venv
    assert stage.name == cc.build_key()
    assert (tmp_path / "lib" / "citus.so").is_file()
    assert (tmp_path / "share" / "extension" / "citus.control").is_file()
    assert cc.install_citus() == stage  # the session's own pginstall: already there


TRIGGER_ON_DISTRIBUTED_TABLE = """
set local citus.enable_unsafe_triggers to on;
create function {t}_stamp() returns trigger language plpgsql as $$
begin
    new.v := 'stamped; by the trigger';  -- a ';' inside the body must not split it
    return new;
end
$$;
create trigger {t}_stamp before insert on {t} for each row execute function {t}_stamp();
"""


def test_sql_text_goes_statement_by_statement_to_a_coordinator(citus_database):
    """Citus forwards CREATE TRIGGER on a distributed table to its shards with the whole query string."""
    from sqlalchemy import create_engine

    from membank import paths, settings

    with citus_database.connect() as c:
        for table in ("whole", "split"):
            c.execute(f"create table {table} (k int primary key, v text)")
            c.execute("select create_distributed_table(%s, 'k')", (table,))
    engine = create_engine(settings.sqlalchemy_url(citus_database.url))
    try:
        with engine.begin() as connection:  # as one string, the way a plain server gets it: refused
            with pytest.raises(Exception, match="cannot insert multiple commands into a prepared statement"):
                connection.exec_driver_sql(TRIGGER_ON_DISTRIBUTED_TABLE.format(t="whole"),
                                           execution_options={"no_parameters": True})
        with engine.begin() as connection:
            paths.run_sql(connection, TRIGGER_ON_DISTRIBUTED_TABLE.format(t="split"))
    finally:
        engine.dispose()
    with citus_database.connect() as c:
        c.execute("insert into split select g, 'x' from generate_series(1, 8) as g")
        assert c.execute("select count(distinct nodeport) from citus_shards where table_name = 'split'::regclass"
                         ).fetchone() == (2,)
        assert c.execute("select array_agg(distinct v) from split").fetchone() == (["stamped; by the trigger"],)
