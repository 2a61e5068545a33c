-- 0002 downgrade: remove retrieval. The extensions stay: other code may use
-- them (0001's downgrade removes membank_extensions when nothing else does).
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
drop function if exists membank_private.check_query_embedding(real[], text);
drop function if exists membank_private.set_embedding_centroid();
drop function if exists membank_private.quantize(vector, vector);
drop type if exists membank.retrieved_memory;
drop trigger if exists memories_lexicon_insert on membank_private.memories;
drop trigger if exists memories_lexicon_update on membank_private.memories;
drop trigger if exists memories_lexicon_delete on membank_private.memories;
drop function if exists membank_private.memories_count_lexemes();
drop function if exists membank_private.text_query(text, uuid[]);
drop table if exists membank_private.scope_lexicon;
drop table if exists membank_private.scope_stats;
drop table if exists membank_private.embedding_jobs;
drop table if exists membank_private.memory_embeddings;
drop table if exists membank_private.embedding_config;
alter table membank_private.memories drop column if exists fts;
