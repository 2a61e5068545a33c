-- Retention: what is no longer current (revisions of deleted memories,
-- finished operations, old events) is removed after the windows in
-- membank_private.retention_settings (membank.configure_retention), in
-- bounded batches that each commit, like purge_expired_memories.
-- membank worker calls it on a schedule (--retention-interval).

-- name: apply_retention: remove what is past its retention window, in batches, committing each.
create or replace procedure membank.apply_retention(
    batch_size integer default 1000,
    max_batches integer default null,
    inout removed jsonb default null
)
language plpgsql
as $$
declare
    _batch jsonb;
    _batches integer := 0;
begin
    if batch_size is null or batch_size < 1 or batch_size > 100000 then
        raise exception 'batch_size: must be between 1 and 100000, got %', coalesce(batch_size::text, 'null')
            using errcode = 'invalid_parameter_value', hint = 'the default batch_size is 1000',
                  detail = 'argument: batch_size';
    end if;
    if max_batches is not null and max_batches < 1 then
        raise exception 'max_batches: must be positive or null, got %', max_batches
            using errcode = 'invalid_parameter_value', hint = 'null means until nothing past its window is left',
                  detail = 'argument: max_batches';
    end if;
    removed := '{"revisions": 0, "operations": 0, "events": 0, "sessions": 0}';
    loop
        _batch := membank_private.retention_batch(batch_size);
        select jsonb_object_agg(k.key, (removed ->> k.key)::bigint + (k.value #>> '{}')::bigint)
        into removed from jsonb_each(_batch) as k;
        _batches := _batches + 1;
        commit;
        exit when not exists (select from jsonb_each(_batch) as k where (k.value #>> '{}')::bigint >= batch_size)
                  or _batches >= coalesce(max_batches, _batches + 1);
    end loop;
end
$$;

comment on procedure membank.apply_retention (integer, integer, jsonb) is
$$Remove what is past its retention window (membank.configure_retention): the revisions of memories deleted longer
ago than deleted_revisions, GenerateMemories operations finished longer ago than finished_operations, events appended
longer ago than events (and sessions left empty). batch_size (1..100000, default 1000) rows of each kind per
transaction, at most max_batches batches (null: until nothing is left). Call it outside an explicit transaction block
(it commits): CALL membank.apply_retention(); removed returns the counts per kind as jsonb. Admin only.
Raises 22023 naming the argument, 42501 for a role bound to scopes (every scope's maintenance).$$;
