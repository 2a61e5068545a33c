-- Session neighbours: a second look at the fused candidates of
-- retrieve_memories (070), through the order in which memories were said.
--
-- A memory drawn from a conversation keeps where it was said: the session,
-- event time and arrival order of its earliest source event (columns
-- source_session_id, source_event_time, source_append_seq of memories, set
-- by create_memory's source_event_ids and by generation). Its neighbours are
-- the live memories of the same scope and session said just before and just
-- after it (one probe each way on memories_scope_source_idx).
--
-- Each memory's fused score gets, added, neighbour_weight times the fused
-- score of the memory said right after it and half that of the one said
-- right before it. The answer to a question is often in the turn before the
-- one that repeats the question's words ("What did you get?" - "A guitar!"),
-- and the two halves of a multi-hop answer are often said one after the
-- other. A neighbour that no list found (a score of its own of 0) can enter
-- the ranking this way, unless filters are given (it was never tested
-- against them). Measured on LoCoMo (bench/retrieval_quality.py; see
-- docs/retrieval.md): weights 1 (after) and 0.5 (before) were chosen on the
-- two tuning conversations and confirmed on the three held out.
--
-- Never across scopes (the neighbour's scope_id is the candidate's, and
-- retrieve_memories' final read checks the scope itself), never to an
-- expired memory (skipped: the live memory beyond it is the neighbour), and
-- deleted memories are gone from memories. A memory with no source in a
-- session has no neighbours and keeps its score.

-- name: session_neighbours: each candidate's fused score plus its session neighbours' (per query).
create or replace function membank_private.session_neighbours(
    scope_ids uuid[], queries bigint[], names uuid[], scores double precision[], neighbour_weight double precision,
    new_rows boolean
) returns table (i bigint, name uuid, score double precision)
language plpgsql
stable
rows 200
security invoker
set search_path from current
as $$
begin
    return query
    with candidate as (
        select c.i, c.name, c.score
        from unnest(queries, names, scores) as c (i, name, score)
    ), placed as (
        -- scope_id named on every read: on Citus the statement is one
        -- query on the scope's shard
        select c.i, c.score, m.scope_id, m.source_session_id, m.source_event_time, m.source_append_seq
        from candidate as c
        inner join membank_private.memories as m on m.scope_id = any(scope_ids) and m.name = c.name
        where m.source_session_id is not null and c.score > 0
    ), spread as (
        -- the memory said before a candidate gets its score x weight
        select p.i, b.name, p.score * neighbour_weight as score
        from placed as p
        cross join lateral (
            select m.name
            from membank_private.memories as m
            where m.scope_id = any(scope_ids) and m.scope_id = p.scope_id
              and m.source_session_id = p.source_session_id
              and (m.source_event_time, m.source_append_seq) < (p.source_event_time, p.source_append_seq)
              and (m.expire_time is null or m.expire_time > statement_timestamp())
            order by m.source_event_time desc, m.source_append_seq desc
            limit 1
        ) as b
        union all
        -- the memory said after it gets half that
        select p.i, a.name, p.score * neighbour_weight * 0.5
        from placed as p
        cross join lateral (
            select m.name
            from membank_private.memories as m
            where m.scope_id = any(scope_ids) and m.scope_id = p.scope_id
              and m.source_session_id = p.source_session_id
              and (m.source_event_time, m.source_append_seq) > (p.source_event_time, p.source_append_seq)
              and (m.expire_time is null or m.expire_time > statement_timestamp())
            order by m.source_event_time, m.source_append_seq
            limit 1
        ) as a
    ), summed as (
        select s.i, s.name, sum(s.score) as score
        from spread as s
        group by s.i, s.name
    )
    select c.i, c.name, c.score + coalesce(s.score, 0)
    from candidate as c
    left join summed as s on s.i = c.i and s.name = c.name
    union all
    select s.i, s.name, s.score
    from summed as s
    where new_rows and not exists (select from candidate as c where c.i = s.i and c.name = s.name);
end
$$;
