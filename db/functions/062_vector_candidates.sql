-- Vector candidates for retrieval: the query vector checked against the
-- bank's model, Hamming distance over centered binary codes, exact re-rank.

-- name: check_query_embedding: the query vector, checked (finite, non-zero) and against the bank's model.
create or replace function membank_private.check_query_embedding(
    query_embedding real[], embedding_model text
) returns vector
language plpgsql
stable
security invoker
set search_path from current
as $$
declare
    _config membank_private.embedding_config;
    _query vector;
begin
    if query_embedding is null then
        return null;
    end if;
    if cardinality(query_embedding) = 0 then
        perform membank_private._raise_invalid('query_embedding', 'is empty',
            'pass the vector the embedding model returned for the query');
    end if;
    select * into _config from membank_private.embedding_config;
    if _config.model_id is not null and cardinality(query_embedding) <> _config.dimension then
        perform membank_private._raise_invalid('query_embedding',
            format('has %s dimensions; this bank stores %s-dimensional vectors of %s',
                   cardinality(query_embedding), _config.dimension, _config.model_id),
            format('embed the query with %s (query mode)', _config.model_id));
    end if;
    if cardinality(query_embedding) > 16000 then  -- pgvector's limit (its error is SQLSTATE 54000)
        perform membank_private._raise_invalid('query_embedding',
            format('has %s dimensions; a vector has at most 16000', cardinality(query_embedding)),
            'pass the vector the embedding model returned for the query');
    end if;
    -- pgvector's cast rejects null, NaN and infinite entries (SQLSTATE class
    -- 22): one pass in C, where scanning the array in SQL cost a tenth of a
    -- small scope's retrieval. A vector with none of them (array_position,
    -- also C; NaN equals NaN for real) is cast outside an exception block:
    -- a block is a subtransaction, and on Citus, once the transaction has
    -- reached a worker (consolidation checks each fact's vector), each one
    -- sends it SAVEPOINT and RELEASE. Any other vector meets the cast in the
    -- block, which names pgvector's reason.
    if array_ndims(query_embedding) = 1
       and array_position(query_embedding, null) is null
       and array_position(query_embedding, 'NaN'::real) is null
       and array_position(query_embedding, 'Infinity'::real) is null
       and array_position(query_embedding, '-Infinity'::real) is null then
        _query := query_embedding::vector;
    else
        begin
            _query := query_embedding::vector;
        exception
            when data_exception then
                -- e.g. "NaN not allowed in vector", "array must not contain nulls"
                perform membank_private._raise_invalid('query_embedding',
                    format('is not a valid vector: %s', sqlerrm),
                    'pass the finite floats the embedding model returned');
        end;
    end if;
    -- Cosine distance to itself is NaN exactly when pgvector's float32 norm
    -- is zero: a zero vector, or one so small its squares underflow.
    if (_query <=> _query) = 'NaN'::float8 then
        perform membank_private._raise_invalid('query_embedding', 'has zero norm',
            'a zero vector has no direction, so cosine similarity to it is undefined');
    end if;
    if _config.model_id is null then
        -- No model declared yet, so no dimension to check the vector against: a vector of a named model is
        -- kept out (text only, flagged degraded) until the bank stores vectors; an unnamed one is refused,
        -- since nothing could tell a wrong dimension or model from a right one.
        if embedding_model is null then
            perform membank_private._raise_invalid('query_embedding',
                format('cannot be checked: this bank has no embedding model yet, so a vector of %s dimensions '
                       'from an unnamed model has nothing to be compared with', cardinality(query_embedding)),
                'pass embedding_model => the model that made it (retrieval is then full text only until the '
                'bank stores vectors), or leave query_embedding out; a worker declares the bank''s model '
                '(membank.configure_embedding)');
        end if;
        return null;  -- nothing embedded yet: text only, flagged degraded
    end if;
    if embedding_model is not null and embedding_model <> _config.model_id then
        perform membank_private._raise_invalid('embedding_model',
            format('the query was embedded with %s; this bank stores vectors of %s',
                   embedding_model, _config.model_id),
            'embed the query with the bank''s model, or switch the bank with `membank reembed`');
    end if;
    return _query;
end
$$;

-- name: hamming_statement: vector_candidates' Hamming step and exact re-rank; %1$s memory_embeddings; $1..$5 inputs.
-- Written once, as text: one server runs it as the static body of
-- hamming_candidates (made from it below, its plan cached), a Citus node on
-- the scope's shard by name inside retrieve_on_shard (070).
create or replace function membank_private.hamming_statement()
returns text
language sql
immutable
parallel safe
security invoker
set search_path to pg_catalog, pg_temp
as $$
    -- $1 scope_ids uuid[], $2 the query vector, $3 its binary code (quantize,
    -- 050), $4 depth, $5 rerank_depth. Rows: name, distance (cosine), nearest
    -- first, ties by name. Hamming distance over the covering index (an
    -- index-only range scan per scope), then exact cosine distance for the
    -- best rerank_depth.
    select $statement$
    select e.name, e.embedding <=> $2 as distance
    from %1$s as e
    where e.scope_id = any($1::uuid[]) and e.name in (
        select q.name
        from %1$s as q
        where q.scope_id = any($1::uuid[])
          and (q.expire_time is null or q.expire_time > statement_timestamp())
        order by q.embedding_bq <~> $3::bit varying
        limit $5::integer
    )
    order by 2, 1
    limit $4::integer
    $statement$;
$$;

-- name: hamming_candidates: hamming_statement on the distributed tables (a static statement, planned for its values).
-- Planned for each call's values (force_custom_plan): a generic plan
-- estimates scope_id = any($1) as the whole table, and once the bank is
-- analyzed it read every scope's vectors by sequential scan to re-rank a
-- few hundred of one scope's. It runs only above 200 memories.
do $do$
begin
    execute format($create$
create or replace function membank_private.hamming_candidates(
    scope_ids uuid[], query vector, query_bq bit varying, depth integer, rerank_depth integer
) returns table (name uuid, distance double precision)
language plpgsql
stable
security invoker
set search_path from current
set plan_cache_mode to force_custom_plan
as $body$
begin
    -- the text of membank_private.hamming_statement()
    return query
    %s;
end
$body$
$create$, format(membank_private.hamming_statement(), 'membank_private.memory_embeddings'));
end
$do$;

-- name: vector_candidates: the depth nearest memories by cosine distance, from quantized candidates.
create or replace function membank_private.vector_candidates(
    scope_ids uuid[], query vector, query_bq bit varying, depth integer, rerank_depth integer,
    metadata_filter jsonb, topics text[], memory_type text, created_after timestamptz, created_before timestamptz
) returns table (name uuid, distance double precision)
language plpgsql
stable
security invoker
set search_path from current
as $$
declare
    _indexed uuid [];
    _rest uuid [];
begin
    if num_nonnulls(metadata_filter, topics, memory_type, created_after, created_before) = 0 then
        -- Scopes of at most rerank_depth memories: every vector would be
        -- re-ranked anyway, so rank them exactly without the Hamming step
        -- (the same list; 0.12 instead of 0.6 ms for 250 memories). First,
        -- because it is the common case and needs no look at the catalog;
        -- such a scope with a per-scope HNSW index gets the exact list, not
        -- the index's approximate one.
        if membank_private.scope_documents(scope_ids) <= rerank_depth then
            return query
            select e.name, e.embedding <=> query as distance
            from membank_private.memory_embeddings as e
            where e.scope_id = any(scope_ids)
              and (e.expire_time is null or e.expire_time > statement_timestamp())
            order by 2, 1
            limit depth;
            return;
        end if;
        -- A big scope with a valid partial HNSW index is probed through it
        -- (064_scope_vector_indexes.sql): its cost no longer grows with the scope.
        select array_agg(s.scope_id) filter (where s.ready), array_agg(s.scope_id) filter (where not s.ready)
        into _indexed, _rest
        from (select x.scope_id, membank_private.scope_hnsw_ready(x.scope_id, vector_dims(query)) as ready
              from unnest(scope_ids) as x (scope_id)
              offset 0) as s;  -- a fence: pulled up, each filter below called the check again
        if _indexed is not null then
            -- Each scope's best depth hold the best depth of their union.
            return query
            select c.name, c.distance
            from (
                select h.name, h.distance
                from unnest(_indexed) as x (scope_id)
                cross join lateral membank_private.hnsw_candidates(x.scope_id, query, depth) as h
                union all
                select r.name, r.distance
                from membank_private.vector_candidates(_rest, query, query_bq, depth, rerank_depth,
                                                       null, null, null, null, null) as r
                where _rest is not null
            ) as c
            order by 2, 1
            limit depth;
            return;
        end if;
        -- Hamming distance over the covering index (an index-only range scan
        -- per scope), then exact cosine distance for the best rerank_depth.
        -- (hamming_statement, above)
        return query
        select h.name, h.distance
        from membank_private.hamming_candidates(scope_ids, query, query_bq, depth, rerank_depth) as h;
    else
        -- Filters: an exact scan of the rows that pass them, so a filter never
        -- costs a result that quantized candidates would have missed.
        return query
        select e.name, e.embedding <=> query as distance
        from membank_private.memory_embeddings as e
        inner join membank_private.memories as m on m.scope_id = e.scope_id and m.name = e.name
        where e.scope_id = any(scope_ids)
          and (m.expire_time is null or m.expire_time > statement_timestamp())
          and (metadata_filter is null or m.metadata @> metadata_filter)
          and (vector_candidates.topics is null or m.topics && vector_candidates.topics)
          and (vector_candidates.memory_type is null or m.memory_type = vector_candidates.memory_type)
          and (created_after is null or m.create_time > created_after)
          and (created_before is null or m.create_time < created_before)
        order by 2, 1
        limit depth;
    end if;
end
$$;
