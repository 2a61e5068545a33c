-- Small scopes: both candidate lists from one read of the scope.

-- name: scan_candidates: both candidate lists from one read of a small scope.
create or replace function membank_private.scan_candidates(
    scope_ids uuid[], query vector, query_text text, depth integer,
    metadata_filter jsonb, topics text[], memory_type text, created_after timestamptz, created_before timestamptz,
    rare_only boolean,
    out vector_names uuid[], out vector_distances double precision[],
    out text_names uuid[], out text_ranks real[], out text_tiebreaks real[]
)
language plpgsql
stable
security invoker
set search_path from current
as $$
begin
    -- Same lists as vector_candidates and text_candidates give for a scope
    -- no bigger than rerank_depth (every vector re-ranked exactly; document
    -- frequencies over every stored row, as scope_lexicon counts them), from
    -- one statement: for ~60 rows the index machinery cost more than it saved.
    with scope_row as (
        select m.name, m.fact, m.fts, tsvector_to_array(m.fts) as lexemes,
               (m.expire_time is null or m.expire_time > statement_timestamp())
               and (metadata_filter is null or m.metadata @> metadata_filter)
               and (scan_candidates.topics is null or m.topics && scan_candidates.topics)
               and (scan_candidates.memory_type is null or m.memory_type = scan_candidates.memory_type)
               and (created_after is null or m.create_time > created_after)
               and (created_before is null or m.create_time < created_before) as eligible
        from membank_private.memories as m
        where m.scope_id = any(scope_ids)
    ), frequency as materialized (
        -- Materialized: inlined, each use of df below re-counted the scope
        -- (five copies per lexeme, a third of the statement's time).
        select q.lexeme, (select count(*) from scope_row as r where q.lexeme = any(r.lexemes)) as df
        from unnest(membank_private.query_lexemes(query_text)) as q (lexeme)
    ), weighed as (
        -- as text_query (061): lexemes no row holds are left out; with
        -- rare_only, lexemes in more than half the rows never seek
        select f.lexeme, (quote_literal(f.lexeme) || ':A')::tsquery as fact_lexeme,
               membank_private.bm25_idf(f.df, t.n) as idf,
               f.df * 2 <= t.n or not (bool_or(f.df * 2 <= t.n) over () or rare_only) as seeks
        from frequency as f cross join (select count(*) as n from scope_row) as t
        where f.df > 0
    ), all_lexemes as (
        select nullif(string_agg(quote_literal(w.lexeme), ' | '), '')::tsquery as query from weighed as w
    ), vector_hit as (
        select r.name, e.embedding <=> query as distance,
               row_number() over (order by e.embedding <=> query, r.fact collate "C", r.name) as position
        from scope_row as r
        -- scope_id named: on Citus the statement is then one query on the scope's shard
        inner join membank_private.memory_embeddings as e on e.scope_id = any(scope_ids) and e.name = r.name
        where r.eligible and query is not null
        order by 3
        limit depth
    ), text_hit as (
        select h.*, row_number() over (order by h.text_rank desc, h.text_tiebreak desc, h.fact collate "C", h.name)
                    as position
        from (select r.name, r.fact,
                     -- as text_candidates (061): a lexeme only the context holds counts half
                     (select sum(case when r.fts @@ w.fact_lexeme then w.idf else 0.5 * w.idf end)
                      from weighed as w where w.lexeme = any(r.lexemes))::real as text_rank,
                     ts_rank(r.fts, a.query, 1) as text_tiebreak
              from scope_row as r
              cross join all_lexemes as a
              where r.eligible and exists (select from weighed as w where w.seeks and w.lexeme = any(r.lexemes))
             ) as h
        order by h.text_rank desc, h.text_tiebreak desc, h.fact collate "C", h.name
        limit depth
    )
    select (select array_agg(v.name order by v.position) from vector_hit as v),
           (select array_agg(v.distance order by v.position) from vector_hit as v),
           (select array_agg(t.name order by t.position) from text_hit as t),
           (select array_agg(t.text_rank order by t.position) from text_hit as t),
           (select array_agg(t.text_tiebreak order by t.position) from text_hit as t)
    into vector_names, vector_distances, text_names, text_ranks, text_tiebreaks;
end
$$;
