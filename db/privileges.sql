-- Privileges, applied last on every install and upgrade: nothing for
-- PUBLIC; the three roles get EXECUTE on the API only. The API functions
-- are SECURITY DEFINER, so the roles need no privileges on any table.

revoke all on all tables in schema membank_private from public;
revoke all on all functions in schema membank_private from public;
revoke all on all functions in schema membank from public;
revoke all on all procedures in schema membank from public;


grant usage on schema membank to membank_reader;
grant usage on type
membank.memory, membank.memory_page_item, membank.memory_revision, membank.retrieved_memory, membank.event,
membank.operation, membank.generation_job
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
    text, double precision, double precision, integer, text, integer, integer, text
),
membank.embedding_backlog(),
membank.list_events(jsonb, text, timestamptz, timestamptz, integer),
membank.get_operation(text, jsonb),
membank.list_operations(jsonb, text, boolean, integer),
membank.generation_backlog(),
membank.get_memory(uuid, jsonb),
membank.list_revisions(uuid, jsonb),
membank.get_revision(uuid, integer, jsonb),
membank.get_operation(uuid, jsonb),
membank.get_session(text, text, text, integer, double precision),
membank.list_sessions(text, text),
membank.get_user_state(text, text)
to membank_reader;

grant execute on function
membank.create_memory(jsonb, text, text[], jsonb, interval, timestamptz, text, jsonb, jsonb, text[]),
membank.update_memory(text, text, text[], jsonb, interval, timestamptz, jsonb, jsonb, jsonb, text[]),
membank.delete_memory(text, jsonb, jsonb),
membank.rollback_memory(text, integer, jsonb),
membank.configure_embedding(text, integer),
membank.claim_embedding_jobs(integer),
membank.store_embeddings(text, integer, text[], text[], text[]),
membank.fail_embedding_jobs(text[], text[], text),
membank.append_events(jsonb, text, jsonb),
membank.generate_memories(jsonb, jsonb, text, timestamptz, timestamptz, jsonb, jsonb, jsonb, boolean, text, interval),
membank.claim_generation_jobs(integer, uuid),
membank.prepare_consolidation(bigint, real[], text),
membank.complete_generation_job(bigint, text),
membank.fail_generation_job(bigint, text, boolean),
membank.update_memory(uuid, text, text[], jsonb, interval, timestamptz, jsonb, jsonb, jsonb, text[]),
membank.delete_memory(uuid, jsonb, jsonb),
membank.rollback_memory(uuid, integer, jsonb),
membank.create_session(text, text, text, jsonb),
membank.append_session_event(text, text, text, jsonb),
membank.delete_session(text, text, text)
to membank_writer;

grant execute on function membank.purge_memories(jsonb, jsonb, text[], boolean) to membank_admin;
grant execute on procedure membank.purge_expired_memories(integer, integer, bigint) to membank_admin;

-- The expiry procedure runs as its caller and commits between batches; each
-- batch is a SECURITY DEFINER function that only the admin role may call.
grant usage on schema membank_private to membank_admin;
grant execute on function membank_private.purge_expired_batch(integer) to membank_admin;
