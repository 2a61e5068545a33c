-- The queues and the bank-wide maintenance on Citus: scope by scope.
--
-- On one server a claim is one statement: the due rows of every scope,
-- FOR UPDATE SKIP LOCKED. On Citus a scope's rows live on one shard and a
-- row lock is taken on the worker holding it; Citus refuses FOR UPDATE in
-- a query over several shards. So the Citus path reads the candidates
-- first, over every shard and without locks (which rows look due, by
-- scope_id), then locks them one scope at a time with a router query
-- (scope_id = a constant: one shard, on one worker) FOR UPDATE SKIP LOCKED,
-- which re-checks the row under the lock. A candidate another claimer took
-- meanwhile is skipped (it is locked, or no longer due once that claim
-- committed): claims stay at most once per lease, as on one server, and
-- wait for nothing. The read over-fetches (4 x batch_size, at most 4000)
-- so that two claimers reading the same first rows do not both come back
-- empty. Each function here is what its public counterpart runs when
-- membank_private.on_citus(); one server keeps the one-statement path.

-- (embedding_candidates, the read of every shard the claims began with, is replaced by 121_due_work.sql's index.)
drop function if exists membank_private.embedding_candidates(integer, timestamptz);

-- name: claim_embedding_jobs_by_scope: claim_embedding_jobs on Citus: the due scopes, then a router claim per scope.
-- The due scopes come from the coordinator's index (121_due_work.sql), not
-- from the shards: each scope costs its own worker's statements only, and a
-- scope whose worker does not answer is skipped (a WARNING names the node),
-- with the rest of that node's scopes. The scopes visited get their index
-- row corrected. The claimed names' scopes are kept in the session's hint
-- for store_embeddings.
create or replace function membank_private.claim_embedding_jobs_by_scope(batch_size integer)
returns table (memory_name uuid, memory_fact text, fact_md5 uuid)
language plpgsql
volatile
security invoker
set search_path to pg_catalog, pg_temp
as $$
declare
    _now timestamptz := statement_timestamp();
    _lease timestamptz := statement_timestamp() + membank_private.embedding_lease();
    _scope_id uuid;
    _left integer := batch_size;
    _down integer [] := '{}';
    _node record;
    _n uuid [];
    _f text [];
    _m uuid [];
    _names uuid [] := '{}';
    _facts text [] := '{}';
    _md5s uuid [] := '{}';
    _scopes uuid [] := '{}';
begin
    for _scope_id in
        select d.scope_id from membank_private.due_scopes as d
        where d.kind = 'embedding' and d.due_time <= _now
        order by d.due_time, d.scope_id
        limit least(batch_size * 4, 1000)
    loop
        exit when _left <= 0;
        if cardinality(_down) > 0 and (membank_private.scope_node(_scope_id)).group_id = any(_down) then
            continue;  -- its node did not answer for another scope of this call
        end if;
        begin
            -- One shard: every table reference names the scope.
            with due as (
                select j.name, j.fact_md5,
                       case when m.context is null then m.fact else m.context || E'\n' || m.fact end as fact,
                       m.fact is not null and md5(m.fact)::uuid = j.fact_md5 as fresh,
                       membank_private.is_blank(m.fact) as blank
                from membank_private.embedding_jobs as j
                inner join membank_private.memories as m on m.scope_id = j.scope_id and m.name = j.name
                where j.scope_id = _scope_id and m.scope_id = _scope_id
                  and j.retry_time <= _now and j.attempts < 5
                order by j.retry_time
                limit _left
                for update of j skip locked
            ), leased as (
                update membank_private.embedding_jobs as j
                set retry_time = _lease
                from due as d
                where j.scope_id = _scope_id and d.fresh and not d.blank and j.name = d.name and j.fact_md5 = d.fact_md5
            ), blank as (
                update membank_private.embedding_jobs as j
                set attempts = 5, last_error = membank_private.blank_fact_error()
                from due as d
                where j.scope_id = _scope_id and d.fresh and d.blank and j.name = d.name and j.fact_md5 = d.fact_md5
            ), stale as (
                delete from membank_private.embedding_jobs as j
                using due as d
                where j.scope_id = _scope_id and not d.fresh and j.name = d.name and j.fact_md5 = d.fact_md5
            )
            select coalesce(array_agg(c.name), '{}'), coalesce(array_agg(c.fact), '{}'),
                   coalesce(array_agg(c.fact_md5), '{}')
            into _n, _f, _m
            from due as c where c.fresh and not c.blank;
            perform membank_private.refresh_due(_scope_id, 'embedding');
        exception
            when others then
                if not membank_private.node_unreachable(sqlstate) then
                    raise;
                end if;
                _node := membank_private.scope_node(_scope_id);
                _down := _down || _node.group_id;
                raise warning 'claim_embedding_jobs: node % does not answer; its scopes were skipped', _node.node
                    using detail = sqlerrm, hint = 'the other nodes'' jobs were claimed; claim again once it is back';
                continue;
        end;
        _names := _names || _n;
        _facts := _facts || _f;
        _md5s := _md5s || _m;
        _scopes := _scopes || array_fill(_scope_id, array[cardinality(_n)]);
        _left := _left - cardinality(_n);
    end loop;
    perform membank_private.remember_claimed(_names::text [], _scopes, false);
    return query select g.name, g.fact, g.md5 from unnest(_names, _facts, _md5s) as g (name, fact, md5);
end
$$;

-- name: store_scope_vectors: one scope's share of store_embeddings_by_scope, in router statements.
-- The memories first, FOR KEY SHARE SKIP LOCKED as on one server
-- (015_scope_locks.sql); a vector is written for a memory whose fact is
-- still the one embedded (fact_md5), its job deleted, and the scope's index
-- row corrected. Returns the number of vectors stored.
create or replace function membank_private.store_scope_vectors(
    target_scope_id uuid, model_id text, names uuid[], memory_names uuid[], fact_md5s uuid[], embeddings vector[],
    centroid vector, pairs text[]
) returns integer
language plpgsql
volatile
security invoker
set search_path to pg_catalog, pg_temp
as $$
declare
    _now timestamptz := statement_timestamp();  -- a value: Citus takes no function in an ON CONFLICT's SET
    _locked uuid [];
    _stored integer;
begin
    _locked := array(select m.name from membank_private.memories as m
                     where m.scope_id = target_scope_id and m.name = any(names)
                     order by m.name for key share skip locked);
    insert into membank_private.memory_embeddings as e (
        name, scope_id, model_id, fact_md5, expire_time, embedding, embedding_bq
    )
    select g.name, m.scope_id, store_scope_vectors.model_id, g.fact_md5, m.expire_time,
           g.embedding, membank_private.quantize(g.embedding, centroid)
    from unnest(memory_names, fact_md5s, embeddings) as g (name, fact_md5, embedding)
    inner join membank_private.memories as m
        on m.scope_id = target_scope_id and m.name = g.name and md5(m.fact)::uuid = g.fact_md5
    where g.name = any(_locked)
    on conflict (name, scope_id) do update
    set model_id = excluded.model_id, fact_md5 = excluded.fact_md5, expire_time = excluded.expire_time,
        embedding = excluded.embedding, embedding_bq = excluded.embedding_bq, create_time = _now;
    get diagnostics _stored = row_count;
    delete from membank_private.embedding_jobs as j
    where j.scope_id = target_scope_id and j.name = any(_locked)
      and (j.name::text || ':' || j.fact_md5::text) = any(pairs);
    perform membank_private.refresh_due(target_scope_id, 'embedding');  -- its jobs done: out of the index
    return _stored;
end
$$;

-- name: store_embeddings_by_scope: store_embeddings' writes on Citus, one router statement set per scope.
-- The arguments are checked by store_vectors. Returns the number of vectors
-- stored. The names' scopes: names_scope_id when the caller knows it (a
-- consolidation storing its facts' vectors for the memories it just
-- created), else from the claim's hint (claimed_scope), and only those it
-- does not know are looked up over every shard. Either way each write
-- names the scope and the memory (a name of another scope stores nothing).
-- A scope whose worker does not answer is skipped with a WARNING (its jobs
-- stay leased and are handed out again once the lease ends); the others
-- are stored. names_scope_id's scope is written without that guard: its
-- caller's transaction has written to its worker already, so it cannot be
-- skipped alone, and the guard's subtransaction cost a SAVEPOINT and a
-- RELEASE on the worker.
drop function if exists membank_private.store_embeddings_by_scope(text, uuid[], uuid[], text[]);
drop function if exists membank_private.store_embeddings_by_scope(text, uuid[], uuid[], vector[]);
create or replace function membank_private.store_embeddings_by_scope(
    model_id text, memory_names uuid[], fact_md5s uuid[], embeddings vector[], names_scope_id uuid default null
) returns integer
language plpgsql
volatile
security invoker
set search_path from current
as $$
declare
    _centroid vector := (select c.centroid from membank_private.embedding_config as c);
    _scope_id uuid;
    _names uuid [];
    _stored integer;
    _count integer := 0;
    _down integer [] := '{}';
    _node record;
    _pairs text [] := array(select g.name::text || ':' || g.fact_md5::text
                            from unnest(memory_names, fact_md5s) as g (name, fact_md5));
begin
    if names_scope_id is not null then
        return membank_private.store_scope_vectors(names_scope_id, model_id,
            array(select distinct n from unnest(memory_names) as n order by n), memory_names, fact_md5s, embeddings,
            _centroid, _pairs);
    end if;
    for _scope_id, _names in
        select s.scope_id, array_agg(distinct s.name order by s.name)
        from membank_private.job_scopes(memory_names) as s
        group by s.scope_id order by s.scope_id
    loop
        if cardinality(_down) > 0 and (membank_private.scope_node(_scope_id)).group_id = any(_down) then
            continue;
        end if;
        begin
            _stored := membank_private.store_scope_vectors(_scope_id, model_id, _names, memory_names, fact_md5s,
                                                           embeddings, _centroid, _pairs);
        exception
            when others then
                if not membank_private.node_unreachable(sqlstate) then
                    raise;
                end if;
                _node := membank_private.scope_node(_scope_id);
                _down := _down || _node.group_id;
                raise warning 'store_embeddings: node % does not answer; its scopes'' vectors were not stored', _node.node
                    using detail = sqlerrm, hint = 'their jobs are handed out again once their lease ends';
                continue;
        end;
        _count := _count + _stored;
    end loop;
    return _count;
end
$$;

-- name: job_scopes: the scope of each embedding job by memory name: the claim's hint, else a read of every shard.
create or replace function membank_private.job_scopes(memory_names uuid[])
returns table (scope_id uuid, name uuid)
language plpgsql
stable
security invoker
set search_path to pg_catalog, pg_temp
as $$
declare
    _known uuid [] := '{}';
    _scope_id uuid;
    _name uuid;
begin
    foreach _name in array coalesce(memory_names, '{}') loop
        _scope_id := membank_private.claimed_scope(_name::text);
        continue when _scope_id is null;
        scope_id := _scope_id;
        name := _name;
        _known := _known || _name;
        return next;
    end loop;
    if cardinality(_known) < cardinality(memory_names) then
        -- Not claimed on this connection: the jobs' scopes, read without locks over every shard.
        return query
        select distinct j.scope_id, j.name from membank_private.embedding_jobs as j
        where j.name = any(memory_names) and not j.name = any(_known);
    end if;
end
$$;

-- name: fail_embedding_jobs_by_scope: fail_embedding_jobs on Citus, one router update per job.
-- The backoff is computed here, not in the UPDATE: Citus refuses a STABLE
-- expression over a column there (timestamptz + interval) and crashed on
-- an array subscript by one.
create or replace function membank_private.fail_embedding_jobs_by_scope(
    memory_names uuid[], fact_md5s uuid[], error text
) returns integer
language plpgsql
volatile
security invoker
set search_path to pg_catalog, pg_temp
as $$
declare
    _now timestamptz := statement_timestamp();
    _scope_id uuid;
    _job record;
    _count integer := 0;
    _n integer;
    _node record;
    _down integer [] := '{}';
    _pairs text [] := array(select g.name::text || ':' || g.fact_md5::text
                            from unnest(memory_names, fact_md5s) as g (name, fact_md5));
begin
    -- Scope by scope (the claim's hint, 121_due_work.sql); a scope whose worker does not answer is skipped.
    for _scope_id in select distinct s.scope_id from membank_private.job_scopes(memory_names) as s order by 1 loop
        if cardinality(_down) > 0 and (membank_private.scope_node(_scope_id)).group_id = any(_down) then
            continue;
        end if;
        _n := 0;  -- counted once the scope's updates stand (a subtransaction rolled back counts none)
        begin
            for _job in
                select j.name, j.fact_md5, j.attempts from membank_private.embedding_jobs as j
                where j.scope_id = _scope_id and (j.name::text || ':' || j.fact_md5::text) = any(_pairs)
                order by j.name
            loop
                update membank_private.embedding_jobs as j
                set attempts = _job.attempts + 1,
                    last_error = left(error, 2000),
                    retry_time = _now + make_interval(secs => power(2, _job.attempts + 1))
                where j.scope_id = _scope_id and j.name = _job.name and j.fact_md5 = _job.fact_md5;
                _n := _n + 1;
            end loop;
        exception
            when others then
                if not membank_private.node_unreachable(sqlstate) then
                    raise;
                end if;
                _node := membank_private.scope_node(_scope_id);
                _down := _down || _node.group_id;
                raise warning 'fail_embedding_jobs: node % does not answer; its scopes'' jobs were not updated',
                    _node.node using detail = sqlerrm, hint = 'their jobs are handed out again once their lease ends';
                continue;
        end;
        _count := _count + _n;
    end loop;
    return _count;
end
$$;

-- name: lock_generation_jobs: due generation jobs locked FOR UPDATE SKIP LOCKED for the caller's transaction.
-- One server: one statement over every scope. Citus: candidates without
-- locks, then each locked by a router query that re-checks it is due.
-- Returns the jobs' keys (a table's row type here would hold up dropping
-- the table in a downgrade).
create or replace function membank_private.lock_generation_jobs(batch_size integer, operation_name uuid)
returns table (scope_id uuid, id bigint)
language plpgsql
volatile
security invoker
set search_path to pg_catalog, pg_temp
as $$
declare
    _now timestamptz := statement_timestamp();
    _left integer := batch_size;
    _one uuid;
    _scope_id uuid;
    _ids bigint [];
    _ops uuid [];
    _i integer;
    _down integer [] := '{}';
    _node record;
    _empty uuid [] := '{}';
    _keys text [] := '{}';
    _scopes uuid [] := '{}';
begin
    if not membank_private.distributed() then
        return query
        select j.scope_id, j.id from membank_private.generation_jobs as j
        where j.retry_time <= _now
          and (lock_generation_jobs.operation_name is null or j.operation_name = lock_generation_jobs.operation_name)
        order by j.retry_time, j.id
        limit batch_size
        for update skip locked;
        return;
    end if;
    -- The due scopes from the coordinator's index (121_due_work.sql); each
    -- scope's jobs locked by a router query that re-checks they are due. A
    -- scope whose worker does not answer is skipped (WARNING), with the rest
    -- of its node's scopes. With operation_name: that operation's scope only.
    if lock_generation_jobs.operation_name is not null then
        _one := membank_private.claim_operation_scope(lock_generation_jobs.operation_name, _now);
    end if;
    for _scope_id in
        select _one where _one is not null
        union all
        (select d.scope_id from membank_private.due_scopes as d
         where _one is null and d.kind = 'generation' and d.due_time <= _now
         order by d.due_time, d.scope_id
         limit least(batch_size * 4, 400))
    loop
        exit when _left <= 0;
        if cardinality(_down) > 0 and (membank_private.scope_node(_scope_id)).group_id = any(_down) then
            continue;
        end if;
        begin
            _ids := array(
                select j.id from membank_private.generation_jobs as j
                where j.scope_id = _scope_id and j.retry_time <= _now
                  and (lock_generation_jobs.operation_name is null
                       or j.operation_name = lock_generation_jobs.operation_name)
                order by j.retry_time, j.id
                limit _left
                for update skip locked);
            _ops := array(
                select j.operation_name from membank_private.generation_jobs as j
                where j.scope_id = _scope_id and j.id = any(_ids) order by j.id);
        exception
            when others then
                if not membank_private.node_unreachable(sqlstate) then
                    raise;
                end if;
                _node := membank_private.scope_node(_scope_id);
                _down := _down || _node.group_id;
                raise warning 'claim_generation_jobs: node % does not answer; its scopes were skipped', _node.node
                    using detail = sqlerrm, hint = 'the other nodes'' jobs were claimed; claim again once it is back';
                continue;
        end;
        if cardinality(_ids) = 0 then
            _empty := _empty || _scope_id;
            continue;
        end if;
        _left := _left - cardinality(_ids);
        _keys := _keys || _ids::text [] || _ops::text [];
        _scopes := _scopes || array_fill(_scope_id, array[cardinality(_ids) * 2]);
        for _i in 1 .. cardinality(_ids) loop
            scope_id := _scope_id;
            id := _ids[_i];
            return next;
        end loop;
    end loop;
    -- The jobs' scopes for completing them in this transaction (generation_job_scope, operation_scope).
    perform membank_private.remember_claimed(_keys, _scopes, true);
    if lock_generation_jobs.operation_name is not null and cardinality(_scopes) > 0 then
        -- and the operation's scope for this session's next claim of it (claim_operation_scope)
        perform set_config('membank.claimed_operation', lock_generation_jobs.operation_name || '/' || _scopes[1], false);
    end if;
    if _left = batch_size then
        -- Nothing claimed: the transaction ends now, so correcting the index
        -- rows visited holds them for no model call (121_due_work.sql).
        foreach _scope_id in array _empty loop
            perform membank_private.refresh_due(_scope_id, 'generation');
        end loop;
    end if;
end
$$;

-- name: claim_operation_scope: the scope a claim of one operation locks jobs in (Citus), from the fewest shards.
-- An in-process run (process_pending with the operation's name) claims its
-- operation's jobs one by one until none is left, each claim in a
-- transaction of its own. The operation's scope, by the first source that
-- knows it: this transaction's claim hint (claimed_scope); this session's
-- last claim of the same operation (the setting membank.claimed_operation,
-- "operation/scope", which a later claim of it reads: an operation never
-- changes scope); the scopes with generation work due in the coordinator's
-- index (a due job always has an index row, 121_due_work.sql), when there
-- are at most 16, asked in one statement that Citus sends to their shards
-- alone; else every shard (operation_scope: a statement on each of the 32,
-- which every claim of an in-process run made before). Every source is a
-- hint: the claim's own router query checks the job is in the scope it
-- names. An operation the index lacks (queued through a worker's own
-- connection, until rebuild_due_scopes) is still found, on every shard.
create or replace function membank_private.claim_operation_scope(operation_name uuid, due timestamptz)
returns uuid
language plpgsql
stable
security invoker
set search_path to pg_catalog, pg_temp
as $$
declare
    _hint text := coalesce(current_setting('membank.claimed_operation', true), '');
    _due uuid [];
    _scope_id uuid;
begin
    _scope_id := membank_private.claimed_scope(operation_name::text);
    if _scope_id is not null then
        return _scope_id;
    end if;
    if split_part(_hint, '/', 1) = operation_name::text
       and split_part(_hint, '/', 2) ~ '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$' then
        return split_part(_hint, '/', 2)::uuid;
    end if;
    _due := array(select d.scope_id from membank_private.due_scopes as d
                  where d.kind = 'generation' and d.due_time <= claim_operation_scope.due
                  order by d.due_time, d.scope_id limit 17);
    if cardinality(_due) between 1 and 16 then
        _scope_id := (select j.scope_id from membank_private.generation_jobs as j
                      where j.scope_id = any(_due) and j.operation_name = claim_operation_scope.operation_name
                      limit 1);
        if _scope_id is not null then
            return _scope_id;
        end if;
    end if;
    return membank_private.operation_scope(operation_name);
end
$$;

-- name: generation_job_scope: the scope_id of a generation job (by id, no lock).
-- A job this transaction claimed: its scope from the claim's hint, checked on
-- that scope's shard alone. Else (on Citus) a read of every shard.
create or replace function membank_private.generation_job_scope(job_id bigint)
returns uuid
language plpgsql
stable
security invoker
set search_path to pg_catalog, pg_temp
as $$
declare
    _hint uuid := membank_private.claimed_scope(job_id::text);
begin
    if _hint is not null
       and exists (select 1 from membank_private.generation_jobs as j where j.scope_id = _hint and j.id = job_id) then
        return _hint;
    end if;
    return (select j.scope_id from membank_private.generation_jobs as j where j.id = job_id);
end
$$;

-- name: lock_generation_job: a generation job by id, locked FOR UPDATE (null: no such job).
-- A job this transaction claimed is read and locked on its scope's shard
-- in one statement, from the claim's hint: a hint that names another scope
-- finds no row there, and the job is then found as for any other
-- (generation_job_scope, every shard on Citus). Checking the hint first
-- (generation_job_scope) and then locking the row cost two statements on
-- the worker per call of prepare_consolidation and complete_generation_job.
create or replace function membank_private.lock_generation_job(job_id bigint)
returns membank_private.generation_jobs
language plpgsql
volatile
security invoker
set search_path to pg_catalog, pg_temp
as $$
declare
    _hint uuid := membank_private.claimed_scope(job_id::text);
    _job membank_private.generation_jobs;
begin
    if _hint is not null then
        select * into _job from membank_private.generation_jobs as j
        where j.scope_id = _hint and j.id = job_id for update;
        if _job.id is not null then
            return _job;
        end if;
    end if;
    _hint := membank_private.generation_job_scope(job_id);  -- first, so that the lock names one shard on Citus
    select * into _job from membank_private.generation_jobs as j where j.scope_id = _hint and j.id = job_id for update;
    return _job;
end
$$;

-- name: purge_expired_by_scope: purge_expired_batch on Citus: expired memories deleted one scope at a time.
-- The scopes to visit come from the coordinator's index of due work (kind
-- 'expiry', 121_due_work.sql), not from the shards: each scope costs its
-- own worker's statements only, and a scope whose worker does not answer
-- is skipped with a WARNING naming the node, with the rest of that node's
-- scopes (its index row stays: a later call purges it). Each scope's write
-- lock is taken FOR UPDATE SKIP LOCKED (a scope another write holds is
-- left to a later batch, as on one server), its expired memories deleted
-- by a router statement, and its index row corrected (refresh_due) once
-- the scope is done. The caller set the revision context and forgot the
-- expired deletions first (forget_expired_deletions), so the correction
-- sees them gone. Returns how many were deleted (at most batch_size).
create or replace function membank_private.purge_expired_by_scope(batch_size integer)
returns bigint
language plpgsql
volatile
security invoker
set search_path to pg_catalog, pg_temp
as $$
declare
    _now timestamptz := statement_timestamp();
    _down integer [] := '{}';
    _scope_id uuid;
    _deleted bigint;
    _count bigint := 0;
begin
    for _scope_id in
        select d.scope_id from membank_private.due_scopes as d
        where d.kind = 'expiry' and d.due_time <= _now
        order by d.due_time, d.scope_id
        limit least(batch_size * 4, 1000)
    loop
        exit when _count >= batch_size;
        continue when cardinality(_down) > 0 and (membank_private.scope_node(_scope_id)).group_id = any(_down);
        begin
            perform from membank_private.scope_locks as l where l.scope_id = _scope_id for update skip locked;
            continue when not found;
            with batch as (
                select m.name from membank_private.memories as m
                where m.scope_id = _scope_id and m.expire_time <= _now
                order by m.expire_time
                limit batch_size - _count
                for update skip locked
            ), deleted as (
                delete from membank_private.memories as m
                using batch as b
                where m.scope_id = _scope_id and m.name = b.name
                returning 1
            )
            select count(*) into _deleted from deleted;
            perform membank_private.refresh_due(_scope_id, 'expiry');  -- its next expiry, or out of the index
        exception
            when others then
                if not membank_private.node_unreachable(sqlstate) then
                    raise;
                end if;
                _down := _down || membank_private.skip_unreachable('purge_expired_memories', _scope_id, sqlerrm);
                continue;
        end;
        _count := _count + _deleted;
    end loop;
    return _count;
end
$$;

-- name: retention_by_scope: retention_batch on Citus: scopes found shard by shard, then removed scope by scope.
-- The scopes holding something past its window come from scopes_where
-- (121_due_work.sql: a node that does not answer is reported and its scopes
-- skipped). Each removal is a router statement that re-checks its rows
-- under FOR UPDATE SKIP LOCKED (revisions: that the memory is still gone),
-- so a row another transaction holds is left to a later batch, as on one
-- server; a scope whose node stops answering is skipped with a WARNING.
-- The windows are passed in (not the settings row: a function taking a
-- table's row type would hold up dropping the table in a downgrade).
create or replace function membank_private.retention_by_scope(
    batch_size integer, deleted_revisions interval, finished_operations interval, events interval
)
returns jsonb
language plpgsql
volatile
security invoker
set search_path to pg_catalog, pg_temp
as $$
declare
    _now timestamptz := statement_timestamp();
    _scope_id uuid;
    _n bigint;
    _counts bigint [] := array[0, 0, 0, 0];  -- revisions, operations, events, sessions
    _kind integer;
    _down integer [] := '{}';
begin
    for _kind in 1 .. 4 loop
        continue when (_kind = 1 and retention_by_scope.deleted_revisions is null)
                      or (_kind = 2 and retention_by_scope.finished_operations is null)
                      or (_kind in (3, 4) and retention_by_scope.events is null);
        for _scope_id in
            select s.scope_id
            from membank_private.scopes_where(
                case _kind when 1 then 'membank_private.memory_revisions' when 2 then 'membank_private.operations'
                           when 3 then 'membank_private.events' else 'membank_private.sessions' end,
                case _kind
                    when 1 then format('x.action = ''DELETED'' and x.create_time < %L::timestamptz',
                                       _now - retention_by_scope.deleted_revisions)
                    when 2 then format('x.done and x.update_time < %L::timestamptz',
                                       _now - retention_by_scope.finished_operations)
                    when 3 then format('x.append_time < %L::timestamptz', _now - retention_by_scope.events)
                    else format('x.update_time < %L::timestamptz', _now - retention_by_scope.events)
                end,
                batch_size) as s (scope_id)
            order by s.scope_id
        loop
            exit when _counts[_kind] >= batch_size;
            continue when cardinality(_down) > 0 and (membank_private.scope_node(_scope_id)).group_id = any(_down);
            begin
                _n := membank_private.retention_in_scope(_kind, _scope_id, batch_size - _counts[_kind], _now,
                    retention_by_scope.deleted_revisions, retention_by_scope.finished_operations,
                    retention_by_scope.events);
            exception
                when others then
                    if not membank_private.node_unreachable(sqlstate) then
                        raise;
                    end if;
                    _down := _down || membank_private.skip_unreachable('apply_retention', _scope_id, sqlerrm);
                    continue;
            end;
            _counts[_kind] := _counts[_kind] + _n;
        end loop;
    end loop;
    return jsonb_build_object('revisions', _counts[1], 'operations', _counts[2], 'events', _counts[3],
                              'sessions', _counts[4]);
end
$$;

-- name: retention_in_scope: remove up to max_rows of one kind past its window in one scope (router statements).
-- kind: 1 revisions of deleted memories, 2 finished operations, 3 events, 4 sessions left empty.
create or replace function membank_private.retention_in_scope(
    kind integer, scope_id uuid, max_rows bigint, now timestamptz,
    deleted_revisions interval, finished_operations interval, events interval
)
returns bigint
language plpgsql
volatile
security invoker
set search_path to pg_catalog, pg_temp
as $$
declare
    _sid uuid := scope_id;
    _n bigint;
begin
    if kind = 1 then
        with gone as (
            select r.memory_name, r.revision from membank_private.memory_revisions as r
            where r.scope_id = _sid and r.memory_name in (
                    select c.memory_name from membank_private.memory_revisions as c
                    where c.scope_id = _sid and c.action = 'DELETED'
                      and c.create_time < now - retention_in_scope.deleted_revisions
                      and not exists (select 1 from membank_private.memory_revisions as l
                                      where l.scope_id = _sid and l.memory_name = c.memory_name
                                        and l.revision > c.revision)
                    order by c.create_time
                    limit max_rows)
              and not exists (select 1 from membank_private.memories as m
                              where m.scope_id = _sid and m.name = r.memory_name)
            for update skip locked
        ), removed as (
            delete from membank_private.memory_revisions as r using gone as g
            where r.scope_id = _sid and r.memory_name = g.memory_name and r.revision = g.revision
            returning 1
        )
        select count(*) into _n from removed;
    elsif kind = 2 then
        with old as (
            select o.name from membank_private.operations as o
            where o.scope_id = _sid and o.done and o.update_time < now - retention_in_scope.finished_operations
            order by o.update_time
            limit max_rows
            for update skip locked
        ), removed as (
            delete from membank_private.operations as o using old
            where o.scope_id = _sid and o.name = old.name
            returning 1
        )
        select count(*) into _n from removed;
    elsif kind = 3 then
        with old as (
            select e.session_id, e.event_id from membank_private.events as e
            where e.scope_id = _sid and e.append_time < now - retention_in_scope.events
            order by e.append_time
            limit max_rows
            for update skip locked
        ), removed as (
            delete from membank_private.events as e using old
            where e.scope_id = _sid and e.session_id = old.session_id and e.event_id = old.event_id
            returning 1
        )
        select count(*) into _n from removed;
    else
        with empty as (
            select x.session_id from membank_private.sessions as x
            where x.scope_id = _sid and x.update_time < now - retention_in_scope.events
              and not exists (select 1 from membank_private.events as e
                              where e.scope_id = _sid and e.session_id = x.session_id)
            limit max_rows
            for update skip locked
        ), removed as (
            delete from membank_private.sessions as x using empty
            where x.scope_id = _sid and x.session_id = empty.session_id
            returning 1
        )
        select count(*) into _n from removed;
    end if;
    return _n;
end
$$;

-- Per-scope HNSW indexes on Citus. A partial index on the distributed
-- table would be built on every shard (31 of 32 of them empty for the
-- scope); this plan builds each one on the shard that holds its scope, on
-- the worker that holds the shard, under the same name as on one server
-- (scope_hnsw_<scope id>_<dimension>). Retrieval through the coordinator
-- asks the scope's worker whether the index is there (scope_hnsw_ready, a
-- router read) and sends the probe, which the worker plans on the shard
-- with the index. A shard
-- moved by the rebalancer arrives without it; the next plan builds it again.

-- name: run_on_node: run a command on a Citus node outside a transaction (CREATE INDEX CONCURRENTLY); raise on failure.
create or replace function membank_private.run_on_node(node_name text, node_port integer, command text)
returns text
language plpgsql
volatile
security invoker
set search_path to pg_catalog, pg_temp
as $$
declare
    _ok boolean;
    _result text;
begin
    select r.success, r.result into _ok, _result
    from master_run_on_worker(array[node_name], array[node_port], array[command], false) as r;
    if not _ok then
        raise exception 'command on %:% failed: %', node_name, node_port, _result
            using errcode = 'external_routine_exception', detail = command;
    end if;
    return _result;
end
$$;

-- name: scope_vector_index_plan_on_shards: scope_vector_index_plan on Citus, each index on its scope's shard.
create or replace function membank_private.scope_vector_index_plan_on_shards(
    min_memories integer, dimension integer, vector_schema text
) returns table (action text, scope_id uuid, memories bigint, index_name text, statement text)
language plpgsql
volatile
security invoker
set search_path to pg_catalog, pg_temp
as $$
declare
    _existing jsonb;
    _counts jsonb;
begin
    -- The per-scope indexes on every worker's shards, from their catalogs.
    select coalesce(jsonb_agg(x.e || jsonb_build_object('node_name', w.nodename, 'node_port', w.nodeport)), '[]')
    into _existing
    from run_command_on_workers(
        'select coalesce(json_agg(json_build_object(''index_name'', c.relname, ''valid'','
        || ' i.indisvalid and i.indisready)), ''[]'') from pg_catalog.pg_index as i'
        || ' join pg_catalog.pg_class as c on c.oid = i.indexrelid'
        || ' where c.relnamespace = ''membank_private''::regnamespace'
        || ' and c.relname ~ ''^scope_hnsw_[0-9a-f]{32}_[0-9]+$''') as w
    cross join lateral jsonb_array_elements(w.result::jsonb) as x (e)
    where w.success;
    -- Memory counts of the scopes that want one (as on one server: from
    -- min_memories, kept down to half of it) or have one: a plain read over
    -- the shards; the plan below is joined on the coordinator.
    select coalesce(jsonb_object_agg(s.scope_id::text, s.doc_count), '{}') into _counts
    from membank_private.scope_stats as s
    where s.doc_count >= min_memories / 2
       or s.scope_id = any(array(select substr(e ->> 'index_name', 12, 32)::uuid
                                 from jsonb_array_elements(_existing) as e));
    return query
    with wanted as (
        select c.key::uuid as scope_id, (c.value #>> '{}')::bigint as memories,
               membank_private.scope_hnsw_index_name(c.key::uuid, scope_vector_index_plan_on_shards.dimension) as index_name
        from jsonb_each(_counts) as c
        where scope_vector_index_plan_on_shards.dimension is not null and (c.value #>> '{}')::bigint >= min_memories / 2
    ), existing as (
        select e ->> 'node_name' as node_name, (e ->> 'node_port')::integer as node_port,
               e ->> 'index_name' as index_name, substr(e ->> 'index_name', 12, 32)::uuid as scope_id,
               (e ->> 'valid')::boolean as valid
        from jsonb_array_elements(_existing) as e
    ), placed as (
        -- Where each wanted scope's shard of memory_embeddings is.
        select w.scope_id, w.memories, w.index_name, p.nodename::text as node_name, p.nodeport::integer as node_port,
               shard_name('membank_private.memory_embeddings'::regclass, p.shardid) as shard
        from wanted as w
        inner join pg_dist_shard_placement as p
            on p.shardid = get_shard_id_for_distribution_column('membank_private.memory_embeddings', w.scope_id)
    ), actions as (
        select 'drop' as action, x.index_name, x.scope_id,
               coalesce((_counts ->> x.scope_id::text)::bigint, 0) as memories,
               format('select membank_private.run_on_node(%L, %s, %L)', x.node_name, x.node_port,
                      format('drop index concurrently if exists membank_private.%I', x.index_name)) as statement,
               1 as step
        from existing as x
        left join wanted as w on w.index_name = x.index_name
        where w.index_name is null or not x.valid
        union all
        select 'create', p.index_name, p.scope_id, p.memories,
               format('select membank_private.run_on_node(%L, %s, %L)', p.node_name, p.node_port,
                      format('create index concurrently if not exists %I on %s'
                             ' using hnsw ((embedding::%I.vector(%s)) %I.vector_cosine_ops)'
                             ' with (m = 16, ef_construction = 64)'
                             ' where scope_id = %L::uuid and %I.vector_dims(embedding) = %s',
                             p.index_name, p.shard, vector_schema, scope_vector_index_plan_on_shards.dimension, vector_schema, p.scope_id,
                             vector_schema, scope_vector_index_plan_on_shards.dimension)),
               2
        from placed as p
        left join existing as x on x.index_name = p.index_name and x.node_port = p.node_port
        where (x.index_name is null and p.memories >= min_memories) or not x.valid
    )
    select a.action, a.scope_id, a.memories, a.index_name, a.statement
    from actions as a
    order by a.step, a.memories desc nulls last, a.index_name;
end
$$;
