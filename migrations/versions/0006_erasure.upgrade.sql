-- 0006 upgrade: retention windows, and what the retention sweep reads.

-- One row: how long what is no longer current is kept. null = kept for ever.
--   deleted_revisions: revisions of a memory deleted with delete_memory (rollback can bring it back until then);
--   finished_operations: GenerateMemories operations that are done (their results and source texts);
--   events: conversation events, by the time they were appended.
create table membank_private.retention_settings (
    singleton boolean primary key default true check (singleton),
    deleted_revisions interval default interval '30 days'
    check (deleted_revisions is null or deleted_revisions >= interval '0'),
    finished_operations interval default interval '90 days'
    check (finished_operations is null or finished_operations >= interval '0'),
    events interval default null
    check (events is null or events >= interval '0'),
    update_time timestamptz not null default statement_timestamp()
);

insert into membank_private.retention_settings (singleton) values (true);

create index operations_finished_idx
on membank_private.operations (update_time)
where done;

create index events_append_time_idx
on membank_private.events (append_time);

-- Word counts that fell to zero are removed from now on; drop the old ones.
delete from membank_private.scope_lexicon where doc_count <= 0;
delete from membank_private.scope_stats where doc_count <= 0;
