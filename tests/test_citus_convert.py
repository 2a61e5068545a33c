"""Converting a single-node bank onto a new Citus cluster (`membank db convert --from SOURCE_URL`): `pytest -m citus`.

The source is a database on the session's embedded server (tests/conftest.py),
filled through the API with memories, revisions, vectors, operations,
events, ADK sessions, profiles, tool rules and a tenant binding; the target a
fresh database on the session's cluster. Every table must arrive row for row
(counts and checksums), single-scope retrieval must answer the same, and the
bound login must stay bound through the coordinator and through each worker.
"""

from __future__ import annotations

import hashlib
import json
import uuid

import psycopg
import pytest
from click.testing import CliRunner
from psycopg import sql

from membank import MemoryBank, PermissionDeniedError, migrate
from membank.cli import main
from test_citus import workers
from test_profiles import run_seed

pytestmark = pytest.mark.citus

SCOPES = [{"user_id": f"conv-{n}"} for n in range(6)]
WORDS = ("tea", "coffee", "violin", "Lyon", "peanuts", "bicycle", "stamps", "rain", "chess", "Python")


def vector(n: int) -> str:
    return f"[{1 + n % 7},{(n * 3) % 5},{1 + n % 4}]"


def fill(url: str) -> None:
    """A single-node bank with everything a bank holds (about 330 memories, 6 scopes)."""
    with MemoryBank(url) as bank:
        run_seed(bank)  # a profile schema, two GenerateMemories operations, events and profile memories
        rule = bank.create_tool_rule(SCOPES[0], "shell", "rm .*", "BLOCK")
        bank.create_tool_rule(SCOPES[1], "shell", "ls .*", "ALLOW", project_id="p1")
        bank.check_tool_permission(SCOPES[0], "shell", "rm -rf /", project_id="p1")
        bank.delete_tool_rule(SCOPES[0], rule.id)  # a change log of two rows
        bank.create_session("conv-app", "conv-0", session_id="s1", state={"step": 1})
        for scope in SCOPES:
            bank.append_events(scope, "chat", [{"event_id": f"e{n}", "author": "user", "text": f"turn {n} about tea",
                                                "timestamp": f"2026-01-01T10:0{n}:00Z"} for n in range(5)])
    with psycopg.connect(url, autocommit=True) as c:
        c.execute("select membank.configure_embedding(model_id => 'test/m', dimension => 3)")
        names, facts = [], []
        for n in range(330):
            scope = json.dumps(SCOPES[n % len(SCOPES)])
            fact = f"fact {n}: likes {WORDS[n % 10]} and {WORDS[(n * 7) % 10]}"
            names.append(c.execute("select (membank.create_memory(scope => %s, fact => %s, topics =>"
                                   " '{USER_PREFERENCES}')).name::text", (scope, fact)).fetchone()[0])
            facts.append(fact)
        for n in range(0, 330, 3):  # revisions: an update of every third memory, some rolled back or deleted
            facts[n] = facts[n] + " (updated)"
            c.execute("select membank.update_memory(name => %s, fact => %s)", (names[n], facts[n]))
        for n in range(0, 30, 6):
            c.execute("select membank.rollback_memory(name => %s, revision => 1)", (names[n],))
            facts[n] = facts[n].removesuffix(" (updated)")
        for n in range(1, 30, 7):
            c.execute("select membank.delete_memory(name => %s)", (names[n],))
        live = [(name, fact) for n, (name, fact) in enumerate(zip(names, facts)) if n not in range(1, 30, 7)]
        c.execute("select membank.store_embeddings(model_id => 'test/m', dimension => 3, memory_names => %s,"
                  " fact_md5s => array(select md5(f) from unnest(%s::text[]) as f), embeddings => %s)",
                  ([n for n, _ in live], [f for _, f in live], [vector(i) for i in range(len(live))]))


def snapshot(url: str) -> dict[str, tuple[int, str]]:
    """(rows, checksum) of every membank_private table; a row is its columns as text, rows sorted."""
    with psycopg.connect(url, autocommit=True) as c:
        tables = [r[0] for r in c.execute(
            "select relname::text from pg_class where relnamespace = 'membank_private'::regnamespace"
            " and relkind = 'r' and relname <> 'due_scopes' order by 1").fetchall()]  # rebuilt by distribute
        out = {}
        for table in tables:
            columns = [r[0] for r in c.execute(
                "select attname::text from pg_attribute where attrelid = %s::regclass and attnum > 0"
                " and not attisdropped order by attnum", (f"membank_private.{table}",)).fetchall()]
            rows = c.execute(sql.SQL("select {} from {}").format(
                sql.SQL(", ").join(sql.SQL("{}::text").format(sql.Identifier(col)) for col in columns),
                sql.Identifier("membank_private", table))).fetchall()
            out[table] = (len(rows), hashlib.md5(repr(sorted(rows, key=repr)).encode()).hexdigest())
        return out


def retrievals(url: str) -> list:
    """Single-scope retrieval in every scope: text, vector and hybrid, every column but the times of the call."""
    out = []
    with psycopg.connect(url, autocommit=True) as c:
        for scope in SCOPES:
            for query, embedding in (("tea coffee", None), (None, [1.0, 2.0, 1.0]), ("chess rain", [3.0, 0.0, 2.0])):
                out.append(c.execute(
                    "select name::text, fact, distance, text_match_rank, matched_signals from"
                    " membank.retrieve_memories(scope => %s, query_text => %s, query_embedding => %s::real[],"
                    " top_k => 10)", (json.dumps(scope), query, embedding)).fetchall())
    return out


def convert_command(source: str, coordinator: str):
    """The operator's command: `MEMBANK_DATABASE_URL=<coordinator> membank db convert --from <source>`."""
    return CliRunner().invoke(main, ["db", "convert", "--from", source], env={"MEMBANK_DATABASE_URL": coordinator})


def as_login(url: str, role: str) -> str:
    return url.replace("postgresql://postgres@", f"postgresql://{role}@")


@pytest.fixture
def tenant(db_url, citus_database):
    """A login role of the same name on the embedded server and on the cluster (created there on every worker).

    The operator's order: `membank db upgrade` on the new coordinator creates membank's roles, then the
    application's roles are created and granted there, then `membank db convert` fills the bank.
    """
    migrate.upgrade(citus_database.url)
    role = f"conv_tenant_{uuid.uuid4().hex[:8]}"
    servers = (db_url, citus_database.url)
    for url in servers:
        with psycopg.connect(url, autocommit=True) as c:
            c.execute(sql.SQL("create role {} login").format(sql.Identifier(role)))
            c.execute(sql.SQL("grant membank_writer to {}").format(sql.Identifier(role)))
    try:
        yield role
    finally:
        for url in servers:
            with psycopg.connect(url, autocommit=True) as c:
                c.execute(sql.SQL("drop owned by {}").format(sql.Identifier(role)))
                c.execute(sql.SQL("drop role {}").format(sql.Identifier(role)))


def test_a_single_node_bank_converts_row_for_row_with_its_bindings(db_url, citus_database, tenant):
    fill(db_url)
    with psycopg.connect(db_url, autocommit=True) as c:
        c.execute("select membank.bind_role_to_scope(role => %s, scope => %s)", (tenant, json.dumps(SCOPES[0])))
        source_oid = c.execute("select oid::bigint from pg_roles where rolname = %s", (tenant,)).fetchone()[0]
    before, answers = snapshot(db_url), retrievals(db_url)
    assert all(answers) and any(r[2] is not None for rows in answers for r in rows)  # text and vector legs answer
    assert before["memories"][0] > 300 and before["memory_embeddings"][0] > 300
    assert [t for t in ("memory_revisions", "operations", "events", "sessions", "tool_rules", "tool_rule_changes",
                        "tool_decisions", "profile_schemas", "bound_roles", "scope_bindings") if not before[t][0]] == []

    ran = convert_command(db_url, citus_database.url)
    assert ran.exit_code == 0, ran.output
    done = json.loads(ran.output)
    with citus_database.connect() as c:
        cluster_oid = c.execute("select oid::bigint from pg_roles where rolname = %s", (tenant,)).fetchone()[0]
        assert migrate.current(citus_database.url) == migrate.head()
        assert c.execute("select count(*) from pg_dist_partition where partmethod = 'h'"
                         " and logicalrelid = 'membank_private.memories'::regclass").fetchone() == (1,)
    assert source_oid != cluster_oid  # what makes re-keying necessary (each server numbers its roles)
    assert done["roles"] == [{"role": tenant, "source_oid": source_oid, "cluster_oid": cluster_oid}]
    assert done["rows"] == {t: n for t, (n, _) in before.items()}

    after = snapshot(citus_database.url)
    # The binding tables hold the cluster's OID of the role (and each worker's): compared after mapping the key.
    for table in ("bound_roles", "scope_bindings"):
        assert after.pop(table)[0] == before.pop(table)[0]
    assert after == before
    assert retrievals(citus_database.url) == answers
    with citus_database.connect() as c:
        row = c.execute("select role_oid::bigint, role_name::text, worker_oids from membank_private.bound_roles"
                        ).fetchone()
        worker_oids = {str(group): oid for group, oid in c.execute(
            "select n.groupid, r.result::bigint from run_command_on_workers(%s) as r join pg_dist_node as n"
            " on n.nodename = r.nodename and n.nodeport = r.nodeport",
            (f"select oid from pg_roles where rolname = '{tenant}'",)).fetchall()}
        assert row == (cluster_oid, tenant, worker_oids) and len(worker_oids) == 2
        assert c.execute("select role_oid::bigint, scope from membank_private.scope_bindings").fetchall() == [
            (cluster_oid, SCOPES[0])]
        # The bank keeps working: triggers are back (a revision per update) and identities go on after the source's.
        name = c.execute("select (membank.create_memory(scope => %s, fact => 'after the move')).name::text",
                         (json.dumps(SCOPES[2]),)).fetchone()[0]
        c.execute("select membank.update_memory(name => %s, fact => 'after the move, again')", (name,))
        assert c.execute("select count(*) from membank.list_revisions(name => %s)", (name,)).fetchone() == (2,)
        rule = c.execute("select (membank.create_tool_rule(scope => %s, tool_name => 't', pattern => 'x',"
                         " decision => 'ALLOW')).id", (json.dumps(SCOPES[3]),)).fetchone()[0]
        assert rule > c.execute("select max(id) from membank_private.tool_rules where id <> %s",
                                (rule,)).fetchone()[0]

    # The bound login is still bound, through the coordinator and through each worker.
    own, other = json.dumps(SCOPES[0]), json.dumps(SCOPES[1])
    nodes = [citus_database.url, *citus_database.worker_urls()]
    for url in nodes:
        with psycopg.connect(as_login(url, tenant), autocommit=True) as c:
            assert c.execute("select count(*) > 0 from membank.list_memories(scope => %s)", (own,)).fetchone() == (
                True,), url
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                c.execute("select * from membank.list_memories(scope => %s)", (other,))
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                c.execute("select membank.create_memory(scope => %s, fact => 'not mine')", (other,))
    with MemoryBank(as_login(citus_database.url, tenant)) as bank:
        with pytest.raises(PermissionDeniedError):
            bank.list_memories(SCOPES[1])


def test_a_bound_role_missing_on_the_cluster_refuses_the_conversion(db_url, citus_database):
    """Fail closed: a binding is never dropped or widened; nothing is written to the target, the roles are named."""
    role = f"conv_gone_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(db_url, autocommit=True) as c:
        c.execute(sql.SQL("create role {} login").format(sql.Identifier(role)))
        try:
            c.execute("select membank.create_memory(scope => %s, fact => 'x')", (json.dumps(SCOPES[0]),))
            c.execute("select membank.bind_role_to_scope(role => %s, scope => %s)", (role, json.dumps(SCOPES[0])))
            ran = convert_command(db_url, citus_database.url)
        finally:
            c.execute("select membank.unrestrict_role(%s)", (role,))
            c.execute(sql.SQL("drop role {}").format(sql.Identifier(role)))
    assert ran.exit_code == 2
    assert f"roles bound to scopes on the source do not exist on the coordinator: {role}" in ran.output
    assert migrate.current(citus_database.url) is None  # nothing installed, nothing copied


def test_convert_refuses_a_target_that_holds_a_bank(db_url, citus_database):
    """A distributed bank, or one with rows, is never overwritten."""
    from membank import distribute

    migrate.upgrade(citus_database.url)
    with citus_database.connect() as c:
        c.execute("select membank.create_memory(scope => %s, fact => 'already here')", (json.dumps(SCOPES[0]),))
    ran = convert_command(db_url, citus_database.url)
    assert ran.exit_code == 2 and "the target's bank is not empty (" in ran.output and " memories," in ran.output
    distribute.distribute(citus_database.url)
    ran = convert_command(db_url, citus_database.url)
    assert ran.exit_code == 2 and "the target's bank is distributed already" in ran.output
    with citus_database.connect() as c:
        assert c.execute("select fact from membank_private.memories").fetchall() == [("already here",)]
