-- 0008 downgrade: english full text again. unaccent goes when membank installed it (in membank_extensions).
drop function if exists membank.retrieve_memories(
    jsonb, text, real[], integer, double precision, jsonb, text[], text, timestamptz, timestamptz,
    text, double precision, double precision, integer, text, integer, integer, text, text[], real[]
);
drop function if exists membank.decompose_query(text, text, text, text);
drop function if exists membank.decomposition_prompt(text);
drop function if exists membank_private.split_question(text);
drop function if exists membank_private.parse_sub_queries(text, text);
drop function if exists membank_private.check_queries(text, real[], text[], real[], text);
drop function if exists membank_private.query_lexemes(text);
drop function if exists membank_private.hybrid_candidates(
    uuid[], vector, text, integer, integer, jsonb, text[], text, timestamptz, timestamptz,
    text, double precision, double precision, integer
);
drop index membank_private.memories_scope_fts_idx;
alter table membank_private.memories drop column fts;
alter table membank_private.memories
add column fts tsvector generated always as (to_tsvector('english'::regconfig, coalesce(fact, ''))) stored;
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
drop function membank_private.fact_tsvector(text);
drop function membank_private.cjk_tokens(text);
drop function membank_private.text_language(text);
drop function membank_private.unaccent_text(text);
drop function if exists membank_private.text_candidates(
    uuid[], text, integer, jsonb, text[], text, timestamptz, timestamptz
);
drop function if exists membank_private.scan_candidates(
    uuid[], vector, text, integer, jsonb, text[], text, timestamptz, timestamptz
);
do $$
begin
    if exists (select from pg_catalog.pg_extension as e
               inner join pg_catalog.pg_namespace as n on e.extnamespace = n.oid
               where e.extname = 'unaccent' and n.nspname = 'membank_extensions') then
        drop extension unaccent restrict;
    end if;
end
$$;
