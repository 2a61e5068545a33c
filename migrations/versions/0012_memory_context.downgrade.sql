-- 0012 downgrade: no context; fts holds the fact's lexemes only (as 0008 left it).
drop function if exists membank.create_memory(
    jsonb, text, text[], jsonb, interval, timestamptz, text, jsonb, jsonb, text[], text
);
drop index membank_private.memories_scope_fts_idx;
alter table membank_private.memories drop column fts;
alter table membank_private.memories drop column context;
alter table membank_private.memories
add column fts tsvector generated always as (membank_private.fact_tsvector(coalesce(fact, ''))) stored;
create index memories_scope_fts_idx
on membank_private.memories using gin (scope_id, fts);
delete from membank_private.scope_lexicon;
insert into membank_private.scope_lexicon (scope_id, lexeme, doc_count)
select
    m.scope_id,
    l.lexeme,
    count(*) as doc_count
from membank_private.memories as m
cross join lateral unnest(tsvector_to_array(m.fts)) as l (lexeme)
group by m.scope_id, l.lexeme;
drop function if exists membank_private.text_query(text, uuid[], boolean);
drop function if exists membank_private.text_candidates(
    uuid[], text, integer, jsonb, text[], text, timestamptz, timestamptz, boolean
);
drop function if exists membank_private.scan_candidates(
    uuid[], vector, text, integer, jsonb, text[], text, timestamptz, timestamptz, boolean
);
drop index if exists membank_private.embedding_jobs_scope_idx;
