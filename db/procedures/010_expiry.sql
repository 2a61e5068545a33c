-- TTL: expired memories are invisible at once (membank_private.is_live);
-- this procedure removes their rows later, in bounded batches that each
-- commit, so a large backlog never holds one long transaction or lock.
-- The batch is a SECURITY DEFINER function because a procedure that
-- commits may carry neither SECURITY DEFINER nor a SET clause.
--
-- So a procedure runs with its caller's search_path, and PostgreSQL picks
-- the best-matching operator or function across the whole path: a role that
-- can CREATE in a schema on an admin's path could plant `+(bigint, bigint)`
-- or `#>>(jsonb, text)` and have it run as that admin inside the loop. Each
-- procedure therefore pins the path itself, as its first statement and again
-- after every COMMIT (a COMMIT ends the transaction, and with it a setting
-- made with is_local => true, which is what keeps the caller's own session
-- path untouched once the CALL returns); its DECLARE section initialises
-- nothing, so no expression runs before the pin. tests/test_search_path.py
-- checks this of every procedure.

-- name: forget_expired_deletion: forget one memory deleted before its expire_time, now passed; 1 if it was.
-- Under the scope's write lock (FOR UPDATE SKIP LOCKED: 0 when another write
-- holds it), the memory must still be gone and expired. One memory per
-- subtransaction, each wait bounded: an operation row another transaction
-- holds (a worker applying a reply in that scope) leaves this memory to a
-- later batch, never the others; on Citus, so does a node that stopped answering.
create or replace function membank_private.forget_expired_deletion(scope_id uuid, name uuid)
returns integer
language plpgsql
volatile
security invoker
set search_path to pg_catalog, pg_temp
as $$
begin
    perform from membank_private.scope_locks as l where l.scope_id = forget_expired_deletion.scope_id
    for update skip locked;
    if not found
       or exists (select from membank_private.memories as m
                  where m.scope_id = forget_expired_deletion.scope_id and m.name = forget_expired_deletion.name)
       or not membank_private.is_expired(name, scope_id) then
        return 0;
    end if;
    perform set_config('lock_timeout', membank_private.scope_lock_timeout(), true);
    perform membank_private.forget_memory(name, scope_id);
    return 1;
exception
    when lock_not_available then
        raise warning 'purge_expired_memories: memory % left to a later batch: a row it is stored in is busy', name
            using hint = 'call purge_expired_memories again';
        return 0;
    when others then
        if not membank_private.node_unreachable(sqlstate) then
            raise;
        end if;
        perform membank_private.skip_unreachable('purge_expired_memories', scope_id, sqlerrm);
        return 0;
end
$$;

-- name: forget_expired_deletions: forget up to batch_size memories deleted before their expire_time, now passed.
-- A memory deleted before its TTL is gone from memories, so the delete
-- below never sees it; its DELETED revision (the last) still holds its text
-- for rollback, as do its earlier revisions, its operations and its source
-- events. Once the expire_time that revision recorded passes, it is
-- forgotten as a purged memory is (forget_memory: text and caller's labels
-- out of revisions, events and operations; no new revision). Candidates
-- come from an index of deletions that still hold text (migration 0019),
-- read without locks; each scope's write lock is then taken FOR UPDATE
-- SKIP LOCKED (a scope another write holds is left to a later batch), and
-- under it the memory must still be gone and deleted (a rollback may have
-- brought it back). Statements name the scope: one shard on Citus.
create or replace function membank_private.forget_expired_deletions(batch_size integer)
returns bigint
language plpgsql
volatile
security invoker
set search_path to pg_catalog, pg_temp
as $$
declare
    _now timestamptz := statement_timestamp();
    _scope_id uuid;
    _name uuid;
    _count bigint := 0;
    _candidates text [] := '{}';
    _down integer [] := '{}';
begin
    if membank_private.distributed() then
        -- Citus: the scopes from the coordinator's index of due work (kind
        -- 'expiry': a deletion still holding text keeps its scope there,
        -- 121_due_work.sql), then each scope's candidates by a router read;
        -- a node that does not answer is reported and its scopes skipped.
        for _scope_id in
            select d.scope_id from membank_private.due_scopes as d
            where d.kind = 'expiry' and d.due_time <= _now
            order by d.due_time, d.scope_id
            limit least(batch_size * 4, 1000)
        loop
            continue when cardinality(_down) > 0 and (membank_private.scope_node(_scope_id)).group_id = any(_down);
            begin
                _candidates := _candidates || array(
                    select r.scope_id::text || ' ' || r.memory_name::text
                    from membank_private.memory_revisions as r
                    where r.scope_id = _scope_id and r.action = 'DELETED' and r.expire_time is not null
                      and r.expire_time <= _now and (r.fact is not null or r.structured_content is not null)
                      and not exists (select from membank_private.memory_revisions as l
                                      where l.scope_id = _scope_id and l.memory_name = r.memory_name
                                        and l.revision > r.revision)
                      and not exists (select from membank_private.memories as m
                                      where m.scope_id = _scope_id and m.name = r.memory_name)
                    order by r.expire_time
                    limit batch_size);
            exception
                when others then
                    if not membank_private.node_unreachable(sqlstate) then
                        raise;
                    end if;
                    _down := _down || membank_private.skip_unreachable('purge_expired_memories', _scope_id, sqlerrm);
            end;
        end loop;
    end if;
    for _scope_id, _name in
        select split_part(c.c, ' ', 1)::uuid, split_part(c.c, ' ', 2)::uuid
        from unnest(_candidates) as c (c)
        limit batch_size
    loop
        _count := _count + membank_private.forget_expired_deletion(_scope_id, _name);
    end loop;
    if membank_private.distributed() then
        return _count;
    end if;
    for _scope_id, _name in
        select r.scope_id, r.memory_name
        from membank_private.memory_revisions as r
        where r.action = 'DELETED' and r.expire_time is not null and r.expire_time <= _now
          and (r.fact is not null or r.structured_content is not null)
          and not exists (select from membank_private.memory_revisions as l
                          where l.scope_id = r.scope_id and l.memory_name = r.memory_name and l.revision > r.revision)
          and not exists (select from membank_private.memories as m
                          where m.scope_id = r.scope_id and m.name = r.memory_name)
        order by r.expire_time
        limit batch_size
    loop
        _count := _count + membank_private.forget_expired_deletion(_scope_id, _name);
    end loop;
    return _count;
end
$$;

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
    _scopes uuid [];
begin
    perform membank_private.refuse_bound_caller('purge_expired_memories');  -- every scope's maintenance
    perform membank_private.set_revision_context(jsonb_build_object('reason', 'expired'));
    if membank_private.distributed() then
        -- No FOR UPDATE over several shards: scope by scope (120_scope_by_scope_jobs.sql).
        -- The deletions forgotten first: the purge then corrects each scope's
        -- index row with them gone (121_due_work.sql).
        _count := membank_private.forget_expired_deletions(batch_size);
        _count := _count + membank_private.purge_expired_by_scope(batch_size);
        perform membank_private.clear_revision_context();
        return _count;
    end if;
    -- Scope write locks first, in sorted order (015_scope_locks.sql); a scope
    -- whose lock another write holds is skipped, not waited for: its
    -- expired memories are invisible already and go in a later batch.
    _scopes := array(
        select l.scope_id
        from membank_private.scope_locks as l
        where l.scope_id in (select m.scope_id from membank_private.memories as m
                             where m.expire_time <= statement_timestamp())
        order by l.scope_id
        limit batch_size
        for update skip locked
    );
    with batch as (
        select m.name
        from membank_private.memories as m
        where m.expire_time <= statement_timestamp()
          and m.scope_id = any(_scopes)
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
    -- Memories deleted before their expire_time, now passed: their text goes too.
    _count := _count + membank_private.forget_expired_deletions(batch_size);
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
    _batches integer;
begin
    perform pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);  -- before anything (above)
    _batches := 0;
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
        perform pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);  -- the COMMIT ended the pin
        exit when _batch < batch_size or _batches >= coalesce(max_batches, _batches + 1);
    end loop;
end
$$;

comment on procedure membank.purge_expired_memories (integer, integer, bigint) is
$$Delete memories whose expire_time has passed, batch_size rows (1..100000, default 1000) per transaction, for at most
max_batches batches (null: until none is left). Each deletion writes a DELETED revision labelled {"reason":"expired"}
and destroys the memory's text in its revisions, events and operations. A memory deleted before its expire_time is
forgotten the same way once that time passes (its text and the caller's labels leave its revisions, events and
operations; no new revision). Call it outside an explicit transaction block (it commits):
CALL membank.purge_expired_memories(); purged returns the number of memories removed or forgotten. On Citus, the scopes
of a worker node that does not answer are skipped with a WARNING naming the node (call again once it is back). Raises 22023 naming the argument, 42501 for a role bound to scopes (every scope's maintenance).$$;

-- A purge of one scope by the API function membank.purge_memories(force =>
-- true) deletes in one statement and holds the scope's write lock until it
-- ends: 50k memories kept that scope's writers waiting for 17 s. The
-- procedure below deletes the same memories in batches that each take the
-- lock, delete at most batch_size memories and commit, so writers of the
-- scope interleave with the purge.

-- name: purge_memories_batch: delete up to batch_size of a scope's live memories matching the filters.
create or replace function membank_private.purge_memories_batch(
    scope jsonb, metadata_filter jsonb, topics text[], batch_size integer
) returns bigint
language plpgsql
volatile
security definer
set search_path to pg_catalog, pg_temp
as $$
declare
    _scope jsonb := membank_private.validate_scope(scope);
    _topics text [] := case when topics is not null then membank_private.validate_topics(topics) end;
    _count bigint;
begin
    if metadata_filter is not null then
        perform membank_private.validate_object(metadata_filter, 'metadata_filter');
    end if;
    if batch_size is null or batch_size < 1 or batch_size > 100000 then
        perform membank_private._raise_invalid('batch_size',
            format('must be between 1 and 100000, got %s', coalesce(batch_size::text, 'null')),
            'the default batch_size is 1000');
    end if;
    perform membank_private.lock_scope(md5(_scope::text)::uuid);
    perform membank_private.set_revision_context(jsonb_build_object('reason', 'purge'));
    with target as (
        select m.name
        from membank_private.memories as m
        where m.scope_id = md5(_scope::text)::uuid
          and m.scope = _scope
          and (m.expire_time is null or m.expire_time > statement_timestamp())
          and (metadata_filter is null or m.metadata @> metadata_filter)
          and (_topics is null or m.topics && _topics)
        order by m.name
        limit batch_size
        for update
    ), purged as (
        delete from membank_private.memories as m
        using target as t
        -- scope_id named: on Citus the delete then runs on the scope's shard alone
        where m.scope_id = md5(_scope::text)::uuid and m.name = t.name
        returning 1
    )
    select count(*) into _count from purged;
    if _count < batch_size then
        -- The last batch: memories of the scope deleted earlier that match go too (085_erasure.sql).
        perform membank_private.forget_deleted_memories(md5(_scope::text)::uuid, _scope, metadata_filter, _topics);
    end if;
    perform membank_private.clear_revision_context();
    return _count;
end
$$;

-- name: purge_memories_in_batches: purge_memories(force => true) in committed batches, so writers interleave.
create or replace procedure membank.purge_memories_in_batches(
    scope jsonb,
    metadata_filter jsonb default null,
    topics text[] default null,
    batch_size integer default 1000,
    inout purged bigint default 0
)
language plpgsql
as $$
declare
    _batch bigint;
begin
    perform pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);  -- before anything (above)
    purged := 0;
    loop
        _batch := membank_private.purge_memories_batch(scope, metadata_filter, topics, batch_size);
        purged := purged + _batch;
        commit;
        perform pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);  -- the COMMIT ended the pin
        exit when _batch < batch_size;
    end loop;
end
$$;

comment on procedure membank.purge_memories_in_batches (jsonb, jsonb, text [], integer, bigint) is
$$Delete every live memory of one exact scope that matches the filters (metadata_filter: JSON object, containment;
topics: any of), as purge_memories(force => true) does, but batch_size memories (1..100000, default 1000) per
transaction: each batch takes the scope's write lock, deletes and commits, so other writes to the scope run between
batches. Each deletion writes a DELETED revision labelled {"reason":"purge"}. Call it outside an explicit transaction
block (it commits): CALL membank.purge_memories_in_batches(scope => '{"user_id":"u1"}'); purged returns the number of
memories removed. Raises 22023 naming the argument (nothing deleted), MB040 when another write held the scope's lock
longer than membank.lock_timeout (batches committed before stay deleted; call again to finish).$$;
