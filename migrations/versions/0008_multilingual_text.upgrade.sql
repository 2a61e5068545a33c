-- 0008 upgrade: full text in the fact's language.
--
-- Each fact is indexed with the text search configuration of its language,
-- detected per fact (text_language): Cyrillic -> russian; otherwise the
-- Latin-script language whose function words the fact uses most (english,
-- german, french, spanish; english when none or a tie). Latin text is
-- unaccented before stemming. Runs of CJK characters (Han, Kana, Hangul)
-- are indexed as character unigrams and bigrams, the usual fallback for
-- scripts without spaces (as in Lucene's CJKBigramFilter), so a query that
-- shares a sub-word with a fact matches it through the same GIN index.

-- unaccent, when membank installs it, goes into membank_extensions, like
-- pgvector (see 0002); the wrapper below names its schema explicitly.
do $$
begin
    if not exists (select from pg_catalog.pg_extension where extname = 'unaccent') then
        create schema if not exists membank_extensions;
        revoke all on schema membank_extensions from public;
        create extension unaccent schema membank_extensions;
    end if;
end
$$;

-- unaccent() is stable (its dictionary could be reloaded); the wrapper is
-- immutable with the dictionary named, so a stored column may use it.
do $$
declare
    _schema name;
begin
    select n.nspname into _schema
    from pg_catalog.pg_extension as e
    inner join pg_catalog.pg_namespace as n on e.extnamespace = n.oid
    where e.extname = 'unaccent';
    execute format($f$
        create function membank_private.unaccent_text(input text)
        returns text
        language sql
        immutable
        parallel safe
        strict
        security invoker
        set search_path to pg_catalog, pg_temp
        return %1$I.unaccent(%2$L::regdictionary, input)
    $f$, _schema, format('%I.unaccent', _schema));
end
$$;

-- name: text_language: the text search configuration of a text's language (detected).
create function membank_private.text_language(input text)
returns regconfig
language sql
immutable
parallel safe
security invoker
set search_path to pg_catalog, pg_temp
as $$
    select case
        when input ~ '[\u0400-\u04ff]' then 'russian'::regconfig
        else coalesce((
            select w.config
            from regexp_split_to_table(lower(membank_private.unaccent_text(input)), '[^a-z]+') as t (word)
            inner join (values
                ('english'::regconfig, array['the', 'and', 'is', 'are', 'was', 'were', 'to', 'of', 'in', 'my', 'you',
                                             'it', 'that', 'with', 'for', 'have', 'has', 'what', 'did', 'this', 'on',
                                             'at', 'i', 'we', 'be', 'not', 'she', 'he', 'they', 'her', 'his', 'do']),
                ('german'::regconfig, array['der', 'die', 'das', 'und', 'ist', 'ich', 'nicht', 'mit', 'ein', 'eine',
                                            'zu', 'den', 'auf', 'sie', 'es', 'wir', 'mein', 'meine', 'hat', 'im', 'dem',
                                            'sind', 'war', 'auch', 'fur', 'von', 'wie', 'was', 'bei', 'einen']),
                ('french'::regconfig, array['le', 'la', 'les', 'et', 'est', 'je', 'un', 'une', 'des', 'du', 'pas', 'que',
                                            'qui', 'dans', 'avec', 'mon', 'ma', 'mes', 'pour', 'il', 'elle', 'nous',
                                            'sont', 'au', 'aux', 'ce', 'sur', 'ou', 'vous', 'ai', 'suis']),
                ('spanish'::regconfig, array['el', 'la', 'los', 'las', 'y', 'es', 'yo', 'un', 'una', 'que', 'en', 'con',
                                             'por', 'para', 'mi', 'muy', 'pero', 'esta', 'su', 'del', 'al', 'se', 'lo',
                                             'como', 'mis', 'son', 'tiene', 'hay', 'donde'])
            ) as w (config, words) on t.word = any(w.words)
            group by w.config
            order by count(*) desc, w.config = 'english'::regconfig desc, w.config::text
            limit 1
        ), 'english'::regconfig)
    end
$$;

-- name: cjk_tokens: the character unigrams and bigrams of a text's CJK runs, with positions.
create function membank_private.cjk_tokens(input text)
returns tsvector
language sql
immutable
parallel safe
security invoker
set search_path to pg_catalog, pg_temp
as $$
    select coalesce((
        select string_agg(format('''%s'':%s', g.token, g.position), ' ' order by g.position)::tsvector
        from (
            select t.token, row_number() over (order by r.n, i.i, t.kind) as position
            from regexp_matches(input, '[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af]+', 'g')
                with ordinality as r (run, n)
            cross join lateral generate_series(1, char_length(r.run[1])) as i (i)
            cross join lateral (values (1, substr(r.run[1], i.i, 1)), (2, substr(r.run[1], i.i, 2))) as t (kind, token)
            where char_length(t.token) = t.kind
        ) as g
    ), ''::tsvector)
$$;

-- name: fact_tsvector: a fact's full-text vector, in its language, with CJK unigrams and bigrams.
create function membank_private.fact_tsvector(input text)
returns tsvector
language sql
immutable
parallel safe
security invoker
set search_path to pg_catalog, pg_temp
as $$
    select to_tsvector(
        membank_private.text_language(input),
        membank_private.unaccent_text(
            regexp_replace(input, '[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af]+', ' ', 'g'))
    ) || membank_private.cjk_tokens(input)
$$;

drop index membank_private.memories_scope_fts_idx;
alter table membank_private.memories drop column fts;
alter table membank_private.memories
add column fts tsvector generated always as (membank_private.fact_tsvector(coalesce(fact, ''))) stored;
create index memories_scope_fts_idx
on membank_private.memories using gin (scope_id, fts);

-- The lexicon counts the new lexemes (the statement triggers did not fire
-- for the column rewrite).
delete from membank_private.scope_lexicon;
insert into membank_private.scope_lexicon (scope_id, lexeme, doc_count)
select
    m.scope_id,
    l.lexeme,
    count(*) as doc_count
from membank_private.memories as m
cross join lateral unnest(tsvector_to_array(m.fts)) as l (lexeme)
group by m.scope_id, l.lexeme;

-- retrieve_memories takes several queries (sub-query decomposition).
drop function if exists membank.retrieve_memories(
    jsonb, text, real[], integer, double precision, jsonb, text[], text, timestamptz, timestamptz,
    text, double precision, double precision, integer, text, integer, integer, text
);

-- The candidate functions return a tie-break score as well.
drop function if exists membank_private.text_candidates(
    uuid[], text, integer, jsonb, text[], text, timestamptz, timestamptz
);
drop function if exists membank_private.scan_candidates(
    uuid[], vector, text, integer, jsonb, text[], text, timestamptz, timestamptz
);
