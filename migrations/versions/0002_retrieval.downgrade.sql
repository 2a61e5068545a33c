-- 0002 downgrade: remove retrieval. The extensions stay: other code may use them.
drop trigger if exists memories_enqueue_embedding on membank_private.memories;
drop function if exists membank_private.memories_enqueue_embedding();
drop function if exists membank.retrieve_memories(
    jsonb, text, real[], integer, double precision, jsonb, text[], text, timestamptz, timestamptz,
    text, double precision, double precision, integer, text, integer, integer, text
);
drop function if exists membank.claim_embedding_jobs(integer);
drop function if exists membank.store_embeddings(text, integer, text[], text[], text[]);
drop function if exists membank.fail_embedding_jobs(text[], text[], text);
drop function if exists membank.embedding_backlog();
drop function if exists membank.configure_embedding(text, integer);
drop function if exists membank.reembed(text, integer);
drop function if exists membank_private.tsquery_any(text);
drop function if exists membank_private.check_query_embedding(real[], text);
drop type if exists membank.retrieved_memory;
drop table membank_private.embedding_jobs;
drop table membank_private.memory_embeddings;
drop table membank_private.embedding_config;
alter table membank_private.memories drop column fts;
