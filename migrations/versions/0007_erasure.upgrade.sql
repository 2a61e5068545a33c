-- 0007 upgrade: retention windows, and what the retention sweep reads.

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
delete from membank_private.scope_lexicon
where doc_count <= 0;

delete from membank_private.scope_stats
where doc_count <= 0;

-- Degenerate vectors (zero norm or NaN) were accepted before: cosine
-- distance to them is NaN, which passed every threshold. Drop them and queue
-- their memories for embedding again.
do $$
begin
    -- The vector schema joins this transaction's path; the rest stays, so
    -- alembic still finds its version table.
    perform set_config('search_path', format('%I, %s', n.nspname, current_setting('search_path')), true)
    from pg_catalog.pg_extension as e
    inner join pg_catalog.pg_namespace as n on e.extnamespace = n.oid
    where e.extname = 'vector';
end
$$;

with bad as (
    delete from membank_private.memory_embeddings as e
    where vector_norm(e.embedding) = 0 or vector_norm(e.embedding) = 'NaN'::float8
    returning e.name
)

insert into membank_private.embedding_jobs (name, fact_md5, scope_id)
select
    m.name,
    md5(m.fact)::uuid as fact_md5,
    m.scope_id
from membank_private.memories as m
inner join bad as b on m.name = b.name
where m.fact is not null
on conflict do nothing;

-- Times no client can read back ('infinity', or past year 9999) meant "never
-- expires": that is null now, in memories and in their revisions (the
-- immutability trigger, when installed, is set aside for this one fix).
do $$
declare
    _has_trigger boolean := exists (
        select from pg_catalog.pg_trigger
        where tgname = 'memory_revisions_immutable'
          and tgrelid = 'membank_private.memory_revisions'::regclass
    );
begin
    if _has_trigger then
        alter table membank_private.memory_revisions disable trigger memory_revisions_immutable;
    end if;
    update membank_private.memory_revisions
    set expire_time = null
    where expire_time >= '10000-01-01 00:00:00+00' or expire_time = '-infinity';
    if _has_trigger then
        alter table membank_private.memory_revisions enable trigger memory_revisions_immutable;
    end if;
end
$$;

update membank_private.memories
set expire_time = null
where expire_time >= '10000-01-01 00:00:00+00';

update membank_private.memory_embeddings
set expire_time = null
where expire_time >= '10000-01-01 00:00:00+00';
