-- Due work on Citus: which scopes have jobs due, known to the coordinator
-- without reading a shard, so that a claim goes only to the workers of the
-- scopes it claims in, and a worker that is down stops only its own scopes.
--
-- Reading the queues themselves for candidates (what 120_scope_by_scope_jobs.sql
-- did first) is a statement on every shard: 32 shard commands per claim, and
-- while one worker is down every claim fails, for every scope. A queue per
-- node (the worker process asking each node group in turn) would still read
-- every shard of that node per call and would need the worker process to
-- know the nodes. Instead the coordinator keeps an index of due work of its
-- own, membank_private.due_scopes (kind, scope_id, due_time): a table that is
-- neither distributed nor a reference table (a write to a reference table
-- waits for every node), so marking it never waits for a worker.
--
-- The index is a hint kept on the safe side: a row's due_time is never later
-- than the earliest due job of its scope and kind; a scope may have a row and
-- no due job (a claim finds nothing there and corrects the row), never a due
-- job and no row. It is kept so by:
--   * marking (mark_due) in the transaction that queues the work, before the
--     job is written: every write to a scope's memories takes the scope's
--     write lock first (lock_scope marks 'embedding': the memories trigger
--     queues on the shard, where the coordinator's table is out of reach),
--     and every insert of a generation job marks 'generation';
--   * likewise every write that gives a memory an expire_time marks 'expiry'
--     with that time (create_memory, update_memory, rollback_memory bringing
--     a deleted memory back, profiles, extracted facts and compaction
--     summaries with a ttl), after the scope's write lock and before the row;
--   * correcting (refresh_due) only under the row's lock, taken FOR UPDATE
--     SKIP LOCKED: a writer that marks meanwhile waits for the correction to
--     commit and then marks again (ON CONFLICT after a delete inserts anew),
--     and a row a writer holds is left as it is (the writer makes it due).
-- Embedding claims correct each scope they visit (their transactions are
-- short: the claim is a lease). A generation claim lasts its job's model
-- call, so it corrects nothing while it holds a job; finish_operation and
-- fail_generation_job correct the scope just before the worker commits, and
-- a claim that found nothing at all corrects the rows it visited.
--
-- A scope's claim runs in a subtransaction: when its worker does not answer
-- (connection refused, shut down, starting up: SQLSTATE class 08, 57P01-03)
-- the scope is skipped with a WARNING naming the node, and so is every other
-- scope of that node in the same call; the other scopes are claimed as usual.
--
-- A claim and its completion: the coordinator remembers which scope each
-- claimed job is in (the session setting membank.claimed_scopes, a hint
-- checked against the job's row), so store_embeddings, fail_embedding_jobs,
-- prepare_consolidation, complete_generation_job and fail_generation_job go
-- straight to the scope's worker. A name it does not know (a job stored by
-- another connection than the one that claimed it) is looked up over every
-- shard, as before.
--
-- Expiry ('expiry', migration 0026): due_time is never later than the
-- scope's earliest expire_time, of its memories and of the deletions that
-- still hold text (a memory deleted before its expire_time is forgotten once
-- that passes). purge_expired_memories reads the index for the scopes to
-- visit, goes to each one's worker alone, and corrects its row once the
-- scope is done (refresh_due, in the purge's transaction). A scope of a node
-- that does not answer keeps its row and is purged by a later call.
--
-- Writes through a worker's own connection do not mark the index (the
-- coordinator's table is out of its reach): rebuild_due_scopes finds them,
-- and the client's job workers run it every membank.worker rebuild interval
-- (MEMBANK_DUE_REBUILD_INTERVAL, pyclient/membank/worker.py).
--
-- One server: none of this runs; the claims are the one-statement paths of
-- 050_embeddings.sql and 120_scope_by_scope_jobs.sql (distributed() is a
-- constant false there).

-- name: mark_due: note that a scope may have work of kind ('embedding', 'generation', 'expiry') due from due (Citus).
create or replace function membank_private.mark_due(
    scope_id uuid, kind text, due timestamptz default statement_timestamp()
) returns void
language plpgsql
volatile
security invoker
set search_path to pg_catalog, pg_temp
as $$
begin
    -- Only the coordinator holds the index (a write through a worker's own
    -- connection is found by rebuild_due_scopes, run by membank db distribute).
    if not membank_private.distributed() or membank_private.node_group() <> 0 then
        return;
    end if;
    insert into membank_private.due_scopes as d (kind, scope_id, due_time)
    values (mark_due.kind, mark_due.scope_id, mark_due.due)
    on conflict on constraint due_scopes_pkey do update set due_time = excluded.due_time
    where d.due_time > excluded.due_time;
end
$$;

-- name: refresh_due: set a scope's due_time to its earliest due job of kind, or drop the row when it has none.
-- Under the row's lock, FOR UPDATE SKIP LOCKED: a row another transaction
-- holds (a writer marking it) is left as it is. One router read: the scope's shard.
create or replace function membank_private.refresh_due(scope_id uuid, kind text)
returns void
language plpgsql
volatile
security invoker
set search_path to pg_catalog, pg_temp
as $$
declare
    _next timestamptz;
begin
    perform from membank_private.due_scopes as d
    where d.kind = refresh_due.kind and d.scope_id = refresh_due.scope_id
    for update skip locked;
    if not found then
        return;
    end if;
    if kind = 'embedding' then
        _next := (select min(j.retry_time) from membank_private.embedding_jobs as j
                  where j.scope_id = refresh_due.scope_id and j.attempts < 5);
    elsif kind = 'expiry' then
        -- The memories' earliest expiry, and the deletions still holding
        -- text (forget_expired_deletions; any DELETED revision, not only a
        -- last one: earlier is on the safe side).
        _next := least(
            (select min(m.expire_time) from membank_private.memories as m
             where m.scope_id = refresh_due.scope_id and m.expire_time is not null),
            (select min(r.expire_time) from membank_private.memory_revisions as r
             where r.scope_id = refresh_due.scope_id and r.action = 'DELETED' and r.expire_time is not null
               and (r.fact is not null or r.structured_content is not null)));
    else
        _next := (select min(j.retry_time) from membank_private.generation_jobs as j
                  where j.scope_id = refresh_due.scope_id);
    end if;
    if _next is null then
        delete from membank_private.due_scopes as d
        where d.kind = refresh_due.kind and d.scope_id = refresh_due.scope_id;
    else
        update membank_private.due_scopes as d set due_time = _next
        where d.kind = refresh_due.kind and d.scope_id = refresh_due.scope_id;
    end if;
end
$$;

-- name: rebuild_due_scopes: mark every scope with queued jobs or expiring memories (reads every shard); rows marked.
-- For membank db distribute (rows moved into the shards queued work the
-- index never saw) and for writes made through a worker's own connection
-- (the client's job workers run it on an interval). Shard by shard with
-- run_command_on_placements: a node that does not answer is reported (a
-- WARNING naming it, once) and its scopes left as they are in the index;
-- the other nodes' scopes are marked.
create or replace function membank_private.rebuild_due_scopes()
returns bigint
language plpgsql
volatile
security invoker
set search_path to pg_catalog, pg_temp
as $$
declare
    _read record;
    _placement record;
    _down text [] := '{}';
    _count bigint := 0;
    _n bigint;
begin
    -- Only the coordinator holds the index (as mark_due).
    if not membank_private.distributed() or membank_private.node_group() <> 0 then
        return 0;
    end if;
    -- Each shard's (scope_id, earliest due) pairs as JSON: no statement
    -- joins the coordinator's table with a distributed one.
    for _read in
        select * from (values
            ('embedding', 'membank_private.embedding_jobs',
             'select j.scope_id, min(j.retry_time) as due from %s as j where j.attempts < 5 group by j.scope_id'),
            ('generation', 'membank_private.generation_jobs',
             'select j.scope_id, min(j.retry_time) as due from %s as j group by j.scope_id'),
            ('expiry', 'membank_private.memories',
             'select m.scope_id, min(m.expire_time) as due from %s as m'
             ' where m.expire_time is not null group by m.scope_id'),
            ('expiry', 'membank_private.memory_revisions',
             'select r.scope_id, min(r.expire_time) as due from %s as r where r.action = ''DELETED'''
             ' and r.expire_time is not null and (r.fact is not null or r.structured_content is not null)'
             ' group by r.scope_id')) as v (kind, table_name, query)
    loop
        for _placement in
            execute 'select p.nodename || '':'' || p.nodeport as node, p.success, p.result'
                    ' from pg_catalog.run_command_on_placements($1::regclass, $2) as p order by p.shardid'
            using _read.table_name,
                  'select coalesce(json_agg(json_build_array(g.scope_id, g.due))::text, ''[]'') from ('
                  || _read.query || ') as g'
        loop
            if not _placement.success then
                if not _placement.node = any(_down) then
                    _down := _down || _placement.node;
                    raise warning 'rebuild_due_scopes: node % does not answer; its scopes were left as they are',
                        _placement.node
                        using detail = _placement.result, hint = 'run it again once the node is back';
                end if;
                continue;
            end if;
            with marked as (
                insert into membank_private.due_scopes as d (kind, scope_id, due_time)
                select _read.kind, (e ->> 0)::uuid, (e ->> 1)::timestamptz
                from json_array_elements(_placement.result::json) as e
                on conflict on constraint due_scopes_pkey do update set due_time = excluded.due_time
                where d.due_time > excluded.due_time
                returning 1
            )
            select count(*) into _n from marked;
            _count := _count + _n;
        end loop;
    end loop;
    return _count;
end
$$;

-- name: rebuild_due_work: rebuild_due_scopes for the job worker (membank_admin; 0 on one server).
-- SECURITY DEFINER so that an admin login needs no privilege on the index
-- or on Citus's run_command_on_placements; a role bound to scopes is
-- refused (every scope's maintenance). The client's job worker calls it
-- every due_rebuild_interval seconds (pyclient/membank/worker.py), so that
-- writes made through a worker's own connection are found without an operator.
create or replace function membank_private.rebuild_due_work()
returns bigint
language plpgsql
volatile
security definer
set search_path to pg_catalog, pg_temp
as $$
begin
    perform membank_private.refuse_bound_caller('rebuild_due_scopes');
    return membank_private.rebuild_due_scopes();
end
$$;

-- name: scope_node: the Citus node (group id, "host:port") holding a scope's shards, from the coordinator's metadata.
create or replace function membank_private.scope_node(scope_id uuid, out group_id integer, out node text)
language plpgsql
stable
security invoker
set search_path to pg_catalog, pg_temp
as $$
begin
    execute 'select p.groupid, n.nodename || '':'' || n.nodeport'
            ' from pg_catalog.pg_dist_placement as p'
            ' inner join pg_catalog.pg_dist_node as n on n.groupid = p.groupid and n.noderole = ''primary'''
            ' where p.shardid = pg_catalog.get_shard_id_for_distribution_column('
            '''membank_private.memories''::regclass, $1)'
            ' limit 1'
    into group_id, node using scope_id;
end
$$;

-- name: remember_claimed: keep which scope each claimed job is in (the session's membank.claimed_scopes hint).
-- keys: job keys (memory names, generation job ids, operation names) as
-- text; scope_ids: their scopes. is_local: for the transaction only
-- (generation: claim and completion share it) or the session (embedding:
-- the claim commits before the vectors are stored).
create or replace function membank_private.remember_claimed(keys text[], scope_ids uuid[], is_local boolean)
returns void
language plpgsql
volatile
security invoker
set search_path to pg_catalog, pg_temp
as $$
begin
    perform set_config('membank.claimed_scopes',
                       coalesce((select jsonb_object_agg(k.key, k.scope_id)
                                 from unnest(keys, scope_ids) as k (key, scope_id)), '{}')::text,
                       is_local);
end
$$;

-- name: claimed_scope: the scope a claimed job's key is in, by the session's hint (null: not known).
-- A hint only: every caller reads its row with scope_id = this and the key,
-- and looks over every shard when that finds nothing. Read with a pattern,
-- not a cast in an exception block: on Citus a block is a subtransaction,
-- and Citus sends SAVEPOINT and RELEASE to every worker the transaction has
-- reached (two round trips each, and this runs several times per generation
-- job). remember_claimed writes jsonb's text, {"key": "uuid", ...}; a hint
-- the caller set to anything else matches nothing: no hint.
create or replace function membank_private.claimed_scope(key text)
returns uuid
language plpgsql
stable
security invoker
set search_path to pg_catalog, pg_temp
as $$
declare
    _hint text := nullif(current_setting('membank.claimed_scopes', true), '');
begin
    if _hint is null or not membank_private.distributed() or key !~ '^[0-9a-f-]{1,36}$' then
        return null;
    end if;
    return substring(_hint from '(?:^\{|, )"' || key
                                 || '": "([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})"(?:, |\}$)')::uuid;
end
$$;

-- name: node_unreachable: whether an error (SQLSTATE) is a Citus node that does not answer.
create or replace function membank_private.node_unreachable(sqlstate text)
returns boolean
language sql
immutable
security invoker
set search_path to pg_catalog, pg_temp
as $$
    select left(sqlstate, 2) = '08' or sqlstate in ('57P01', '57P02', '57P03');
$$;

-- Maintenance over every scope (TTL purge, forgetting expired deletions)
-- on Citus finds its scopes shard by shard with run_command_on_placements:
-- a shard whose node does not answer reports a failure instead of failing
-- the read, so the purge goes on with the other nodes' scopes and reports
-- the node (a WARNING, once per node); each scope's work then runs in a
-- subtransaction that skips the scope if its node stops answering.

-- name: scopes_where: scope_ids of a distributed table's rows matching condition, shard by shard, skipping dead nodes.
-- condition: an SQL boolean over the table's columns as alias x, made by
-- membank's own functions (format with %L); at most max_scopes per shard.
create or replace function membank_private.scopes_where(table_name text, condition text, max_scopes integer)
returns setof uuid
language plpgsql
volatile
security invoker
set search_path to pg_catalog, pg_temp
as $$
declare
    _placement record;
    _down text [] := '{}';
begin
    for _placement in
        execute 'select p.nodename || '':'' || p.nodeport as node, p.success, p.result'
                ' from pg_catalog.run_command_on_placements($1::regclass, $2) as p order by p.shardid'
        using table_name,
              format('select coalesce(json_agg(s.scope_id)::text, ''[]'') from (select distinct x.scope_id'
                     ' from %%s as x where %s limit %s) as s', condition, max_scopes)
    loop
        if _placement.success then
            return query select (e #>> '{}')::uuid from json_array_elements(_placement.result::json) as e;
        elsif not _placement.node = any(_down) then
            _down := _down || _placement.node;
            raise warning 'node % does not answer; its scopes were skipped', _placement.node
                using detail = _placement.result, hint = 'run the maintenance again once the node is back';
        end if;
    end loop;
end
$$;

-- name: skip_unreachable: report a scope skipped because its node stopped answering (a WARNING naming the node).
create or replace function membank_private.skip_unreachable(what text, scope_id uuid, error text)
returns integer
language plpgsql
volatile
security invoker
set search_path to pg_catalog, pg_temp
as $$
declare
    _node record := membank_private.scope_node(scope_id);
begin
    raise warning '%: node % does not answer; scope % was skipped', what, _node.node, scope_id
        using detail = error, hint = 'run it again once the node is back';
    return _node.group_id;
end
$$;

-- Whole-bank backlogs on Citus (embedding_backlog, generation_backlog for a
-- role bound to no scope): the jobs waiting are in the scopes of the index
-- (every job that can still run keeps its scope there), so the counts are
-- read from those scopes only, one statement per node naming its scopes
-- (scope_id = any(...): the shards of those scopes alone), each in a
-- subtransaction: a node that does not answer is left out of the figures
-- with a WARNING naming it.

-- name: due_scopes_by_node: the index's scopes of kind, grouped by the node that holds them (Citus).
create or replace function membank_private.due_scopes_by_node(kind text)
returns table (group_id integer, node text, scope_ids uuid[])
language plpgsql
stable
security invoker
set search_path to pg_catalog, pg_temp
as $$
begin
    return query
    select n.group_id, n.node, array_agg(d.scope_id order by d.scope_id)
    from membank_private.due_scopes as d
    cross join lateral membank_private.scope_node(d.scope_id) as n
    where d.kind = due_scopes_by_node.kind
    group by n.group_id, n.node
    order by n.group_id;
end
$$;

-- name: count_on_placements: count a distributed table's rows matching condition, shard by shard, skipping dead nodes.
-- condition: an SQL boolean over the table's columns as alias x, made by
-- membank's own functions. A node that does not answer is left out of the
-- count with a WARNING naming it (what: the caller's name).
create or replace function membank_private.count_on_placements(what text, table_name text, condition text)
returns bigint
language plpgsql
volatile
security invoker
set search_path to pg_catalog, pg_temp
as $$
declare
    _placement record;
    _down text [] := '{}';
    _count bigint := 0;
begin
    for _placement in
        execute 'select p.nodename || '':'' || p.nodeport as node, p.success, p.result'
                ' from pg_catalog.run_command_on_placements($1::regclass, $2) as p order by p.shardid'
        using table_name, format('select count(*) from %%s as x where %s', condition)
    loop
        if _placement.success then
            _count := _count + _placement.result::bigint;
        elsif not _placement.node = any(_down) then
            _down := _down || _placement.node;
            raise warning '%: node % does not answer; its scopes were left out of the figures', what, _placement.node
                using detail = _placement.result, hint = 'ask again once the node is back';
        end if;
    end loop;
    return _count;
end
$$;
