-- 0012: memories.context, searched (full text with weight D, and embedded
-- with the fact) but never returned.
alter table membank_private.memories add column context text;
alter table membank_private.memories
add constraint memories_context_length check (context is null or length(context) between 1 and 32768);

-- The fact's lexemes weigh A, the context's D: ts_filter(fts, '{a}') gives
-- the fact's own lexemes back (061_text_candidates.sql scores the others
-- lower). Rows without a context keep the same lexemes as before.
drop index membank_private.memories_scope_fts_idx;
alter table membank_private.memories drop column fts;
alter table membank_private.memories
add column fts tsvector generated always as (
    setweight(membank_private.fact_tsvector(coalesce(fact, '')), 'A')
    || setweight(membank_private.fact_tsvector(coalesce(context, '')), 'D')
) stored;
create index memories_scope_fts_idx
on membank_private.memories using gin (scope_id, fts);

-- The lexicon is recounted (the statement triggers do not fire for a column
-- rewrite); a lexeme of the fact or of the context counts once per memory.
delete from membank_private.scope_lexicon;
insert into membank_private.scope_lexicon (scope_id, lexeme, doc_count)
select
    m.scope_id,
    l.lexeme,
    count(*) as doc_count
from membank_private.memories as m
cross join lateral unnest(tsvector_to_array(m.fts)) as l (lexeme)
group by m.scope_id, l.lexeme;

-- create_memory takes a context.
drop function if exists membank.create_memory(
    jsonb, text, text[], jsonb, interval, timestamptz, text, jsonb, jsonb, text[]
);

-- The candidate functions take rare_only (db/functions recreate them).
drop function if exists membank_private.text_query(text, uuid[]);
drop function if exists membank_private.text_candidates(
    uuid[], text, integer, jsonb, text[], text, timestamptz, timestamptz
);
drop function if exists membank_private.scan_candidates(
    uuid[], vector, text, integer, jsonb, text[], text, timestamptz, timestamptz
);

-- Retrieval asks whether a scope has embeddings pending (070_retrieve_memories.sql).
create index embedding_jobs_scope_idx on membank_private.embedding_jobs (scope_id);
