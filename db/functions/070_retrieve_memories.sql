-- RetrieveMemories: hybrid search inside exact scopes.
--
-- Two candidate lists, fused:
-- * vector: cosine distance (pgvector <=>) between the query embedding and
--   each memory's current vector. Candidates come from Hamming distance over
--   the binary quantization (1 bit/dimension, of v - the bank's centroid)
--   kept in the covering index
--   memory_embeddings_scope_idx, which a scope reads as one index range,
--   never touching the heap; the best `rerank_depth` of those are re-ranked
--   by exact cosine distance. Why not HNSW: a global HNSW index filtered by
--   scope degrades on small scopes (max_scan_tuples: fewer than k rows) and
--   on big ones costs ~100 ms with iterative scans, while a scope-local
--   exact scan of full vectors is heap-bound (a 30k-row scope reads ~28k
--   heap blocks). The quantized index range is the per-scope structure:
--   48 bytes per 384-d memory. Scopes smaller than rerank_depth are ranked
--   exactly. With filters, the vector list is an exact scan of the filtered
--   rows, so filters never cost results. A scope of at most 200 memories
--   (and rerank_depth) is read once for both lists (scan_candidates).
-- * text: full text (english) over a GIN (scope_id, fts) index; the query's
--   lexemes are OR-ed and a match scores the sum of the IDF of the lexemes
--   it holds (BM25's IDF from per-scope document frequencies; no tf or
--   length term: memories are short, and on LoCoMo turns the plain IDF sum
--   beat BM25 with k1 = 1.2, b = 0.75 by 0.03 recall@10).
-- Fusion: Reciprocal Rank Fusion, score = sum over lists of
--   weight / (rrf_k + rank), Cormack, Clarke & Buettcher, SIGIR 2009, k = 60;
-- or a convex combination of min-max-normalised scores (weights 0.7 / 0.3),
-- Bruch, Gai & Ingber, "An Analysis of Fusion Functions for Hybrid
-- Retrieval", TOIS 2023.

-- name: check_retrieval_options: validate the scalar options of retrieve_memories (22023 naming each).
create or replace function membank_private.check_retrieval_options(
    top_k integer, fusion text, vector_weight double precision, text_weight double precision,
    rrf_k integer, min_similarity double precision, rerank_depth integer
) returns void
language plpgsql
immutable
security invoker
set search_path to pg_catalog, pg_temp
as $$
begin
    if top_k not between 1 and 100 then
        perform membank_private._raise_invalid('top_k',
            format('must be between 1 and 100, got %s', top_k), 'the default top_k is 3 (with a query)');
    end if;
    if fusion is null or fusion not in ('rrf', 'convex') then
        perform membank_private._raise_invalid('fusion',
            format('unknown fusion %s', coalesce(to_jsonb(fusion)::text, 'null')),
            'use rrf (Reciprocal Rank Fusion, default) or convex (min-max normalised weighted sum)');
    end if;
    if vector_weight < 0 or text_weight < 0 or vector_weight + text_weight = 0 then
        perform membank_private._raise_invalid('vector_weight',
            format('weights %s and %s: each must be >= 0 and not both 0', vector_weight, text_weight),
            'e.g. vector_weight => 1, text_weight => 1');
    end if;
    if rrf_k is null or rrf_k not between 1 and 1000000 then
        perform membank_private._raise_invalid('rrf_k',
            format('must be between 1 and 1000000, got %s', coalesce(rrf_k::text, 'null')),
            'the default, 60, is the value of Cormack et al. (SIGIR 2009)');
    end if;
    if min_similarity is not null and min_similarity not between -1 and 1 then
        perform membank_private._raise_invalid('min_similarity',
            format('must be between -1 and 1, got %s', min_similarity),
            'similarity is 1 - cosine distance; e.g. 0.8');
    end if;
    if rerank_depth is null or rerank_depth not between 1 and 10000 then
        perform membank_private._raise_invalid('rerank_depth',
            format('must be between 1 and 10000, got %s', coalesce(rerank_depth::text, 'null')),
            'the default, 400, re-ranks that many quantized candidates exactly');
    end if;
end
$$;

-- name: retrieve_memories: hybrid (vector + full text, fused) search in exact scopes.
create or replace function membank.retrieve_memories(
    scope jsonb,
    query_text text default null,
    query_embedding real[] default null,
    top_k integer default null,
    min_similarity double precision default null,
    metadata_filter jsonb default null,
    topics text[] default null,
    memory_type text default null,
    created_after timestamptz default null,
    created_before timestamptz default null,
    fusion text default 'rrf',
    vector_weight double precision default null,
    text_weight double precision default null,
    rrf_k integer default 60,
    embedding_model text default null,
    rerank_depth integer default 400,
    page_size integer default 100,
    page_token text default null
) returns setof membank.retrieved_memory
language plpgsql
stable
security definer
set search_path from current
-- Generic plans, cached per session: with auto, PostgreSQL kept re-planning
-- these statements (their generic cost estimates look worse than they run),
-- which was most of the time spent on a small scope. The one statement whose
-- generic plan is wrong for big scopes opts out (text_candidates).
set plan_cache_mode to force_generic_plan
as $$
declare
    _scopes jsonb [] := membank_private.validate_scopes(scope);
    _scope_ids uuid [] := array(select md5(s::text)::uuid from unnest(_scopes) as s);
    _query vector := membank_private.check_query_embedding(
        membank_private.check_vector(query_embedding, 'query_embedding'), embedding_model);
    _topics text [] := case when topics is not null then membank_private.validate_topics(topics) end;
    _k integer := coalesce(top_k, 3);  -- with a query; without one, null leaves the page unbounded by top_k
    _depth integer;
    _wv double precision := coalesce(vector_weight, case when fusion = 'convex' then 0.7 else 1 end);
    _wt double precision := coalesce(text_weight, case when fusion = 'convex' then 0.3 else 1 end);
    _vector_names uuid [];
    _vector_distances double precision [];
    _text_names uuid [];
    _text_ranks real [];
begin
    perform membank_private.check_retrieval_options(top_k, fusion, _wv, _wt, rrf_k, min_similarity, rerank_depth);
    perform membank_private.validate_memory_type(memory_type);
    if length(query_text) > 4000 then
        perform membank_private._raise_invalid('query_text', format('has %s characters', length(query_text)),
            'a query is at most 4000 characters; the embedding model reads only its first 512 tokens anyway');
    end if;
    if metadata_filter is not null then
        perform membank_private.validate_object(metadata_filter, 'metadata_filter');
    end if;

    if query_embedding is null and membank_private.is_blank(query_text) then
        -- No query: the scope's memories, paged, oldest first; top_k, when
        -- given, bounds the page.
        return query
        select l.name, l.scope, l.memory_type, l.fact, l.structured_content, l.topics, l.metadata,
               l.revision, l.create_time, l.update_time, l.expire_time,
               null::double precision, null::double precision, null::real, null::integer, null::integer,
               null::double precision, '{}'::text [], false, l.next_page_token
        from membank.list_memories(scope, least(page_size, coalesce(top_k, page_size)), page_token,
                                   metadata_filter, topics, memory_type,
                                   created_after, created_before) as l;
        return;
    end if;

    -- Each list is deep enough that fusion can lift an item from either.
    _depth := greatest(_k * 5, 50);
    if (select coalesce(sum(s.doc_count), 0) from membank_private.scope_stats as s where s.scope_id = any(_scope_ids))
       <= least(200, rerank_depth) then
        select c.vector_names, c.vector_distances, c.text_names, c.text_ranks
        into _vector_names, _vector_distances, _text_names, _text_ranks
        from membank_private.scan_candidates(_scope_ids, _query, query_text, _depth, metadata_filter, _topics,
                                             memory_type, created_after, created_before) as c;
    else
        select array_agg(v.name order by v.distance, v.name), array_agg(v.distance order by v.distance, v.name)
        into _vector_names, _vector_distances
        from membank_private.vector_candidates(
            _scope_ids, _query,
            membank_private.quantize(_query, (select c.centroid from membank_private.embedding_config as c)),
            _depth, rerank_depth, metadata_filter, _topics, memory_type, created_after, created_before) as v
        where _query is not null;
        select array_agg(t.name order by t.text_rank desc, t.name), array_agg(t.text_rank order by t.text_rank desc, t.name)
        into _text_names, _text_ranks
        from membank_private.text_candidates(
            _scope_ids, query_text, _depth, metadata_filter, _topics, memory_type, created_after, created_before
        ) as t
        where query_text is not null;
    end if;
    return query
    with vector_list as (
        select v.name, v.distance, (rank() over (order by v.distance))::integer as rank
        from unnest(_vector_names, _vector_distances) as v (name, distance)
    ), text_list as (
        -- Equal scores share a rank (many memories match one common word):
        -- the order among them says nothing, so RRF must not reward it.
        select t.name, t.text_rank, (rank() over (order by t.text_rank desc))::integer as rank
        from unnest(_text_names, _text_ranks) as t (name, text_rank)
    ), fused as (
        select coalesce(v.name, t.name) as name, v.distance, v.rank as vector_rank,
               t.text_rank, t.rank as text_match_rank
        from vector_list as v
        full join text_list as t on t.name = v.name
    ), scored as (
        select f.*,
               case when fusion = 'rrf'
                    then coalesce(_wv / (rrf_k + f.vector_rank), 0) + coalesce(_wt / (rrf_k + f.text_match_rank), 0)
                    -- min-max over this query's candidates (convex fusion)
                    else _wv * coalesce((max(f.distance) over () - f.distance)
                                        / nullif(max(f.distance) over () - min(f.distance) over (), 0),
                                        case when f.vector_rank is not null then 1 else 0 end)
                         + _wt * coalesce((f.text_rank - min(f.text_rank) over ())
                                          / nullif(max(f.text_rank) over () - min(f.text_rank) over (), 0),
                                          case when f.text_match_rank is not null then 1 else 0 end)
               end as score
        from fused as f
    )
    select m.name, m.scope, m.memory_type, m.fact, m.structured_content, m.topics, m.metadata,
           m.revision, m.create_time, m.update_time, m.expire_time,
           d.distance, 1 - d.distance, s.text_rank, s.vector_rank, s.text_match_rank, s.score,
           array_remove(array[case when s.vector_rank is not null then 'vector' end,
                              case when s.text_match_rank is not null then 'text' end], null),
           _query is null or e.name is null,
           null::text
    from scored as s
    inner join membank_private.memories as m on m.name = s.name
    left join membank_private.memory_embeddings as e on e.name = s.name and _query is not null
    -- A text-only hit still gets its true cosine distance when it has a vector.
    cross join lateral (select coalesce(s.distance, e.embedding <=> _query) as distance) as d
    where m.scope = any(_scopes)
      and (m.expire_time is null or m.expire_time > statement_timestamp())
      and (min_similarity is null or 1 - d.distance >= min_similarity)
    order by s.score desc, d.distance nulls last, m.name
    limit _k;
end
$$;

comment on function membank.retrieve_memories(
    jsonb, text, real[], integer, double precision, jsonb, text[], text, timestamptz, timestamptz,
    text, double precision, double precision, integer, text, integer, integer, text
) is
$$RetrieveMemories: the top_k (1..100, default 3) live memories of one exact scope (JSON object) or several (JSON
array of up to 16), ranked by hybrid search: cosine distance to query_embedding (real[], the bank's model in query
mode) and full-text match of query_text (english, lexemes OR-ed, scored by the sum of their IDF in the scope), fused by Reciprocal Rank Fusion
(fusion 'rrf', rrf_k 60, Cormack, Clarke & Buettcher, SIGIR 2009) or by a convex combination of min-max-normalised
scores ('convex', default weights 0.7 vector / 0.3 text). Each row: the memory, distance (cosine distance, smaller
is closer), similarity (1 - distance), text_rank (IDF sum), vector_rank and text_match_rank (1-based positions in each list),
score (the fused score), matched_signals ({vector,text}), degraded (true when the memory or the query has no current
vector, so only text could match it). min_similarity (-1..1) keeps rows whose similarity is at least that; rows with
no vector are then dropped. Filters: metadata_filter (containment), topics (any of), memory_type, created_after/before.
Vector candidates: Hamming distance over binary quantization, the best rerank_depth (default 400) re-ranked exactly.
Without query_text and query_embedding (or with a blank query_text) it lists the scope's memories, paged (page_size,
page_token) like list_memories, at most top_k per page when top_k is given. query_text is at most 4000 characters;
rrf_k 1..1000000; query_embedding must be finite and of non-zero norm (no result ever carries a NaN score).
Raises 22023 naming the argument (scope, top_k, fusion, weights, rrf_k, min_similarity, query_text length,
query_embedding dimension, NaN/infinite entries or zero norm, model, filters, memory_type).$$;
