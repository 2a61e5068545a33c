-- TTL: expired memories are invisible at once (membank_private.is_live);
-- this procedure removes their rows later, in bounded batches that each
-- commit, so a large backlog never holds one long transaction or lock.
-- The batch is a SECURITY DEFINER function because a procedure that
-- commits may carry neither SECURITY DEFINER nor a SET clause.

-- name: purge_expired_batch: delete up to batch_size expired memories; returns how many.
create or replace function membank_private.purge_expired_batch(batch_size integer)
returns bigint
language plpgsql
volatile
security definer
set search_path to pg_catalog, pg_temp
as $$
declare
    _count bigint;
begin
    perform membank_private.set_revision_context(jsonb_build_object('reason', 'expired'));
    -- Scope write locks first, in sorted order (015_scope_locks.sql).
    perform membank_private.lock_scope(s.scope_id)
    from (
        select distinct e.scope_id
        from (select m.scope_id from membank_private.memories as m
              where m.expire_time <= statement_timestamp()
              order by m.expire_time limit batch_size) as e
        order by e.scope_id
    ) as s;
    with batch as (
        select m.name
        from membank_private.memories as m
        where m.expire_time <= statement_timestamp()
        order by m.expire_time
        limit batch_size
        for update skip locked
    ), deleted as (
        delete from membank_private.memories as m
        using batch as b
        where m.name = b.name
        returning 1
    )
    select count(*) into _count from deleted;
    perform membank_private.clear_revision_context();
    return _count;
end
$$;

-- name: purge_expired_memories: delete expired memories in batches, committing each.
create or replace procedure membank.purge_expired_memories(
    batch_size integer default 1000,
    max_batches integer default null,
    inout purged bigint default 0
)
language plpgsql
as $$
declare
    _batch bigint;
    _batches integer := 0;
begin
    if batch_size is null or batch_size < 1 or batch_size > 100000 then
        raise exception 'batch_size: must be between 1 and 100000, got %', coalesce(batch_size::text, 'null')
            using errcode = 'invalid_parameter_value', hint = 'the default batch_size is 1000';
    end if;
    if max_batches is not null and max_batches < 1 then
        raise exception 'max_batches: must be positive or null, got %', max_batches
            using errcode = 'invalid_parameter_value', hint = 'null means until no expired memory is left';
    end if;
    purged := 0;
    loop
        _batch := membank_private.purge_expired_batch(batch_size);
        purged := purged + _batch;
        _batches := _batches + 1;
        commit;
        exit when _batch < batch_size or _batches >= coalesce(max_batches, _batches + 1);
    end loop;
end
$$;

comment on procedure membank.purge_expired_memories (integer, integer, bigint) is
$$Delete memories whose expire_time has passed, batch_size rows (1..100000, default 1000) per transaction, for at most
max_batches batches (null: until none is left). Each deletion writes a DELETED revision labelled {"reason":"expired"}.
Call it outside an explicit transaction block (it commits): CALL membank.purge_expired_memories();
purged returns the number of memories removed. Raises 22023 naming the argument.$$;
