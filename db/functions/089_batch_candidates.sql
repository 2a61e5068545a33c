-- Candidate search for a batch of consolidation facts in a scope of 201 ..
-- 2000 memories: per fact, the lists retrieve_memories' hybrid_candidates
-- builds there (070), in one statement per list instead of one call per
-- fact. Vector list: vector_candidates (062) without filters, where the
-- best rerank_depth by Hamming distance over the centred binary codes are
-- re-ranked by exact cosine distance (scopes of at most rerank_depth
-- memories: all of them, ranked exactly); text list: text_candidates (061)
-- below its big-scope branch (MaxScore above 2000 memories). The lists are
-- fused as hybrid_candidates fuses them (scope_memory_candidates, 093).
-- Each read names the scope_id: on Citus a router query on its shard.

-- name: reranked_vector_hits: vector_candidates' list (depth 50) for each query i = first, first + 1, ...
-- rerank_depth is retrieve_memories' default (400); quantized: whether
-- vector_candidates takes the Hamming step (the scope holds more than
-- rerank_depth memories; false: every vector is ranked exactly). Its
-- `order by Hamming distance limit rerank_depth` keeps an unspecified part
-- of the vectors tied at the cut: undecided lists the queries where one of
-- those could reach the list (it is then not known: the caller asks
-- retrieve_memories); for the others every choice gives the same list.
create or replace function membank_private.reranked_vector_hits(
    scope_id uuid, queries vector[], first integer, quantized boolean,
    out facts integer[], out names uuid[], out distances double precision[], out undecided integer[]
)
language plpgsql
stable
security invoker
set search_path from current
as $$
declare
    _centroid vector;
begin
    select c.centroid into _centroid from membank_private.embedding_config as c;
    -- materialized: each query quantized, and its cut found, once
    with query as materialized (
        select first + q.n::integer - 1 as i, q.query, membank_private.quantize(q.query, _centroid) as query_bq
        from unnest(queries) with ordinality as q (query, n)
    ), scope_vector as materialized (
        -- the vectors vector_candidates ranks: expiry judged on memory_embeddings' copy
        select e.name, e.embedding, e.embedding_bq
        from membank_private.memory_embeddings as e
        where e.scope_id = reranked_vector_hits.scope_id
          and (e.expire_time is null or e.expire_time > statement_timestamp())
    ), cut as materialized (
        -- the Hamming distance of the rerank_depth-th best (null: no cut)
        select q.i, q.query, q.query_bq,
               case when quantized then (select v.embedding_bq <~> q.query_bq from scope_vector as v
                                         order by 1 offset 399 limit 1) end as hamming
        from query as q
    ), reranked as materialized (
        -- every vector within the cut (more than rerank_depth when some tie at
        -- it), its distance computed here: the rows sorted below then carry no
        -- vectors (carried, a batch's sort spilled tens of MB to disk)
        select c.i, v.name, v.embedding <=> c.query as distance, (v.embedding_bq <~> c.query_bq) = c.hamming as at_cut
        from cut as c
        cross join scope_vector as v
        where c.hamming is null or (v.embedding_bq <~> c.query_bq) <= c.hamming
    ), tied as (
        -- the queries whose cut kept only some of the vectors tied at it
        select r.i from reranked as r group by r.i having count(*) > 400
    ), hit as (
        select r.i, r.name, r.distance, r.at_cut and r.i in (select t.i from tied as t) as maybe_cut,
               row_number() over (partition by r.i order by r.distance, r.name) as position
        from reranked as r
    )
    select array_agg(h.i order by h.i, h.position), array_agg(h.name order by h.i, h.position),
           array_agg(h.distance order by h.i, h.position),
           coalesce(array_agg(distinct h.i) filter (where h.maybe_cut), '{}')
    into facts, names, distances, undecided
    from hit as h
    where h.position <= 50;
end
$$;

-- name: scope_text_hits: text_candidates' list (depth 50, no filters) for each query text i = first, first + 1, ...
-- documents: the scope's memories (scope_documents, at most 2000: above,
-- text_candidates reads fewer rows by MaxScore, the same list); rare_only
-- as hybrid_candidates passes it. Document frequencies as text_query reads
-- them (the scope's lexicon), for the batch's lexemes at once; each
-- match scored as text_candidates scores it, its lexemes summed in the
-- same order (a real's last bit can decide a tie).
create or replace function membank_private.scope_text_hits(
    scope_id uuid, texts text[], first integer, documents bigint, rare_only boolean,
    out facts integer[], out names uuid[], out text_ranks real[], out text_tiebreaks real[]
)
language plpgsql
stable
security invoker
set search_path to pg_catalog, pg_temp
as $$
declare
    _pending boolean;
begin
    _pending := exists (select from membank_private.scope_stats_base as s
                        where s.scope_id = scope_text_hits.scope_id and s.pending);
    with query_lexeme as materialized (
        select first + q.n::integer - 1 as i, l.n, l.lexeme
        from unnest(texts) with ordinality as q (query_text, n)
        cross join lateral unnest(membank_private.query_lexemes(q.query_text)) with ordinality as l (lexeme, n)
    ), frequency as materialized (
        select d.lexeme,
               (select coalesce(sum(x.doc_count), 0) from membank_private.scope_lexicon_base as x
                where x.scope_id = scope_text_hits.scope_id and x.lexeme = d.lexeme)
               + case when _pending
                      then (select coalesce(sum(x.doc_count), 0) from membank_private.scope_lexicon_delta as x
                            where x.scope_id = scope_text_hits.scope_id and x.lexeme = d.lexeme)
                      else 0 end as df
        from (select distinct l.lexeme from query_lexeme as l) as d
    ), weighed as (
        -- text_query: the lexemes the scope holds, and which ones seek
        -- bm25_idf inlined (a SQL function with a SET clause is called, not inlined: 6 us a row)
        select l.i, l.n, l.lexeme, ln(1 + (documents - f.df + 0.5) / (f.df + 0.5))::double precision as idf,
               f.df * 2 <= documents or not (bool_or(f.df * 2 <= documents) over (partition by l.i) or rare_only)
                   as seeks
        from query_lexeme as l
        inner join frequency as f on f.lexeme = l.lexeme
        where f.df > 0
    ), text_query as (
        -- text_candidates' arrays and tsqueries, in the order of query_lexemes
        select w.i,
               array_agg(quote_literal(w.lexeme)::tsquery order by w.n) as lexemes,
               array_agg((quote_literal(w.lexeme) || ':A')::tsquery order by w.n) as fact_lexemes,
               array_agg(w.idf order by w.n) as idfs,
               nullif(string_agg(quote_literal(w.lexeme), ' | ' order by w.n) filter (where w.seeks), '')::tsquery
                   as seeking,
               nullif(string_agg(quote_literal(w.lexeme), ' | ' order by w.n), '')::tsquery as all_lexemes
        from weighed as w
        group by w.i
    ), text_match as (
        select q.i, m.name, m.fact,
               (select sum(case when m.fts @@ t.fact_lexeme then t.idf else 0.5 * t.idf end)
                from unnest(q.lexemes, q.fact_lexemes, q.idfs) as t (lexeme, fact_lexeme, idf)
                where m.fts @@ t.lexeme)::real as text_rank,
               ts_rank(m.fts, q.all_lexemes, 1) as text_tiebreak
        from text_query as q
        inner join membank_private.memories as m on m.scope_id = scope_text_hits.scope_id and m.fts @@ q.seeking
        where q.seeking is not null
          and (m.expire_time is null or m.expire_time > statement_timestamp())
    ), hit as (
        select t.i, t.name, t.text_rank, t.text_tiebreak,
               row_number() over (partition by t.i order by t.text_rank desc, t.text_tiebreak desc,
                                                            t.fact collate "C", t.name) as position
        from text_match as t
    )
    select array_agg(h.i order by h.i, h.position), array_agg(h.name order by h.i, h.position),
           array_agg(h.text_rank order by h.i, h.position), array_agg(h.text_tiebreak order by h.i, h.position)
    into facts, names, text_ranks, text_tiebreaks
    from hit as h
    where h.position <= 50;
end
$$;

-- name: quantized_scope_candidates: retrieve_memories' top 5 for each query of a batch, in a scope of 201 .. 2000.
-- texts and queries: the facts' texts and checked vectors (i = first, ...);
-- documents: the scope's memories; rare_only as hybrid_candidates computes
-- it. Returns {"i": [{name, revision, fact, similarity}, ...]} as
-- scope_memory_candidates' statement does (without event times), or null
-- where retrieve_memories' lists cannot be reproduced: more than 2000
-- memories, a per-scope HNSW index (an approximate list), a fact without a
-- vector; a JSON null under i where fact i's vector list is not known
-- (vectors tied at the rerank cut: reranked_vector_hits).
create or replace function membank_private.quantized_scope_candidates(
    o membank_private.operations, texts text[], queries vector[], first integer, documents bigint,
    rare_only boolean
) returns jsonb
language plpgsql
stable
security invoker
set search_path from current
as $$
declare
    _vectors record;
    _texts record;
    _found jsonb;
begin
    if documents > 2000 or exists (select from unnest(queries) as q where q is null)
       or (documents > 400 and membank_private.scope_hnsw_ready(o.scope_id, vector_dims(queries[1]))) then
        return null;
    end if;
    select * into _vectors from membank_private.reranked_vector_hits(o.scope_id, queries, first, documents > 400);
    select * into _texts from membank_private.scope_text_hits(o.scope_id, texts, first, documents, rare_only);
    -- hybrid_candidates' RRF fusion (rrf_k 10, weights 1) and retrieve_memories'
    -- single-query top k (5) with its tie-breaks, per fact
    with vector_hit as (
        select v.i, v.name, v.distance, (rank() over (partition by v.i order by v.distance))::integer as rank
        from unnest(_vectors.facts, _vectors.names, _vectors.distances) as v (i, name, distance)
    ), text_hit as (
        select t.i, t.name, t.text_rank, t.text_tiebreak,
               (rank() over (partition by t.i order by t.text_rank desc, t.text_tiebreak desc))::integer as rank
        from unnest(_texts.facts, _texts.names, _texts.text_ranks, _texts.text_tiebreaks)
            as t (i, name, text_rank, text_tiebreak)
    ), fused as (
        select coalesce(v.i, t.i) as i, coalesce(v.name, t.name) as name, v.distance,
               t.text_rank, t.text_tiebreak,
               coalesce(1::double precision / (10 + v.rank), 0) + coalesce(1::double precision / (10 + t.rank), 0)
                   as score
        from vector_hit as v
        full join text_hit as t on t.i = v.i and t.name = v.name
    ), top as (
        -- a text-only hit's distance, for the rows that can reach the top 5
        select s.i, s.name, coalesce(s.distance, e.embedding <=> queries[s.i - first + 1]) as distance,
               s.text_rank, s.text_tiebreak, s.score
        from (select f.*, rank() over (partition by f.i order by f.score desc) as score_rank from fused as f) as s
        left join membank_private.memory_embeddings as e on e.scope_id = o.scope_id and e.name = s.name
        where s.score_rank <= 5
    ), ranked as (
        select t.i, m.name, m.revision, m.fact, m.memory_type, t.score, t.distance,
               row_number() over (partition by t.i order by t.score desc, t.distance nulls last,
                                  t.text_rank desc nulls last, t.text_tiebreak desc nulls last,
                                  m.fact collate "C", m.name) as position
        from top as t
        inner join membank_private.memories as m on m.scope_id = o.scope_id and m.name = t.name
        where m.scope = o.scope and (m.expire_time is null or m.expire_time > statement_timestamp())
    )
    select coalesce(jsonb_object_agg(x.i::text, x.memories), '{}')
    into _found
    from (select r.i, jsonb_agg(jsonb_build_object(
                     'name', r.name, 'revision', r.revision, 'fact', r.fact,
                     'similarity', round((1 - r.distance)::numeric, 4)) order by r.score desc, r.name) as memories
          from ranked as r
          where r.position <= 5 and r.memory_type = 'NATURAL_LANGUAGE'
          group by r.i) as x;
    -- the facts whose vector list is not known: JSON null, asked fact by fact
    return _found || coalesce((select jsonb_object_agg(u.i::text, 'null'::jsonb)
                               from unnest(_vectors.undecided) as u (i)), '{}');
end
$$;
