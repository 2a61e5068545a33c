-- Full-text candidates of a big scope without scoring every match.
--
-- text_candidates scores every row that holds any seeking lexeme of the
-- query; in a scope of 30k memories a lexeme held by a third of them makes
-- that 10k heap rows read and scored for a list of 50. A match scores the
-- sum of the IDF of the query lexemes it holds, so the rarest lexemes decide
-- the top of the list: MaxScore (Turtle & Flood, "Query evaluation:
-- strategies and optimizations", IP&M 1995) reads the rows of the rarest
-- seeking lexemes first, and stops adding lexemes once the depth-th best
-- score found is strictly above the most a row holding none of them could
-- score (the IDF sum of the lexemes not read yet and of those that only
-- score; a lexeme only a memory's context holds scores half, so the full
-- IDF is an upper bound). No unread row can then enter the list, whatever its tie-break, so
-- the list is the one text_candidates gives by scoring every match: same
-- text_rank, same text_tiebreak (ts_rank), same order (061: IDF sum, ts_rank,
-- fact in C collation, name). Only fewer rows are read.

-- Until 2026-12-03 without memories: each step a static statement on the distributed table.
drop function if exists membank_private.text_candidates_maxscore(
    uuid[], tsquery[], tsquery[], double precision[], tsquery, tsquery, bigint, integer, jsonb, text[], text,
    timestamptz, timestamptz
);

-- name: text_candidates_maxscore: text_candidates for a big scope, reading the rarest lexemes' rows first (MaxScore).
-- Each step is text_statement (061) on memories: the distributed table
-- (null), or on a Citus node the scope's shard by name (retrieve_on_shard,
-- 070). Run with EXECUTE, so planned for the step's tsquery each time.
create or replace function membank_private.text_candidates_maxscore(
    scope_ids uuid[], lexemes tsquery[], fact_lexemes tsquery[], idfs double precision[], seeking tsquery,
    all_lexemes tsquery, documents bigint, depth integer,
    metadata_filter jsonb, topics text[], memory_type text, created_after timestamptz, created_before timestamptz,
    memories text
) returns table (name uuid, text_rank real, text_tiebreak real)
language plpgsql
stable
security invoker
set search_path to pg_catalog, pg_temp
-- Planned for the actual tsquery every time: a generic plan cannot see it
-- and reads the whole scope instead of the GIN (scope_id, fts) index.
set plan_cache_mode to force_custom_plan
as $$
declare
    -- text_candidates' arrays (one-word tsqueries, the same restricted to
    -- weight A, IDFs), of the lexemes the scopes hold; seeking is the OR of
    -- those that seek candidates, documents the memories of the scopes.
    _seeking tsquery [];        -- rarest first
    _seeking_idfs double precision [];
    _seeking_dfs double precision [];
    _common double precision;   -- IDF sum of the lexemes that do not seek
    _count integer;
    _j integer := 0;
    _rows double precision := 0;
    _target double precision;
    _total double precision;
    _tsquery tsquery;
    _bound double precision;
    _names uuid [];
    _ranks real [];
    _tiebreaks real [];
    _row record;
begin
    -- A lexeme's document frequency, only to size each step, from its IDF
    -- (bm25_idf inverted: exp(idf) = (n + 1) / (df + 0.5)).
    with lexeme as (
        select l.lexeme, l.idf, seeking @> l.lexeme as seeks, (documents + 1) / exp(l.idf) - 0.5 as df
        from unnest(lexemes, idfs) as l (lexeme, idf)
    )
    select array_agg(l.lexeme order by l.idf desc, l.lexeme::text) filter (where l.seeks),
           array_agg(l.idf order by l.idf desc, l.lexeme::text) filter (where l.seeks),
           array_agg(l.df order by l.idf desc, l.lexeme::text) filter (where l.seeks),
           coalesce(sum(l.idf) filter (where not l.seeks), 0),
           coalesce(sum(l.df) filter (where l.seeks), 0)
    into _seeking, _seeking_idfs, _seeking_dfs, _common, _total
    from lexeme as l;
    _count := coalesce(cardinality(_seeking), 0);
    if _count = 0 then
        return;
    end if;
    -- First the fewest rarest lexemes whose rows can fill the list; on each
    -- miss, at least twice as many rows (so the rows read stay within a few
    -- times those of the final step).
    _target := depth;
    loop
        while _j < _count and (_rows < _target or _j = 0) loop
            _j := _j + 1;
            _rows := _rows + _seeking_dfs[_j];
        end loop;
        _tsquery := (select string_agg(q::text, ' | ')::tsquery from unnest(_seeking[1:_j]) as q);
        -- text_statement's rows, in its order (IDF sum, ts_rank, fact in C collation, name)
        _names := '{}';
        _ranks := '{}';
        _tiebreaks := '{}';
        for _row in execute format(membank_private.text_statement(), coalesce(memories, 'membank_private.memories'))
                    using scope_ids, lexemes, fact_lexemes, idfs, _tsquery, all_lexemes, depth, metadata_filter,
                          topics, memory_type, created_after, created_before loop
            _names := _names || _row.name;
            _ranks := _ranks || _row.text_rank;
            _tiebreaks := _tiebreaks || _row.text_tiebreak;
        end loop;
        exit when _j = _count;
        -- The most a row holding none of the lexemes read so far can score.
        _bound := _common + (select sum(i) from unnest(_seeking_idfs[_j + 1:_count]) as i);
        -- Strictly above, with a margin for the real rounding of scores: a
        -- row at the bound could tie and win on its ts_rank, fact or name.
        exit when cardinality(_names) = depth and _ranks[depth] > _bound * (1 + 1e-6);
        -- Once twice the rows read would reach half of all, read all at once:
        -- the worst case (every lexeme needed) then costs at most ~1.5x one
        -- full read, not a long series of re-reads.
        _target := case when _rows * 4 >= _total then _total else _rows * 2 end;
    end loop;
    return query select u.name, u.text_rank, u.text_tiebreak
                 from unnest(_names, _ranks, _tiebreaks) as u (name, text_rank, text_tiebreak);
end
$$;
