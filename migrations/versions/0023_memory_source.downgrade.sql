drop function if exists membank_private.session_neighbours(
    uuid[], bigint[], uuid[], double precision[], double precision, boolean
);
drop function if exists membank_private.first_source_event(uuid, text[]);
drop function if exists membank.retrieve_memories(
    jsonb, text, real[], integer, double precision, jsonb, text[], text, timestamptz, timestamptz,
    text, double precision, double precision, integer, text, integer, integer, text, text[], real[],
    double precision
);
drop function if exists membank_private.check_retrieval_options(
    integer, text, double precision, double precision, integer, double precision, integer, double precision
);
drop index if exists membank_private.memories_scope_source_idx;
alter table membank_private.memories
drop column source_session_id,
drop column source_event_time,
drop column source_append_seq;
