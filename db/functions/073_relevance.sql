-- Relevance: the estimated probability (0..1) that a retrieved memory is
-- evidence for the query, and min_relevance, the floor that lets retrieval
-- answer "nothing relevant".
--
-- Why not a floor on similarity or on the fused score: e5 similarities are
-- compressed (on LoCoMo gibberish scored 0.819 against a scope and the right
-- answer 0.886), and RRF's score is rank-based, so the top of any list looks
-- alike whatever the query asked. A query about something the scope never
-- heard of differs in what the scope's vocabulary knows of it: its content
-- words are unknown there (a name, a topic), the memories match little of
-- its IDF, and its best similarity in the scope is lower. The relevance
-- combines those signals with the memory's similarity and its
-- ranks in a logistic model (Cox 1958; the usual calibration of retrieval
-- scores, e.g. Nottelmann & Fuhr, "From Retrieval Status Values to
-- Probabilities of Relevance", ECIR 2003):
--   relevance = 1 / (1 + exp(-(b0 + sum_i b_i x_i)))
-- over the features of relevance_features (below). The coefficients b are
-- data, fitted by bench/fit_relevance.py on LoCoMo conversations and written
-- to 072_relevance_model.sql with the command that reproduces them; a second
-- model without similarity scores memories with no vector (or queries
-- without an embedding). Each coefficient's sign is fixed by the fit (a
-- feature whose fitted sign contradicts the one below is dropped), so the
-- relevance is monotone in each signal: it rises with similarity (the
-- memory's and the query's best in the scopes) and with the share of the
-- query's IDF the memory matches, and falls with the share of the query's
-- content words the scopes do not know and with the ranks.
--
-- With a query vector the row's probability is multiplied by the query's
-- answerability (below): P(evidence) = P(the scopes answer the query) x
-- P(this row is evidence | they do). The row model separates evidence from
-- the turns around it; whether the scopes know the subject at all is a
-- property of the query, which a query-level model (one row per query)
-- learns far better: on the LoCoMo confirmation conversations the gate at
-- the default floor emptied 69 % of other conversations' questions with the
-- row model alone and 85 % with answerability, at the same recall.

-- name: query_idf_total: the most IDF a memory's text_rank can reach for the queries (the largest over the texts).
create or replace function membank_private.query_idf_total(query_texts text[], scope_ids uuid[])
returns double precision
language plpgsql
stable
security invoker
set search_path to pg_catalog, pg_temp
as $$
begin
    -- per query text, the IDF sum of its lexemes the scopes hold; the
    -- largest over the texts (0 when none is known)
    return (select coalesce(max(t.total), 0)
            from (select (select coalesce(sum(q.idf), 0)
                          from membank_private.text_query(x.query_text, scope_ids, false) as q) as total
                  from unnest(query_texts) as x (query_text)
                  where x.query_text is not null) as t);
end
$$;

-- name: signals_statement: query_signals' statement; %1$s scope_lexicon_base, %2$s scope_lexicon_delta; $1..$4 inputs.
-- Written once, as text: one server runs it as the static body of
-- query_signals_of (made from it below), a Citus node on the scope's shards
-- by name inside retrieve_on_shard (070).
create or replace function membank_private.signals_statement()
returns text
language sql
immutable
parallel safe
security invoker
set search_path to pg_catalog, pg_temp
as $$
    -- $1 query_texts text[], $2 scope_ids uuid[], $3 the scopes' documents
    -- (bigint), $4 whether appended word counts are pending; one row:
    -- idf_total, unknown_share.
    -- idf_total: query_idf_total's value (per query text, the IDF sum of
    -- its lexemes the scopes hold, as text_query weighs them; the largest
    -- over the texts), read in the statement below: on Citus one read of
    -- the scopes' lexicon (a round trip to their worker) where there were two.
    -- unknown_share: of the query's content words (simple parser; a word any
    -- language's configuration drops is a function word and does not count),
    -- the IDF share of those no memory of the scopes holds in any of the
    -- word's lexemes (query_lexemes). An unknown word weighs the IDF of a
    -- document frequency of 0; a known one that of its most frequent
    -- lexeme. No content word at all (stop words only, punctuation): 1.
    select $statement$
    with word as (
        select distinct w.word
        from unnest($1::text[]) as x (query_text)
        cross join lateral unnest(tsvector_to_array(
            to_tsvector('simple', membank_private.unaccent_text(coalesce(x.query_text, ''))))) as w (word)
    ), content as (
        select w.word
        from word as w
        where to_tsvector('english', w.word) <> ''::tsvector and to_tsvector('german', w.word) <> ''::tsvector
          and to_tsvector('french', w.word) <> ''::tsvector and to_tsvector('spanish', w.word) <> ''::tsvector
          and to_tsvector('russian', w.word) <> ''::tsvector
    ), frequency as (
        select c.word,
               (select coalesce(max(f.df), 0)
                from unnest(membank_private.query_lexemes(c.word)) as l (lexeme)
                cross join lateral (
                    select (select coalesce(sum(x.doc_count), 0) from %1$s as x
                            where x.scope_id = any($2) and x.lexeme = l.lexeme)
                           + case when $4
                                  then (select coalesce(sum(x.doc_count), 0)
                                        from %2$s as x
                                        where x.scope_id = any($2) and x.lexeme = l.lexeme)
                                  else 0 end as df
                ) as f) as df
        from content as c
    ), idf as (
        select coalesce(max(t.total), 0) as total
        from (select (select coalesce(sum(membank_private.bm25_idf(d.df, $3)), 0)
                      from unnest(membank_private.query_lexemes(x.query_text)) as q (lexeme)
                      cross join lateral (
                          select (select coalesce(sum(l.doc_count), 0) from %1$s as l
                                  where l.scope_id = any($2) and l.lexeme = q.lexeme)
                                 + case when $4
                                        then (select coalesce(sum(l.doc_count), 0)
                                              from %2$s as l
                                              where l.scope_id = any($2) and l.lexeme = q.lexeme)
                                        else 0 end as df
                      ) as d
                      where d.df > 0) as total
              from unnest($1::text[]) as x (query_text)
              where x.query_text is not null) as t
    )
    select (select i.total from idf as i),
           coalesce(coalesce(sum(membank_private.bm25_idf(0, $3)) filter (where f.df = 0), 0)
                    / nullif(sum(membank_private.bm25_idf(f.df, $3)), 0), 1)
    from frequency as f
    $statement$;
$$;

-- name: query_signals_of: signals_statement on the distributed tables (a static statement, its plan cached).
do $do$
begin
    execute format($create$
create or replace function membank_private.query_signals_of(
    query_texts text[], scope_ids uuid[], documents bigint, pending boolean,
    out idf_total double precision, out unknown_share double precision
)
language plpgsql
stable
security invoker
set search_path to pg_catalog, pg_temp
as $body$
begin
    -- the text of membank_private.signals_statement()
    %s
    into idf_total, unknown_share;
end
$body$
$create$, format(membank_private.signals_statement(), 'membank_private.scope_lexicon_base',
                 'membank_private.scope_lexicon_delta'));
end
$do$;

-- name: query_signals: what the scopes know of the query: the IDF its known lexemes can score, the unknown share.
create or replace function membank_private.query_signals(
    query_texts text[], scope_ids uuid[], out idf_total double precision, out unknown_share double precision
)
language plpgsql
stable
security invoker
set search_path to pg_catalog, pg_temp
as $$
declare
    _counts record := membank_private.scope_counts(scope_ids);
begin
    if not exists (select from unnest(query_texts) as x (query_text) where not membank_private.is_blank(x.query_text)) then
        -- An embedding without text: nothing to weigh, every word counts as known.
        idf_total := null;
        unknown_share := 0;
        return;
    end if;
    -- signals_statement says what each signal is
    select s.idf_total, s.unknown_share into idf_total, unknown_share
    from membank_private.query_signals_of(query_texts, scope_ids, _counts.documents, _counts.pending) as s;
end
$$;

-- name: relevance_features: the features of the relevance model, in the order of its coefficients.
create or replace function membank_private.relevance_features(
    similarity double precision, top_similarity double precision, match_share double precision,
    unknown_share double precision, vector_rank integer, text_match_rank integer
) returns double precision[]
language plpgsql
immutable
parallel safe
security invoker
set search_path to pg_catalog, pg_temp
as $$
begin
    -- PL/pgSQL: one expression, evaluated without a plan per call (as a SQL
    -- function with a SET clause it was planned on every call: 12 us of the
    -- 24 a row's relevance cost, 2026-12-03).
    -- With a similarity (model 'hybrid'):
    --   similarity (1 - cosine distance), top_similarity (the query's best
    --   similarity in the scopes: the vector list's first), match_share (0..1), unknown_share (0..1),
    --   ln(vector rank) and ln(text rank), each capped at 100 (a list it is
    --   not in counts as rank 100; retrieve_memories passes the scopes'
    --   size + 1 when that is less), both (1 when both lists hold it).
    -- Without (model 'text'): match_share, unknown_share, ln(text rank).
    return case when similarity is not null
                then array[similarity, coalesce(top_similarity, similarity), coalesce(match_share, 0),
                           coalesce(unknown_share, 1),
                           ln(least(coalesce(vector_rank, 100), 100)), ln(least(coalesce(text_match_rank, 100), 100)),
                           case when vector_rank is not null and text_match_rank is not null then 1 else 0 end]
                else array[coalesce(match_share, 0), coalesce(unknown_share, 1),
                           ln(least(coalesce(text_match_rank, 100), 100))]
           end::double precision [];
end
$$;

-- name: relevance: the fitted logistic model's probability that a memory is evidence for the query.
create or replace function membank_private.relevance(
    similarity double precision, top_similarity double precision, match_share double precision,
    unknown_share double precision, vector_rank integer, text_match_rank integer
) returns double precision
language plpgsql
immutable
parallel safe
security invoker
set search_path to pg_catalog, pg_temp
as $$
declare
    _f double precision [] := membank_private.relevance_features(similarity, top_similarity, match_share,
                                                                 unknown_share, vector_rank, text_match_rank);
    -- each model's coefficients a constant argument: folded once when the
    -- expression is planned (once per session), not read per row
    _b double precision [] := case when similarity is not null then membank_private.relevance_coefficients('hybrid')
                                   else membank_private.relevance_coefficients('text') end;
    _s double precision := 0;
begin
    -- PL/pgSQL, whose statements are planned once per session: as a SQL
    -- function with a SET clause it was planned on every call, 0.11 ms of
    -- each row retrieve_memories returns (0.05 ms now; 50 rows for the
    -- re-ranker's first pass). The sum runs in the coefficients' order, as
    -- sum() over unnest did: the same bits.
    for _i in 1 .. cardinality(_f) loop
        _s := _s + _b[_i + 1] * _f[_i];
    end loop;
    return 1 / (1 + exp(-least(greatest(_b[1] + _s, -500), 500)));
end
$$;

-- name: answerability: the fitted probability that the scopes hold an answer to the query (query-level model).
create or replace function membank_private.answerability(
    best_row_relevance double precision, top_similarity double precision, unknown_share double precision
) returns double precision
language sql
immutable
parallel safe
security invoker
set search_path to pg_catalog, pg_temp
as $$
    -- A second logistic model, over the query rather than the row (fitted
    -- by bench/fit_relevance.py on the same LoCoMo rows: positives, a
    -- conversation's own questions; negatives, the other conversations'
    -- questions and gibberish asked in its scope): the logit of the top k's
    -- best row relevance (relevance, above), the query's best similarity in
    -- the scopes and the share of its content words they do not know. A
    -- question about a person or topic the scopes never heard of has a best
    -- similarity below what answerable questions reach and unknown words;
    -- the row model alone, fitted mostly on ranking evidence against the
    -- turns around it, underweights both. Without a query vector (no
    -- top_similarity) it is 1: the text model's relevance stands alone.
    select case when top_similarity is null or best_row_relevance is null then 1::double precision
                else 1 / (1 + exp(-least(greatest(
                         b.c[1] + b.c[2] * ln(greatest(least(best_row_relevance, 1 - 1e-9), 1e-9)
                                              / (1 - greatest(least(best_row_relevance, 1 - 1e-9), 1e-9)))
                         + b.c[3] * top_similarity + b.c[4] * coalesce(unknown_share, 1), -500), 500)))
           end
    from (select membank_private.relevance_coefficients('query') as c) as b;
$$;

-- name: check_min_relevance: validate min_relevance (0..1 or null; 22023 naming the argument).
create or replace function membank_private.check_min_relevance(min_relevance double precision)
returns void
language plpgsql
immutable
security invoker
set search_path to pg_catalog, pg_temp
as $$
begin
    -- NaN compares greater than every number: it would pass "<= 1".
    if min_relevance = 'NaN'::double precision or min_relevance not between 0 and 1 then
        perform membank_private._raise_invalid('min_relevance',
            format('must be between 0 and 1, got %s', min_relevance),
            format('relevance is the estimated probability that a memory is evidence for the query; '
                   'membank.default_min_relevance() is %s, null keeps every row',
                   membank.default_min_relevance()));
    end if;
end
$$;
