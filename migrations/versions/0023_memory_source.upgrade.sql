-- 0023: where in a session each memory was said (its earliest source event),
-- for retrieval's session neighbours. Null for a memory with no source
-- event in its scope (created by hand, or its events erased).
alter table membank_private.memories
add column source_session_id text,
add column source_event_time timestamptz,
add column source_append_seq bigint;

-- Existing memories: the earliest of revision 1's source events still
-- stored in the memory's scope.
update membank_private.memories as m
set
    source_session_id = s.session_id,
    source_event_time = s.event_time,
    source_append_seq = s.append_seq
from (
    select distinct on (r.scope_id, r.memory_name)
        r.scope_id,
        r.memory_name,
        e.session_id,
        e.event_time,
        e.append_seq
    from membank_private.memory_revisions as r
    inner join membank_private.events as e
        on r.scope_id = e.scope_id and e.event_id = any(r.source_event_ids)
    where r.revision = 1 and r.source_event_ids <> '{}'
    order by r.scope_id, r.memory_name, e.event_time, e.append_seq
) as s
where m.scope_id = s.scope_id and m.name = s.memory_name;

-- A memory's neighbours: one probe each way in its scope's session.
create index memories_scope_source_idx
on membank_private.memories (scope_id, source_session_id, source_event_time, source_append_seq)
where source_session_id is not null;

-- retrieve_memories takes neighbour_weight (db/functions recreate it).
drop function if exists membank.retrieve_memories(
    jsonb, text, real[], integer, double precision, jsonb, text[], text, timestamptz, timestamptz,
    text, double precision, double precision, integer, text, integer, integer, text, text[], real[]
);
drop function if exists membank_private.check_retrieval_options(
    integer, text, double precision, double precision, integer, double precision, integer
);
