-- Small scopes: both candidate lists from one read of the scope.
--
-- The statement is written once, as text (scan_statement): its tables are
-- format() arguments and its inputs $1..$10. One server runs it as the static
-- body of scan_candidates (made from that text below, so its plan is cached
-- like any PL/pgSQL statement's); a Citus node runs it on the scope's shards
-- by name inside retrieve_on_shard (070), one routed statement for the whole
-- retrieval.

-- name: scan_statement: scan_candidates' statement; %1$s memories, %2$s memory_embeddings; $1..$10 its arguments.
create or replace function membank_private.scan_statement()
returns text
language sql
immutable
parallel safe
security invoker
set search_path to pg_catalog, pg_temp
as $$
    -- Same lists as vector_candidates and text_candidates give for a scope
    -- no bigger than rerank_depth (every vector re-ranked exactly; document
    -- frequencies over every stored row, as scope_lexicon counts them), from
    -- one statement: for ~60 rows the index machinery cost more than it saved.
    -- $1 scope_ids uuid[], $2 query vector, $3 query_text, $4 depth, $5
    -- metadata_filter, $6 topics, $7 memory_type, $8 created_after, $9
    -- created_before, $10 rare_only; one row of five arrays: vector names
    -- and distances, text names, ranks and tiebreaks, each in list order.
    select $statement$
    with scope_row as (
        select m.name, m.fact, m.fts, tsvector_to_array(m.fts) as lexemes,
               (m.expire_time is null or m.expire_time > statement_timestamp())
               and ($5::jsonb is null or m.metadata @> $5)
               and ($6::text[] is null or m.topics && $6)
               and ($7::text is null or m.memory_type = $7)
               and ($8::timestamptz is null or m.create_time > $8)
               and ($9::timestamptz is null or m.create_time < $9) as eligible
        from %1$s as m
        where m.scope_id = any($1)
    ), frequency as materialized (
        -- Materialized: inlined, each use of df below re-counted the scope
        -- (five copies per lexeme, a third of the statement's time).
        select q.lexeme, (select count(*) from scope_row as r where q.lexeme = any(r.lexemes)) as df
        from unnest(membank_private.query_lexemes($3)) as q (lexeme)
    ), weighed as (
        -- as text_query (061): lexemes no row holds are left out; with
        -- rare_only, lexemes in more than half the rows never seek
        select f.lexeme, (quote_literal(f.lexeme) || ':A')::tsquery as fact_lexeme,
               membank_private.bm25_idf(f.df, t.n) as idf,
               f.df * 2 <= t.n or not (bool_or(f.df * 2 <= t.n) over () or $10) as seeks
        from frequency as f cross join (select count(*) as n from scope_row) as t
        where f.df > 0
    ), all_lexemes as (
        select nullif(string_agg(quote_literal(w.lexeme), ' | '), '')::tsquery as query from weighed as w
    ), vector_hit as (
        select r.name, e.embedding <=> $2 as distance,
               row_number() over (order by e.embedding <=> $2, r.fact collate "C", r.name) as position
        from scope_row as r
        -- scope_id named: on Citus the statement is then one query on the scope's shard
        inner join %2$s as e on e.scope_id = any($1) and e.name = r.name
        where r.eligible and $2 is not null
        order by 3
        limit $4
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
        limit $4
    )
    select (select array_agg(v.name order by v.position) from vector_hit as v),
           (select array_agg(v.distance order by v.position) from vector_hit as v),
           (select array_agg(t.name order by t.position) from text_hit as t),
           (select array_agg(t.text_rank order by t.position) from text_hit as t),
           (select array_agg(t.text_tiebreak order by t.position) from text_hit as t)
    $statement$;
$$;

-- name: scan_candidates: both candidate lists from one read of a small scope.
-- Made from scan_statement on the distributed tables: a static statement,
-- planned once per session (the arguments are $1..$10 in the text). Its
-- generic plan reads the scope through the scope_id indexes, never by a
-- sequential scan (enable_seqscan off): its scope holds at most 200
-- memories, but a generic plan does not know which scope, and once the
-- tables are analyzed it takes its estimate from the most common scope_id
-- values, the biggest scopes. With a scope of 20,000 memories in the bank
-- the plan read every row of memories and memory_embeddings, and a
-- 20-memory scope's retrieval took 16 ms instead of 4 (one server,
-- bench/citus.py --mode regression --sizes 20,200,2000,20000, 2026-12-03).
do $do$
begin
    execute format($create$
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
set enable_seqscan to off
as $body$
begin
    -- the text of membank_private.scan_statement()
    %s
    into vector_names, vector_distances, text_names, text_ranks, text_tiebreaks;
end
$body$
$create$, format(membank_private.scan_statement(), 'membank_private.memories', 'membank_private.memory_embeddings'));
end
$do$;
