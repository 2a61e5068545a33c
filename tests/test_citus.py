"""membank on a real Citus cluster (coordinator + 2 workers, tests/citus_cluster.py): `pytest -m citus`.

`membank db upgrade` against the coordinator installs membank and Citus
carries the extensions, schemas, roles and functions to every worker;
`membank db distribute` distributes the tables by scope_id. Here: the install,
distribution of an existing bank, routing of a call to its scope's worker,
rebalancing onto a third worker under writes, and a worker added after the
upgrade (its roles, and no call served until the upgrade has set its privileges).
"""

from __future__ import annotations

import json
import re

import psycopg
import pytest
from psycopg import sql
from psycopg.types.json import Jsonb

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
                        " order by p.pronamespace::regnamespace::text, p.proname) from pg_proc as p where p.pronamespace::regnamespace::text in"
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
    stage, built = cc.install_citus(tmp_path)  # an empty pginstall, as in a fresh venv
    assert stage.name == cc.build_key() and not built
    assert (tmp_path / "lib" / "citus.so").is_file()
    assert (tmp_path / "share" / "extension" / "citus.control").is_file()
    assert cc.install_citus() == (stage, False)  # the session's own pginstall: already there


def test_the_build_cache_is_outside_the_test_sandbox(sandbox):
    """The sandbox replaces HOME and XDG_CACHE_HOME for every session; the Citus build must outlive it."""
    import citus_cluster as cc

    cache = cc.cache_dir().resolve()
    assert not cache.is_relative_to(sandbox.resolve()), f"the Citus build cache {cache} is inside the sandbox"


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


# -- phase 2: the tables distributed by scope_id --------------------------------------------------------------------

def scope_on(c: psycopg.Connection, port: int, skip: tuple[str, ...] = ()) -> dict:
    """A scope {"user_id": "uN"} whose shard of memories lies on the worker at ``port``."""
    for n in range(1, 200):
        user = f"u{n}"
        if user in skip:
            continue
        node = c.execute("select s.nodeport from citus_shards as s"
                         " where s.table_name = 'membank_private.memories'::regclass and s.shardid ="
                         " get_shard_id_for_distribution_column('membank_private.memories',"
                         " md5(jsonb_build_object('user_id', %s::text)::text)::uuid)", (user,)).fetchone()[0]
        if node == port:
            return {"user_id": user}
    raise AssertionError(f"no scope on worker {port}")


def distributed(db) -> tuple[dict, dict]:
    """Upgrade and distribute the test's database; two scopes whose shards are on the two different workers."""
    from membank import distribute

    migrate.upgrade(db.url)
    distribute.distribute(db.url)
    w1, w2 = workers(db)
    with db.connect() as c:
        a = scope_on(c, w1.port)
        return a, scope_on(c, w2.port, skip=(a["user_id"],))


class RemoteCommands:
    """The shard commands the coordinator sends (citus.log_remote_commands), by worker port."""

    def __init__(self, conn: psycopg.Connection):
        self.conn, self.ports, self.commands = conn, [], []
        conn.add_notice_handler(self._notice)

    def _notice(self, diag) -> None:
        found = re.search(r"@[^:\s]+:(\d+)", diag.message_detail or "")
        if (diag.message_primary or "").startswith("issuing") and found:
            self.ports.append(int(found.group(1)))
            self.commands.append(f"{found.group(1)}: {diag.message_primary[:300]}")

    def during(self, query: str, params=()) -> tuple[list, set[int]]:
        """Run query with remote commands logged: (its rows, the worker ports it sent commands to)."""
        self.ports, self.commands = [], []
        self.conn.execute("set citus.log_remote_commands to on")
        try:
            rows = self.conn.execute(query, params).fetchall()
        finally:
            self.conn.execute("reset citus.log_remote_commands")
        return rows, set(self.ports)


def test_distribute_keeps_an_existing_bank_and_puts_two_scopes_on_two_workers(citus_database):
    """A bank filled while single-node (the tables local to the coordinator) keeps every memory, revision and vector."""
    from membank import distribute

    db = citus_database
    migrate.upgrade(db.url)
    with db.connect() as c:
        names = {}
        for n in range(1, 9):
            scope = json.dumps({"user_id": f"u{n}"})
            names[n] = c.execute("select (membank.create_memory(scope => %s, fact => %s)).name",
                                 (scope, f"u{n} drinks tea")).fetchone()[0]
            c.execute("select membank.update_memory(name => %s, fact => %s)", (names[n], f"u{n} drinks coffee"))
        c.execute("select membank.configure_embedding(model_id => 'test/m', dimension => 3)")
        c.execute("select membank.store_embeddings(model_id => 'test/m', dimension => 3, memory_names => %s,"
                  " fact_md5s => array[md5('u1 drinks coffee')]::text[], embeddings => array['[1,0,0]']::text[])",
                  ([str(names[1])],))
        before = c.execute("select (select count(*) from membank_private.memories),"
                           " (select count(*) from membank_private.memory_revisions),"
                           " (select embedding::text from membank_private.memory_embeddings)").fetchone()
    assert before == (8, 16, "[1,0,0]")
    # The operator's command: exit 0 and a JSON report of what it did.
    from click.testing import CliRunner

    from membank.cli import main

    ran = CliRunner().invoke(main, ["db", "distribute"], env={"MEMBANK_DATABASE_URL": db.url})
    assert ran.exit_code == 0, ran.output
    done = json.loads(ran.output)
    assert set(done["distributed"]) == set(distribute.DISTRIBUTED) and set(done["reference"]) == set(distribute.REFERENCE)
    assert done["warnings"] == []  # every node commits synchronously (citus_cluster.NODE_SETTINGS)
    assert distribute.distribute(db.url).already == list(distribute.REFERENCE + distribute.DISTRIBUTED)  # idempotent
    # Nodes whose commits are asynchronous are named: a shard move would lose writes acknowledged there
    # (ALTER DATABASE on the coordinator: Citus sets it on the workers' databases too).
    ports = sorted(w.port for w in db.cluster.workers)  # named by host, then port
    with db.connect() as c:
        c.execute(sql.SQL("alter database {} set synchronous_commit = off").format(sql.Identifier(db.name)))
    try:
        again = CliRunner().invoke(main, ["db", "distribute"], env={"MEMBANK_DATABASE_URL": db.url})
        tail = (": a shard move loses writes acknowledged there just before it switches; set it to on"
                " (ALTER SYSTEM or ALTER DATABASE) before rebalancing")
        assert again.exit_code == 0 and json.loads(again.stdout)["warnings"] == [
            *[f"synchronous_commit is off on 127.0.0.1:{port}{tail}" for port in ports],
            f"synchronous_commit is off on the coordinator{tail}"]
        assert again.stderr.startswith("warning: synchronous_commit is off on 127.0.0.1:")
    finally:
        with db.connect() as c:
            c.execute(sql.SQL("alter database {} reset synchronous_commit").format(sql.Identifier(db.name)))
    with db.connect() as c:
        kinds = dict(c.execute("select logicalrelid::regclass::text, partmethod::text || ':' || coalesce("
                               "column_to_column_name(logicalrelid, partkey), '') from pg_dist_partition"
                               " where logicalrelid::regclass::text like 'membank_private.%'").fetchall())
        assert kinds["membank_private.memories"] == "h:scope_id" and kinds["membank_private.events"] == "h:scope_id"
        assert kinds["membank_private.embedding_config"] == "n:"
        assert c.execute("select count(distinct colocationid) from pg_dist_partition where partmethod = 'h'"
                         " and logicalrelid::regclass::text like 'membank_private.%'").fetchone() == (1,)
        after = c.execute("select (select count(*) from membank_private.memories),"
                          " (select count(*) from membank_private.memory_revisions),"
                          " (select embedding::text from membank_private.memory_embeddings)").fetchone()
        assert after == before
        # The rows live in the workers' shards now, and the scopes are spread over both workers.
        per_worker = on_workers(c, "select count(*) from pg_class as t join pg_namespace as n on n.oid ="
                                   " t.relnamespace where n.nspname = 'membank_private'"
                                   " and t.relname like 'memories\\_1%' and t.relkind = 'r'")
        assert [ok for (_, ok, _) in per_worker] == [True, True] and all(int(r) > 0 for (_, _, r) in per_worker)
        scope_ids = [r[0] for r in c.execute("select distinct scope_id from membank_private.memories").fetchall()]
        ports = c.execute("select count(distinct s.nodeport) from unnest(%s::uuid[]) as u (scope_id)"
                          " join citus_shards as s on s.shardid = get_shard_id_for_distribution_column("
                          "'membank_private.memories', u.scope_id) and s.table_name ="
                          " 'membank_private.memories'::regclass", (scope_ids,)).fetchone()
        assert len(scope_ids) == 8 and ports == (2,)
        assert c.execute("select (membank.get_memory(name => %s, scope => %s)).fact",
                         (names[3], json.dumps({"user_id": "u3"}))).fetchone() == ("u3 drinks coffee",)
        assert [r[0] for r in c.execute("select revision from membank.list_revisions(name => %s)",
                                        (names[3],)).fetchall()] == [1, 2]


def test_memories_api_on_the_cluster_and_scopes_stay_apart(citus_database):
    a, b = distributed(citus_database)
    with citus_database.connect() as c:
        sa, sb = json.dumps(a), json.dumps(b)
        m = c.execute("select (membank.create_memory(scope => %s, fact => 'likes tea', topics => '{USER_PREFERENCES}'))"
                      ".name", (sa,)).fetchone()[0]
        c.execute("select membank.create_memory(scope => %s, fact => 'likes rain')", (sb,))
        assert c.execute("select (membank.get_memory(name => %s, scope => %s)).fact", (m, sa)).fetchone() == (
            "likes tea",)
        assert c.execute("select (membank.get_memory(name => %s)).fact", (m,)).fetchone() == ("likes tea",)
        with pytest.raises(psycopg.errors.NoDataFound):
            c.execute("select membank.get_memory(name => %s, scope => %s)", (m, sb))
        assert [r[0] for r in c.execute("select (l).fact from membank.list_memories(scope => %s) as l",
                                        (sb,)).fetchall()] == ["likes rain"]
        c.execute("select membank.update_memory(name => %s, fact => 'likes green tea', scope => %s)", (m, sa))
        c.execute("select membank.update_memory(name => %s, topics => '{USER_PERSONAL_INFO}')", (m,))  # no scope
        with pytest.raises(psycopg.errors.NoDataFound):
            c.execute("select membank.update_memory(name => %s, fact => 'x', scope => %s)", (m, sb))
        revisions = c.execute("select revision, action, fact from membank.list_revisions(name => %s, scope => %s)",
                              (m, sa)).fetchall()
        assert revisions == [(1, "CREATED", "likes tea"), (2, "UPDATED", "likes green tea"),
                             (3, "UPDATED", "likes green tea")]
        assert c.execute("select (membank.get_revision(name => %s, revision => 1)).fact", (m,)).fetchone() == (
            "likes tea",)
        assert c.execute("select (membank.rollback_memory(name => %s, revision => 1, scope => %s)).fact",
                         (m, sa)).fetchone() == ("likes tea",)
        c.execute("select membank.delete_memory(name => %s, scope => %s)", (m, sa))
        with pytest.raises(psycopg.errors.NoDataFound):
            c.execute("select membank.get_memory(name => %s)", (m,))
        # Rolled back after the deletion: the memory returns under its name, on its scope's shard.
        assert c.execute("select (membank.rollback_memory(name => %s, revision => 2)).fact", (m,)).fetchone() == (
            "likes green tea",)
        assert [r[0] for r in c.execute("select action from membank.list_revisions(name => %s)", (m,)).fetchall()
                ] == ["CREATED", "UPDATED", "UPDATED", "UPDATED", "DELETED", "CREATED"]
        assert [r[0] for r in c.execute("select (l).fact from membank.list_memories(scope => %s) as l",
                                        (sa,)).fetchall()] == ["likes green tea"]


def test_a_call_with_its_scope_goes_to_one_worker(citus_database):
    """Every shard command of a single-scope call goes to the worker holding the scope; a name alone asks both."""
    a, b = distributed(citus_database)
    w1, _ = workers(citus_database)
    with citus_database.connect() as c:
        log = RemoteCommands(c)
        sa = json.dumps(a)
        (name,), = log.during("select (membank.create_memory(scope => %s, fact => 'likes tea')).name", (sa,))[0]
        assert log.during("select 1", ())[1] == set()
        calls = {
            "create_memory": ("select membank.create_memory(scope => %s, fact => 'likes rain')", (sa,)),
            "get_memory": ("select membank.get_memory(name => %s, scope => %s)", (name, sa)),
            "list_memories": ("select * from membank.list_memories(scope => %s)", (sa,)),
            "update_memory": ("select membank.update_memory(name => %s, fact => 'likes tea a lot', scope => %s)",
                              (name, sa)),
            "list_revisions": ("select * from membank.list_revisions(name => %s, scope => %s)", (name, sa)),
            "get_revision": ("select membank.get_revision(name => %s, revision => 1, scope => %s)", (name, sa)),
            "rollback_memory": ("select membank.rollback_memory(name => %s, revision => 1, scope => %s)", (name, sa)),
            "delete_memory": ("select membank.delete_memory(name => %s, scope => %s)", (name, sa)),
        }
        for call, (query, params) in calls.items():
            assert log.during(query, params)[1] == {w1.port}, call
        # Without its scope a name is looked up on every shard first: the cost of a name-only call.
        other = c.execute("select (membank.create_memory(scope => %s, fact => 'x')).name", (sa,)).fetchone()[0]
        assert len(log.during("select membank.get_memory(name => %s)", (other,))[1]) == 2


# SQLSTATEs a client may meet while a shard moves, each documented as retryable (docs/scale-out.md, Rebalancing):
# MB040, a wait on the scope's lock past membank.lock_timeout while the scope's shard group is copied.
REBALANCE_RETRYABLE = {"MB040"}


def test_rebalance_onto_a_third_worker_under_writes(citus_cluster, citus_database):
    """citus_add_node, then citus_rebalance_start() in its default mode (logical replication), while four clients
    create, update and retrieve for at least 30 s: shards move to the new worker, every acknowledged write is there
    exactly once (the listed rows equal the acknowledged ones, count and text), and the clients meet no error
    outside the documented retryable set. The nodes run with synchronous_commit on (citus_cluster.NODE_SETTINGS):
    with it off, a write acknowledged just before a shard group's switch was lost in 4 runs of 11
    (docs/scale-out.md, Rebalancing)."""
    import shutil
    import tempfile
    import threading
    import time
    import uuid
    from pathlib import Path

    import citus_cluster as cc
    from membank import distribute
    from pg_server import PgServer, free_port, server_user

    db = citus_database
    migrate.upgrade(db.url)
    distribute.distribute(db.url)
    folder = Path(tempfile.mkdtemp(prefix="membank-citus-w3-", dir="/tmp"))
    folder.chmod(0o755)
    third = PgServer(cc.pginstall() / "bin", folder / "worker3", user=server_user("embedded_postgres"),
                     port=free_port(), tcp=True, settings=cc.NODE_SETTINGS).start()
    acked: dict[str, dict[str, str]] = {}  # scope id -> memory name -> the fact last acknowledged
    errors: list[str] = []
    stop = threading.Event()

    def client(k: int) -> None:
        scopes = [{"user_id": f"rebalance-{k}-{n}"} for n in range(8)]
        with psycopg.connect(db.url, autocommit=True) as c:
            c.execute("set statement_timeout = '120s'")
            i = 0
            while not stop.is_set():
                scope = scopes[i % len(scopes)]
                key = json.dumps(scope)
                try:
                    if i % 3 == 2 and acked.get(key):
                        name = sorted(acked[key])[i % len(acked[key])]
                        fact = f"client {k} updated {name} at step {i}"
                        c.execute("select membank.update_memory(name => %s::text, scope => %s, fact => %s)",
                                  (name, key, fact))
                        acked[key][name] = fact
                    elif i % 3 == 1:
                        c.execute("select * from membank.retrieve_memories(scope => %s, query_text => 'step')",
                                  (key,)).fetchall()
                    else:
                        fact = f"client {k} step {i}"
                        name = c.execute("select (membank.create_memory(scope => %s, fact => %s)).name::text",
                                         (key, fact)).fetchone()[0]
                        acked.setdefault(key, {})[name] = fact
                except psycopg.Error as err:
                    errors.append(f"{err.sqlstate}: {err.diag.message_primary}")
                i += 1

    threads = [threading.Thread(target=client, args=(k,)) for k in range(4)]
    started = time.monotonic()
    try:
        with psycopg.connect(third.url(), autocommit=True) as c:
            c.execute(f'create database "{db.name}"')  # generated name
        with psycopg.connect(third.url(db.name), autocommit=True) as c:
            c.execute("create extension citus")
        for t in threads:
            t.start()
        with db.connect() as c:
            c.execute("select citus_add_node('127.0.0.1', %s)", (third.port,))
            c.execute("select citus_rebalance_start()")
            c.execute("select citus_rebalance_wait()")
            moved = c.execute("select count(*) from citus_shards where nodeport = %s"
                              " and table_name = 'membank_private.memories'::regclass", (third.port,)).fetchone()[0]
        time.sleep(max(0.0, 30 - (time.monotonic() - started)))  # the load runs at least 30 s in all
    finally:
        stop.set()
        for t in threads:
            t.join()
    try:
        assert moved > 0, "the rebalancer moved no shard to the new worker"
        assert {e.split(":")[0] for e in errors} <= REBALANCE_RETRYABLE, errors[:5]
        assert sum(len(v) for v in acked.values()) > 20
        with db.connect() as c:
            for key, memories in acked.items():
                listed = c.execute("select name::text, fact from membank.list_memories(scope => %s,"
                                   " page_size => 1000)", (key,)).fetchall()
                assert len(listed) == len(memories), f"{key}: acknowledged creates lost or duplicated"
                assert dict(listed) == memories, f"{key}: acknowledged writes lost"
    finally:
        with psycopg.connect(third.url(), autocommit=True) as c:
            c.execute(f'drop database if exists "{db.name}" with (force)')
        third.stop()
        shutil.rmtree(folder, ignore_errors=True)


# Functions that read no table and return a constant (the fitted floor, a prompt, the caller's own setting).
CONSTANTS = {"default_min_relevance", "decomposition_prompt", "current_scope"}
ROWS_OF_SCOPE = ("select count(*), md5(string_agg(coalesce(fact, '') || revision, ',' order by name))"
                 " from membank_private.memories where scope_id = md5(%s::jsonb::text)::uuid")


def unprepared_node_serves_nothing(db, worker_url: str, logins: dict, nobody: str, memory: str, scope: str) -> None:
    """On a worker added after `membank db upgrade`, before the upgrade is run again: Citus made membank's functions
    there with EXECUTE for PUBLIC (the premise), and every public function, called as each membank role and as a
    login with none, is refused with 42501 naming the unset privileges (check_node_privileges) unless its
    arguments fail first, and none succeeds but three constants; the scope's rows are as they were."""
    import test_role_matrix as rm
    from psycopg.rows import dict_row

    with db.connect() as c:
        operation = c.execute("select membank.generate_memories(scope => %s::jsonb, facts => %s)::text",
                              (scope, Jsonb(["the user likes tea"]))).fetchone()[0]
        rule = c.execute("select (membank.create_tool_rule(scope => %s::jsonb, tool_name => 'sh',"
                         " pattern => 'ls .*', decision => 'ALLOW')).id::text", (scope,)).fetchone()[0]
        before = c.execute(ROWS_OF_SCOPE, (scope,)).fetchone()
    with psycopg.connect(worker_url, autocommit=True, row_factory=dict_row) as su:
        assert su.execute("select has_function_privilege('public', 'membank.scope_id(jsonb)', 'execute') as p"
                          ).fetchone()["p"] is True, "the premise: Citus gave PUBLIC EXECUTE on the new worker"
        found = rm.routines(su)
    objects = {"memory": memory, "operation": operation, "rule": rule, "tenant": nobody}
    served = {}
    for who in [*ROLES, None]:
        with psycopg.connect(worker_url, user=logins[who] if who else nobody, autocommit=True) as c:
            c.execute("set membank.lock_timeout = '2s'")
            for routine in found:
                statement, params = rm.call_for(routine, objects)
                got = rm.exact_outcome(c, routine, statement, params)
                if got not in ("42501", "22023", "P0002", "0A000") and not (got == "ok"
                                                                            and routine["name"] in CONSTANTS):
                    served[f"{who}: {routine['signature']}"] = got
    # No call succeeds. A call may fail on its arguments before the check (22023; P0002 for an id that names
    # nothing; 0A000 for what only the coordinator does), the errors a set-up node gives, telling nothing of the
    # bank; none reads or writes a scope.
    assert served == {}
    with psycopg.connect(worker_url, user=logins["membank_reader"], autocommit=True) as c, \
            pytest.raises(psycopg.errors.InsufficientPrivilege, match="not set up on this node") as refused:
        c.execute("select membank.create_memory(scope => %s, fact => 'a reader writing')", (scope,))
    assert "membank db upgrade" in refused.value.diag.message_hint
    with db.connect() as c:
        assert c.execute(ROWS_OF_SCOPE, (scope,)).fetchone() == before


def test_app_roles_on_a_worker_added_after_upgrade(citus_cluster, citus_database):
    """A worker added after `membank db upgrade` (a fresh server that never held membank's roles): citus_add_node
    creates membank's roles, their memberships and the application's logins on it (the GRANTs made them
    distributed objects of the database), but Citus creates the functions there with PostgreSQL's default EXECUTE
    for PUBLIC, so until `membank db upgrade` is run again (the documented step after citus_add_node; it revokes it
    there too) the worker serves no call. Then, until the reference tables are copied there (the rebalance does it
    first), it says so (55000, hinting at the rebalance). A scope moved onto the new worker then serves each app role's
    calls through it and through the coordinator, with the same results, and a login holding no membank role gets
    42501 on both."""
    import shutil
    import tempfile
    from pathlib import Path

    import citus_cluster as cc
    from membank import distribute
    from pg_server import PgServer, free_port, server_user

    db = citus_database
    migrate.upgrade(db.url)
    distribute.distribute(db.url)
    logins = {}
    with db.connect() as c:
        for role in ROLES:
            logins[role] = f"{role}_late_{db.name[-6:]}"
            c.execute(f'create role "{logins[role]}" login')  # generated name
            c.execute(f'grant {role} to "{logins[role]}"')
        nobody = f"nobody_late_{db.name[-6:]}"
        c.execute(f'create role "{nobody}" login')
    folder = Path(tempfile.mkdtemp(prefix="membank-citus-w3-", dir="/tmp"))
    folder.chmod(0o755)
    third = PgServer(cc.pginstall() / "bin", folder / "worker3", user=server_user("embedded_postgres"),
                     port=free_port(), tcp=True, settings=cc.NODE_SETTINGS).start()
    try:
        with psycopg.connect(third.url(), autocommit=True) as c:
            assert c.execute("select count(*) from pg_roles where rolname like 'membank%'").fetchone()[0] == 0
            c.execute(f'create database "{db.name}"')
        with psycopg.connect(third.url(db.name), autocommit=True) as c:
            c.execute("create extension citus")
        scope = json.dumps({"user_id": "late-worker"})
        with db.connect() as c:
            name = c.execute("select (membank.create_memory(scope => %s, fact => 'likes tea')).name::text",
                             (scope,)).fetchone()[0]
            node = c.execute("select citus_add_node('127.0.0.1', %s)", (third.port,)).fetchone()[0]
        unprepared_node_serves_nothing(db, third.url(db.name), logins, nobody, name, scope)
        migrate.upgrade(db.url)  # docs/scale-out.md: after citus_add_node, membank db upgrade
        # Privileges set, but no shard has moved there: the new worker holds no copy of the reference tables (the
        # bindings among them), and says what to do rather than fail in Citus's planner once a role is bound.
        with psycopg.connect(third.url(db.name), user=logins["membank_reader"], autocommit=True) as c, \
                pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState, match="no copy on this node") as waiting:
            c.execute("select membank.get_memory(name => %s, scope => %s)", (name, scope))
        assert "replicate_reference_tables" in waiting.value.diag.message_hint
        with db.connect() as c:
            shard = c.execute("select get_shard_id_for_distribution_column('membank_private.memories',"
                              " md5(%s::jsonb::text)::uuid)", (scope,)).fetchone()[0]
            source = c.execute("select nodeid from pg_dist_placement join pg_dist_node using (groupid)"
                               " where shardid = %s", (shard,)).fetchone()[0]
            # What citus_rebalance_start() does before it moves anything (a lone shard move does not)
            c.execute("select replicate_reference_tables()")
            c.execute("select citus_move_shard_placement(%s, %s, %s)", (shard, source, node))
            assert c.execute("select nodeport from citus_shards where shardid = %s", (shard,)).fetchone()[0] \
                == third.port
        with psycopg.connect(third.url(db.name), autocommit=True) as c:
            members = dict(c.execute(
                "select r.rolname::text, array(select g.rolname::text from pg_auth_members as m"
                " join pg_roles as g on g.oid = m.roleid where m.member = r.oid order by 1)"
                " from pg_roles as r where r.rolname like 'membank%' order by 1").fetchall())
        assert {r: members[r] for r in ROLES} == {
            "membank_admin": ["membank_worker", "membank_writer"], "membank_reader": [],
            "membank_worker": [], "membank_writer": ["membank_reader"]}
        assert {logins[r]: members[logins[r]] for r in ROLES} == {logins[r]: [r] for r in ROLES}
        for url in (db.url, third.url(db.name)):
            where = "coordinator" if url == db.url else "new worker"

            def call(role, query, params=()):
                with psycopg.connect(url, user=logins[role], autocommit=True) as c:
                    return c.execute(query, params).fetchall()

            assert call("membank_reader", "select fact from membank.get_memory(name => %s, scope => %s)",
                        (name, scope)) == [("likes tea",)], where
            created = call("membank_writer", "select (membank.create_memory(scope => %s, fact => %s)).name::text",
                           (scope, f"written through the {where}"))[0][0]
            assert call("membank_writer", "select (membank.update_memory(name => %s, scope => %s,"
                        " fact => %s)).revision", (created, scope, f"updated through the {where}")) == [(2,)], where
            assert call("membank_admin", "select membank.purge_memories(scope => %s)", (scope,)) \
                == [(3 if where == "new worker" else 2,)], where
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                call("membank_reader", "select membank.create_memory(scope => %s, fact => 'no')", (scope,))
            with psycopg.connect(url, user=nobody, autocommit=True) as c, \
                    pytest.raises(psycopg.errors.InsufficientPrivilege):
                c.execute("select membank.create_memory(scope => %s, fact => 'no')", (scope,))
        with db.connect() as c:
            # Writes through a worker do not mark the due-work index; a claim takes one job per memory.
            c.execute("select membank_private.rebuild_due_scopes()")
            queued = c.execute("select count(distinct name) from membank_private.embedding_jobs"
                               " where scope_id = md5(%s::jsonb::text)::uuid", (scope,)).fetchone()[0]
        with psycopg.connect(db.url, user=logins["membank_worker"], autocommit=True) as c:
            assert c.execute("select count(*) from membank.claim_embedding_jobs(10)").fetchone()[0] == queued > 0
        with db.connect() as c:
            facts = sorted(f for (f,) in c.execute("select fact from membank.list_memories(scope => %s)", (scope,)))
        assert facts == ["likes tea", "updated through the coordinator", "updated through the new worker"]
    finally:
        with psycopg.connect(third.url(), autocommit=True) as c:
            c.execute(f'drop database if exists "{db.name}" with (force)')
        third.stop()
        shutil.rmtree(folder, ignore_errors=True)


def test_upgrade_makes_membanks_roles_on_a_worker_that_lacks_them(citus_cluster, citus_database):
    """membank's roles already on the coordinator (made outside this database, so Citus does not know them here)
    and a worker that lacks them in the cluster before the first `membank db upgrade`: the upgrade first makes the
    roles and memberships the coordinator has on that worker, so the GRANTs Citus sends there succeed (they failed
    with 42704 "role membank_reader does not exist")."""
    import shutil
    import tempfile
    from pathlib import Path

    import citus_cluster as cc
    from pg_server import PgServer, free_port, server_user

    db = citus_database
    with psycopg.connect(db.cluster.coordinator.url(), autocommit=True) as c:  # the postgres database: no citus
        for role in ROLES:
            if not c.execute("select 1 from pg_roles where rolname = %s", (role,)).fetchone():
                c.execute(f"create role {role} nologin")  # a constant name
    folder = Path(tempfile.mkdtemp(prefix="membank-citus-w3-", dir="/tmp"))
    folder.chmod(0o755)
    third = PgServer(cc.pginstall() / "bin", folder / "worker3", user=server_user("embedded_postgres"),
                     port=free_port(), tcp=True, settings=cc.NODE_SETTINGS).start()
    try:
        with psycopg.connect(third.url(), autocommit=True) as c:
            c.execute(f'create database "{db.name}"')  # generated name
        with psycopg.connect(third.url(db.name), autocommit=True) as c:
            c.execute("create extension citus")
        with db.connect() as c:
            c.execute("select citus_add_node('127.0.0.1', %s)", (third.port,))
        migrate.upgrade(db.url)
        with psycopg.connect(third.url(db.name), autocommit=True) as c:
            members = dict(c.execute(
                "select r.rolname::text, array(select g.rolname::text from pg_auth_members as m"
                " join pg_roles as g on g.oid = m.roleid where m.member = r.oid order by 1)"
                " from pg_roles as r where r.rolname like 'membank%' order by 1").fetchall())
            assert c.execute("select has_function_privilege('membank_writer',"
                             " 'membank.create_memory(jsonb, text, text[], jsonb, interval, timestamptz, text, jsonb,"
                             " jsonb, text[], text)', 'execute')").fetchone()[0] is True
        assert members == {"membank_admin": ["membank_worker", "membank_writer"], "membank_reader": [],
                           "membank_worker": [], "membank_writer": ["membank_reader"]}
    finally:
        with psycopg.connect(third.url(), autocommit=True) as c:
            c.execute(f'drop database if exists "{db.name}" with (force)')
        third.stop()
        shutil.rmtree(folder, ignore_errors=True)
