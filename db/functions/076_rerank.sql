-- Re-ranking: a second pass of retrieve_memories (070, rerank => true) over
-- the fused top 50 of the first pass, ordered by a learned model's
-- probability that each candidate is evidence for the query.
--
-- Why: on LoCoMo, 40 % of the evidence the first pass misses at rank 10 sits
-- at fused rank 11-50 (docs/retrieval.md). The first pass judges each memory
-- alone; the second looks at the list as a whole and at who said what:
-- where each candidate was said relative to the top hits (same session,
-- turns apart, the turns just before and after it), and whether the
-- question names the candidate's author ("What did Melanie paint?" is
-- answered by what Melanie said, not by the turn where Caroline asks her
-- about painting; the author is that of the memory's first source event).
--
-- The model is a logistic regression (Cox 1958) over rerank_features below:
--   p = 1 / (1 + exp(-(b0 + sum_i b_i x_i)))
-- with the coefficients b fitted by bench/fit_rerank.py on the LoCoMo tuning
-- conversations and written to 074_rerank_model.sql with the command that
-- reproduces them. The fit reads its features from rerank_features over the
-- same first pass that the product re-ranks (membank_private.fused_memories:
-- the fused top 50 of lists 50 deep), so the fit and the product compute
-- the same numbers. Features dropped by refits (docs/retrieval.md): the
-- rare words and the names a candidate shares with the top hits
-- (2026-12-02 and 2026-12-03: no recall lost without them, and the names
-- were two thirds of the features' time). A learned re-ranker
-- over a first-stage list is the usual second stage of retrieval (e.g.
-- Nogueira & Cho, "Passage Re-ranking with BERT", 2019); this one uses only
-- signals SQL already holds: no model call.

-- name: rerank_feature_names: the names of rerank_features' columns, in order (what 074's coefficients follow).
create or replace function membank_private.rerank_feature_names()
returns text[]
language sql
immutable
parallel safe
security invoker
set search_path to pg_catalog, pg_temp
as $$
    select array[
        'fused', 'ln_fused_rank', 'similarity', 'similarity_gap', 'ln_vector_rank',
        'ln_text_rank', 'relevance_logit', 'prev_score', 'next_score', 'session_top3', 'session_hits10',
        'near_top5', 'asked_author'
    ]::text [];
$$;

-- name: rerank_features: each first-pass candidate's features for the re-ranker (rerank_feature_names' order).
create or replace function membank_private.rerank_features(
    scope_ids uuid[], query_texts text[], candidates membank.retrieved_memory[]
) returns table (name uuid, features double precision[])
language plpgsql
stable
rows 50
security invoker
set search_path to pg_catalog, pg_temp
as $$
declare
    _asked_proper text [];
begin
    -- candidates: retrieve_memories' rows in their fused order (position 1 first).
    _asked_proper := array(select distinct lower(m[1])
                           from unnest(query_texts) as t (query_text)
                           cross join lateral regexp_matches(coalesce(t.query_text, ''), '\m([A-Z][a-z]+)', 'g') as m);
    return query
    with candidate as (
        select c.ordinality::integer as position, c.name, c.fact, c.score, c.similarity, c.vector_rank,
               c.text_match_rank, c.relevance
        from unnest(candidates) with ordinality as c
    ), placed as materialized (
        -- Where each was said: its session, and its turn there (how many
        -- live memories of the session were said before it; one range count
        -- on memories_scope_source_idx each, a fiftieth of the features'
        -- cost: measured, not worth a stored turn that every write, erasure
        -- and expiry would have to keep).
        -- scope_id named on every read: on Citus one query on the scope's shard.
        select c.*, m.scope_id, m.source_session_id as session,
               case when m.source_session_id is not null then (
                   select count(*)
                   from membank_private.memories as b
                   where b.scope_id = any(scope_ids) and b.scope_id = m.scope_id
                     and b.source_session_id = m.source_session_id
                     and (b.source_event_time, b.source_append_seq) < (m.source_event_time, m.source_append_seq)
                     and (b.expire_time is null or b.expire_time > statement_timestamp())
               ) end as turn,
               -- whether the question names who said it: the author of
               -- its first source event (the event that placed it; one
               -- lookup on events_session_time_idx), a word of it among
               -- the question's capitalised words
               coalesce((
                   select regexp_split_to_array(lower(e.author), '\W+') && _asked_proper
                   from membank_private.events as e
                   where e.scope_id = any(scope_ids) and e.scope_id = m.scope_id
                     and e.session_id = m.source_session_id and e.event_time = m.source_event_time
                     and e.append_seq = m.source_append_seq
               ), false) as asked_author
        from candidate as c
        left join membank_private.memories as m on m.scope_id = any(scope_ids) and m.name = c.name
    ), session_pairs as (
        -- each candidate against the others of its session, in one pass (a
        -- session name is its scope's own: never another scope's, as 069)
        select p.position,
               max(o.score) filter (where o.turn = p.turn - 1) as prev_score,
               max(o.score) filter (where o.turn = p.turn + 1) as next_score,
               bool_or(o.position <= 3) as session_top3,
               count(*) filter (where o.position <= 10) as session_hits10,
               min(abs(o.turn - p.turn)) filter (where o.position <= 5) as near_top5
        from placed as p
        inner join placed as o on o.scope_id = p.scope_id and o.session = p.session and o.position <> p.position
        group by p.position
    ), best as (
        select coalesce(max(p.similarity), 0) as similarity from placed as p
    )
    select p.name, array[
        p.score,
        ln(p.position),
        coalesce(p.similarity, 0),
        b.similarity - coalesce(p.similarity, 0),
        ln(coalesce(p.vector_rank, 51)),
        ln(coalesce(p.text_match_rank, 51)),
        ln(least(greatest(coalesce(p.relevance, 1e-6), 1e-6), 1 - 1e-6)
           / (1 - least(greatest(coalesce(p.relevance, 1e-6), 1e-6), 1 - 1e-6))),
        -- the fused scores of the turns said right before and right after it (0: not among the candidates)
        coalesce(s.prev_score, 0),
        coalesce(s.next_score, 0),
        -- shares a session with another top-3 hit; other top-10 hits in its session; 1 / turns to the nearest top-5 hit
        coalesce(s.session_top3, false)::integer,
        coalesce(s.session_hits10, 0),
        coalesce(1.0 / greatest(s.near_top5, 1), 0),
        -- the question names its author
        p.asked_author::integer
    ]::double precision []
    from placed as p
    cross join best as b
    left join session_pairs as s on s.position = p.position
    order by p.position;
end
$$;

-- name: rerank_probability: the fitted re-ranker's probability that a candidate is evidence (074's coefficients).
create or replace function membank_private.rerank_probability(features double precision[])
returns double precision
language plpgsql
immutable
parallel safe
security invoker
set search_path to pg_catalog, pg_temp
as $$
declare
    _b double precision [] := membank_private.rerank_coefficients();
    _z double precision := _b[1];
begin
    -- PL/pgSQL: no statement to plan per call (50 calls per re-ranking)
    for _i in 1 .. cardinality(features) loop
        _z := _z + _b[_i + 1] * features[_i];
    end loop;
    return 1 / (1 + exp(-least(greatest(_z, -500), 500)));
end
$$;
