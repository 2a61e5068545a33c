-- Privileges, applied last on every install and upgrade: nothing for
-- PUBLIC; the roles get EXECUTE on the API only. The API functions are
-- SECURITY DEFINER, so the roles need no privileges on any table.
--   membank_reader  reads memories, revisions, events and operations
--   membank_writer  the application: reader + writes of its scopes' memories and events
--   membank_worker  carries the job queues (claim/store/complete/fail): their rows hold
--                   every scope's text, so the application role never holds them
--   membank_admin   writer + worker + maintenance (purges, reembed)

-- Names resolve through pg_catalog only from here on: Citus sends these
-- revokes and grants to its workers as lists of functions whose argument types
-- it prints relative to this session's search_path, and a bare `vector` (found
-- via membank_extensions, 000_search_path.sql) does not resolve on a worker.
select pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);

revoke all on all tables in schema membank_private from public;
revoke all on all functions in schema membank_private from public;
revoke all on all functions in schema membank from public;
revoke all on all procedures in schema membank from public;
revoke all on membank_private.scope_locks from public;


grant usage on schema membank to membank_reader;
grant usage on type
membank.memory, membank.memory_page_item, membank.memory_revision, membank.retrieved_memory, membank.event,
membank.operation, membank.generation_job, membank.tool_rule, membank.tool_decision, membank.profile_schema,
membank.profile_field, membank.ingestion, membank.due_stream, membank.added_messages
to membank_reader;

grant execute on function
membank.get_memory(text, jsonb),
membank.list_memories(
    jsonb, integer, text, jsonb, text[], text, timestamptz, timestamptz, timestamptz, timestamptz
),
membank.list_revisions(text, jsonb),
membank.get_revision(text, integer, jsonb),
membank.retrieve_memories(
    jsonb, text, real[], integer, double precision, jsonb, text[], text, timestamptz, timestamptz,
    text, double precision, double precision, integer, text, integer, integer, text, text[], real[],
    double precision, double precision, boolean
),
membank.decompose_query(text, text, text, text),
membank.default_min_relevance(),
membank.decomposition_prompt(text),
membank.embedding_backlog(),
membank.list_events(jsonb, text, timestamptz, timestamptz, integer),
membank.get_operation(text, jsonb),
membank.list_operations(jsonb, text, boolean, integer),
membank.generation_backlog(),
membank.get_memory(uuid, jsonb),
membank.list_revisions(uuid, jsonb),
membank.get_revision(uuid, integer, jsonb),
membank.get_operation(uuid, jsonb),
membank.scope_id(jsonb),
membank.list_tool_rules(jsonb, text),
membank.list_tool_rule_changes(jsonb, bigint, integer),
membank.get_profile_schema(text),
membank.list_profile_schemas(),
membank.retrieve_profiles(jsonb, text[]),
membank.set_scope(jsonb, boolean),
membank.current_scope(),
membank.get_session(text, text, text, integer, double precision),
membank.list_sessions(text, text),
membank.get_user_state(text, text),
membank.evidence_verdicts(jsonb, text, jsonb, text[], integer),
membank.build_context(
    jsonb, text, text, real[], integer, integer, double precision, text[], integer, integer, boolean, text, text[],
    real[], double precision, boolean
),
membank.list_scopes(jsonb, integer, jsonb)
to membank_reader;

-- The scoped views: a reader sets its scope and selects. The views read
-- through definer functions that call active_scope() (it answers only about the caller).
grant select on membank.scoped_memories, membank.scoped_profiles, membank.scoped_revisions to membank_reader;
grant execute on function membank_private.active_scope(),
membank_private.scoped_memory_rows(),
membank_private.scoped_profile_rows(),
membank_private.scoped_revision_rows()
to membank_reader;

grant execute on function
membank.create_memory(jsonb, text, text[], jsonb, interval, timestamptz, text, jsonb, jsonb, text[], text),
membank.update_memory(text, text, text[], jsonb, interval, timestamptz, jsonb, jsonb, jsonb, text[], integer),
membank.delete_memory(text, jsonb, jsonb, integer),
membank.rollback_memory(text, integer, jsonb, integer),
membank.append_events(jsonb, text, jsonb),
membank.generate_memories(
    jsonb, jsonb, text, timestamptz, timestamptz, jsonb, jsonb, jsonb, boolean, text, interval, jsonb, boolean
),
membank.update_memory(uuid, text, text[], jsonb, interval, timestamptz, jsonb, jsonb, jsonb, text[], integer),
membank.delete_memory(uuid, jsonb, jsonb, integer),
membank.rollback_memory(uuid, integer, jsonb, integer),
membank.compact_memories(jsonb, interval, integer, text[], text, boolean),
membank.check_tool_permission(jsonb, text, text, text, text, boolean, text),
membank.list_tool_decisions(jsonb, integer),
membank.create_session(text, text, text, jsonb),
membank.append_session_event(text, text, text, jsonb),
membank.delete_session(text, text, text),
membank.ingest_events(jsonb, text, jsonb, jsonb, boolean),
membank.add_messages(jsonb, jsonb, text, text[], jsonb)
to membank_writer;

-- The job queues: a claimed job holds the raw text of any scope. Installs
-- before 0006 granted them to membank_writer: taken back here.
revoke execute on function
membank.claim_embedding_jobs(integer),
membank.store_embeddings(text, integer, text[], text[], text[]),
membank.fail_embedding_jobs(text[], text[], text),
membank.claim_generation_jobs(integer, uuid),
membank.prepare_consolidation(bigint, real[], text),
membank.complete_generation_job(bigint, text),
membank.fail_generation_job(bigint, text, boolean)
from membank_reader, membank_writer;
-- The bank's embedding model is a bank-wide setting: the worker's (and the
-- admin's), never the application's. Installs before 0013 granted it to
-- membank_writer: taken back here.
revoke execute on function membank.configure_embedding(text, integer) from membank_reader, membank_writer;
grant usage on type membank.generation_job to membank_worker;
grant execute on function
membank.configure_embedding(text, integer),
membank.claim_embedding_jobs(integer),
membank.store_embeddings(text, integer, text[], text[], text[]),
membank.fail_embedding_jobs(text[], text[], text),
membank.embedding_backlog(),
membank.claim_generation_jobs(integer, uuid),
membank.prepare_consolidation(bigint, real[], text),
membank.complete_generation_job(bigint, text),
membank.fail_generation_job(bigint, text, boolean),
membank.generation_backlog(),
membank.generate_due_streams(timestamptz, integer)
to membank_worker;

grant execute on function
membank.purge_memories(jsonb, jsonb, text[], boolean),
membank.reembed(text, integer)
to membank_admin;
-- Permission rules are the operator's: the application (writer) asks, it may not grant itself.
-- Profile schemas and scope bindings are bank-wide configuration: also the admin's.
grant execute on function
membank.create_tool_rule(jsonb, text, text, text, text, text[], text),
membank.update_tool_rule(bigint, jsonb, text, text, text[], text),
membank.delete_tool_rule(bigint, jsonb),
membank.set_exempt_tools(jsonb, text[]),
membank.compact_scopes(jsonb, interval, integer, integer),
membank.create_profile_schema(text, jsonb),
membank.update_profile_schema(text, jsonb),
membank.delete_profile_schema(text, boolean),
membank.bind_role_to_scope(name, jsonb),
membank.unbind_role_from_scope(name, jsonb),
membank.unrestrict_role(name),
membank.list_scope_bindings(name),
membank.refresh_role_bindings(),
membank.configure_ingestion(jsonb)
to membank_admin;
grant execute on procedure
membank.purge_expired_memories(integer, integer, bigint),
membank.purge_memories_in_batches(jsonb, jsonb, text[], integer, bigint),
membank.apply_retention(integer, integer, jsonb)
to membank_admin;
grant execute on function
membank.erase_scope(jsonb, boolean),
membank.import_memory(jsonb, text, text, jsonb, timestamptz, timestamptz, jsonb),
membank.configure_retention(interval, interval, interval, text[])
to membank_admin;

-- The purge procedures run as their caller and commit between batches; each
-- batch is a SECURITY DEFINER function that only the admin role may call
-- (apply_retention's running totals: two pinned invoker helpers).
grant usage on schema membank_private to membank_admin;
grant execute on function
membank_private.purge_expired_batch(integer),
membank_private.purge_memories_batch(jsonb, jsonb, text[], integer),
membank_private.retention_batch(integer),
membank_private.retention_totals(jsonb, jsonb),
membank_private.retention_batch_full(jsonb, integer),
membank_private.rebuild_due_work()
to membank_admin;

-- membank_extensions (when membank installed pgvector there) stays closed to
-- CREATE for everyone but its owner (000_search_path.sql refuses otherwise).
do $$
begin
    if exists (select from pg_catalog.pg_namespace where nspname = 'membank_extensions') then
        revoke all on schema membank_extensions from public;
    end if;
end
$$;

-- Per-scope HNSW maintenance is the admin's (or a maintenance job's), never the application's.
grant execute on function membank.scope_vector_index_plan(integer) to membank_admin;
