-- 0014: the source events of deleted memories, by digest (085_erasure.sql).
-- A deleted memory must not come back from the events it was extracted
-- from when the same session is generated again; it may come back from a
-- new event. Digests only: a purge removes the text, this row stays.
create table membank_private.retired_sources (
    scope_id uuid not null,
    scope jsonb not null,
    digest uuid not null,
    memory_name uuid not null,
    retire_time timestamptz not null default statement_timestamp(),
    primary key (scope_id, digest, memory_name)
);
create index retired_sources_memory_idx on membank_private.retired_sources (memory_name);
comment on table membank_private.retired_sources is
'Digests (md5 of event id and text, membank_private.event_digest) of the source events of deleted memories, per scope.';
