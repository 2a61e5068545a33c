-- Retention: what is no longer current (revisions of deleted memories,
-- finished operations, old events) is removed after the windows in
-- membank_private.retention_settings (membank.configure_retention), in
-- bounded batches that each commit, like purge_expired_memories.
-- membank worker calls it on a schedule (--retention-interval).
-- It runs with its caller's search_path (a procedure that commits can take
-- no SET clause), so it pins the path itself, first and after every COMMIT,
-- as 010_expiry.sql explains; the running totals are added up by
-- retention_totals, a pinned function, not by jsonb_object_agg and #>> here.

-- name: retention_totals: the running totals of apply_retention plus one batch's counts, per kind.
create or replace function membank_private.retention_totals(totals jsonb, batch jsonb)
returns jsonb
language sql
immutable
security invoker
set search_path to pg_catalog, pg_temp
as $$
    select jsonb_object_agg(k.key, coalesce((totals ->> k.key)::bigint, 0) + (k.value #>> '{}')::bigint)
    from jsonb_each(batch) as k;
$$;

-- name: retention_batch_full: true when a batch removed batch_size rows of some kind (more may be left).
create or replace function membank_private.retention_batch_full(batch jsonb, batch_size integer)
returns boolean
language sql
immutable
security invoker
set search_path to pg_catalog, pg_temp
as $$
    select exists (select from jsonb_each(batch) as k where (k.value #>> '{}')::bigint >= batch_size);
$$;

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
    _batches integer;
begin
    perform pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);  -- before anything (above)
    _batches := 0;
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
        removed := membank_private.retention_totals(removed, _batch);
        _batches := _batches + 1;
        commit;
        perform pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);  -- the COMMIT ended the pin
        exit when not membank_private.retention_batch_full(_batch, batch_size)
                  or _batches >= coalesce(max_batches, _batches + 1);
    end loop;
end
$$;

comment on procedure membank.apply_retention (integer, integer, jsonb) is
$$Remove what is past its retention window (membank.configure_retention): the revisions of memories deleted longer
ago than deleted_revisions, GenerateMemories operations finished longer ago than finished_operations, events appended
longer ago than events (and sessions left empty). batch_size (1..100000, default 1000) rows of each kind per
transaction, at most max_batches batches (null: until nothing is left). Call it outside an explicit transaction block
(it commits): CALL membank.apply_retention(); removed returns the counts per kind as jsonb. Admin only. On Citus, the
scopes of a worker node that does not answer are skipped with a WARNING naming the node (call again once it is back).
Raises 22023 naming the argument, 42501 for a role bound to scopes (every scope's maintenance).$$;
