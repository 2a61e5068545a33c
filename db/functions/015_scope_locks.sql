-- One writer per scope at a time. Every write to a scope's memories takes
-- the scope's write lock before it locks or writes a row: consolidation
-- holds it while it re-checks its candidates and applies, and the lexicon
-- trigger needs it to keep document frequencies consistent. Taking it first,
-- always, means no writer waits for it while holding a row that the lock
-- holder needs: no deadlock between writers of a scope. (On Citus
-- create_memory leaves it to its INSERT's trigger on the shard, which takes
-- it before any row but the new memory's own, which no one else can wait for.)
--
-- The lock is a FOR UPDATE row lock on the scope's row in
-- membank_private.scope_locks, a table on which no role but membank's owner
-- holds any privilege: only membank's own functions can take it. (An
-- advisory lock, the obvious choice, has a key that any connecting role can
-- compute and hold, freezing the scope's writers and the expiry purge.)
--
-- Lock order, everywhere (a wait against this order is what deadlocks):
--   1. generation_jobs rows (the worker's claim, complete_generation_job,
--      prepare_consolidation; erase_scope takes its scope's jobs first);
--   2. embedding_config, the bank-wide row (store_embeddings first calls
--      configure_embedding);
--   3. scope_locks, in scope_id order when several (purges, expiry,
--      delete_profile_schema);
--   4. memories rows, in name order when several (consolidation,
--      compaction, purges; store_embeddings takes FOR KEY SHARE SKIP LOCKED);
--   5. what hangs off a memory: embedding_jobs, memory_embeddings, revisions,
--      the lexicon (written under the memory's lock, or by its cascade).
-- The embedding worker's claim locks only embedding_jobs rows, briefly, and
-- waits for nothing: it is a lease committed before the model is called.
-- A deadlock that can still happen (e.g. against a caller's own
-- transaction) is 40P01; the Python client retries it (DeadlockError).
--
-- The wait is bounded: membank.lock_timeout (a setting the caller may set,
-- default 5s, at least 1 ms) is the most a write
-- waits for the lock; past it the write raises MB040 (retryable: nothing was
-- written and the transaction can be retried once the holder commits).

-- name: scope_lock_timeout: the bounded wait for a scope's write lock (setting membank.lock_timeout, default 5s).
create or replace function membank_private.scope_lock_timeout()
returns text
language plpgsql
stable
security invoker
set search_path to pg_catalog, pg_temp
as $$
declare
    _setting text := nullif(btrim(current_setting('membank.lock_timeout', true)), '');
begin
    if _setting is null then
        return '5s';
    end if;
    if _setting !~ '^[0-9]+(\.[0-9]+)?\s*(ms|s|min)?$' or _setting ~ '^0+(\.0+)?\s*[a-z]*$' then
        raise exception 'membank.lock_timeout: % is not a positive duration', to_jsonb(_setting)
            using errcode = 'invalid_parameter_value',
                  hint = 'set it to milliseconds or a unit of ms, s or min, e.g. set membank.lock_timeout = ''2s''',
                  detail = 'argument: membank.lock_timeout';
    end if;
    -- PostgreSQL's lock_timeout counts whole milliseconds and rounds a value
    -- below 1 ms to 0, which means no limit at all: refused, not rounded up,
    -- so that what the caller set is what applies. Only a value whose whole
    -- part is 0 can be below 1 ms (the common case pays one regex match).
    if _setting ~ '^0' and (substring(_setting from '^[0-9.]+')::numeric
                            * (case substring(_setting from '[a-z]+$') when 's' then 1000 when 'min' then 60000
                                    else 1 end)) < 1 then
        raise exception 'membank.lock_timeout: % is less than 1 ms, which PostgreSQL would round to 0 (no limit)',
            to_jsonb(_setting)
            using errcode = 'invalid_parameter_value',
                  hint = 'set it to 1ms or more, e.g. set membank.lock_timeout = ''2s''',
                  detail = 'argument: membank.lock_timeout';
    end if;
    -- Above 2147483647 ms (about 24.8 days) PostgreSQL refuses lock_timeout
    -- at the first wait, with its own message: refused here, naming ours.
    -- Only a value of 5 digits or more can be that long.
    if _setting ~ '[0-9]{5}' and (substring(_setting from '^[0-9.]+')::numeric
                                   * (case substring(_setting from '[a-z]+$') when 's' then 1000
                                           when 'min' then 60000 else 1 end)) > 2147483647 then
        raise exception 'membank.lock_timeout: % is more than 2147483647 ms, the most PostgreSQL takes',
            to_jsonb(_setting)
            using errcode = 'invalid_parameter_value',
                  hint = 'set it to 2147483647ms or less, e.g. set membank.lock_timeout = ''2s''',
                  detail = 'argument: membank.lock_timeout';
    end if;
    return _setting;
end
$$;

-- name: on_citus: true in a database with the citus extension (a Citus coordinator or worker).
create or replace function membank_private.on_citus()
returns boolean
language sql
stable
security invoker
set search_path to pg_catalog, pg_temp
as $$
    select exists (select from pg_catalog.pg_extension as x where x.extname = 'citus');
$$;

-- name: shard_table: on a Citus node, the name of the local shard of a membank_private table that holds scope_id.
-- For the memories triggers on Citus, which fire on a shard (memories_<id>)
-- on the node holding it: their statements go to the colocated shards of
-- the tables they write (revisions, queue, word counts, the scope's lock
-- row), which are on the same node, by name. A statement naming the
-- distributed table is planned by Citus (router planning, then local
-- execution of the shard query it makes), 0.3 to 0.6 ms each on the worker
-- against about 0.05 for the same statement on the shard (lab cluster,
-- 2026-12-02); a create_memory's triggers ran seven of them. Citus allows a
-- write to a shard from its own execution (the coordinator's connection,
-- or the local execution of a statement made on the worker); statements
-- on a shard are plain PostgreSQL and take no Citus metadata lock, as its
-- own shard queries do. Only ever called from a trigger firing on a shard
-- (tg_table_name is not memories): the shard, and so its colocated shards,
-- are on this node.
create or replace function membank_private.shard_table(table_name text, scope_id uuid)
returns text
language plpgsql
stable
security invoker
set search_path to pg_catalog, pg_temp
as $$
declare
    _table regclass := ('membank_private.' || quote_ident(table_name))::regclass;
begin
    return shard_name(_table, get_shard_id_for_distribution_column(_table, scope_id));
end
$$;

-- name: prepared_on_shard: the name of this session's prepared statement of a statement on shards (prepared once).
-- For the statements Citus nodes run on a scope's shards by name for a
-- retrieval (rank_on_shard, retrieve_on_shard in 070): PL/pgSQL's EXECUTE
-- plans its text on every call (1 to 2 ms each of retrieval's statements
-- on a lab worker, 2026-12-03), where one server keeps generic plans. The
-- coordinator's connections to a worker are kept, so a statement prepared
-- there once is planned once per connection, as on one server; its name
-- is the md5 of its text (shard names included) and argument types, so a
-- changed statement (an upgrade) or another shard gets a statement of its
-- own. Callers run it with EXECUTE name(literals) under
-- plan_cache_mode force_generic_plan, as retrieve_memories on one server.
-- The name is no secret (pg_prepared_statements shows it to the session),
-- and through a worker's own connection the statement runs in the caller's
-- session: a statement of that name is taken only when it is this one (its
-- text, argument types as resolved here); any other (the caller's own
-- PREPARE, which the definer above would run) is deallocated and replaced.
-- The argument types count: the same text prepared by the caller under a
-- search_path of its own (pg_temp first) takes its arguments as a
-- temporary domain named text, whose check (any temporary function) the
-- literals passed here would run as the definer. The text itself is
-- analysed again under this function's search_path when they differ
-- (PostgreSQL's plan cache), so its names resolve as here.
create or replace function membank_private.prepared_on_shard(statement text, argument_types text)
returns text
language plpgsql
volatile
security invoker
set search_path from current
as $$
declare
    _name text := 'membank_' || md5(argument_types || statement);
    _command text := format('prepare %I (%s) as %s', _name, argument_types, statement);
    _found text;  -- the text of the session's statement of that name, if any
    _types regtype [];
begin
    select p.statement, p.parameter_types into _found, _types
    from pg_catalog.pg_prepared_statements as p where p.name = _name;
    if _found is not null and _found = _command
       and _types = string_to_array(argument_types, ',')::regtype [] then
        return _name;
    end if;
    if _found is not null then
        execute format('deallocate %I', _name);
    end if;
    execute _command;
    return _name;
end
$$;

-- name: carry_setting: set a setting for this transaction, on Citus also on the workers' connections of it.
-- A statement on the coordinator locks and writes on the worker that holds
-- the shard, under that connection's settings: set_config on the
-- coordinator never reaches it, so a lock wait there was unbounded and a
-- shard trigger missed the revision context. A SET LOCAL with
-- citus.propagate_set_commands = 'local' is sent to every connection of the
-- transaction, now and later, and stays in force there until the
-- transaction ends. On one server: set_config(name, value, true) alone
-- (distributed() is a constant there: no catalog read per call, and this
-- runs twice per write).
create or replace function membank_private.carry_setting(name text, value text)
returns void
language plpgsql
volatile
security invoker
set search_path to pg_catalog, pg_temp
as $$
begin
    perform set_config(name, value, true);
    if membank_private.distributed() then
        set local citus.propagate_set_commands to 'local';
        execute format('set local %s to %L', quote_ident(split_part(name, '.', 1))
                       || case when name like '%.%' then '.' || quote_ident(split_part(name, '.', 2)) else '' end,
                       value);
    end if;
end
$$;

-- name: lock_scope_waiting: take the scope's write lock, waiting at most membank.lock_timeout (else MB040).
create or replace function membank_private.lock_scope_waiting(scope_id uuid, timeout text)
returns void
language plpgsql
volatile
security invoker
set search_path to pg_catalog, pg_temp
as $$
declare
    _found boolean;
    _callers text := current_setting('lock_timeout');
begin
    -- The bounded wait applies to this lock only: the caller's lock_timeout
    -- is put back once the lock is held (a local setting made in a function
    -- lasts until the transaction ends unless the function's own SET clause
    -- names it, and this one's names only search_path). On an error the
    -- handler's subtransaction takes it back. On Citus the wait is also
    -- carried to the workers' connections (see carry_setting), where it
    -- stays until the transaction ends.
    perform membank_private.carry_setting('lock_timeout', timeout);
    select true into _found
    from membank_private.scope_locks as l where l.scope_id = lock_scope_waiting.scope_id
    for update;
    if _found is null then
        insert into membank_private.scope_locks as l (scope_id) values (lock_scope_waiting.scope_id)
        on conflict do nothing;
        perform from membank_private.scope_locks as l where l.scope_id = lock_scope_waiting.scope_id for update;
    end if;
    perform set_config('lock_timeout', _callers, true);
exception
    when lock_not_available then
        raise exception 'scope: another write to this scope held its write lock for longer than %', timeout
            using errcode = 'MB040',
                  detail = format('scope_id: %s', scope_id),
                  hint = 'nothing was written; retry the call (the wait limit is the setting membank.lock_timeout)';
end
$$;

-- name: lock_scope: take the scope's write lock until the transaction ends (re-entrant, bounded wait).
create or replace function membank_private.lock_scope(scope_id uuid)
returns void
language plpgsql
volatile
security invoker
set search_path to pg_catalog, pg_temp
as $$
declare
    _timeout text := membank_private.scope_lock_timeout();  -- checked on every call
    _found boolean;
begin
    -- Free, or held by this transaction already (the common cases): taken
    -- at once, without the subtransaction of the waiting path's exception
    -- handler (a subtransaction id per lock, ~20 us).
    select true into _found
    from membank_private.scope_locks as l where l.scope_id = lock_scope.scope_id
    for update skip locked;
    if _found is null then  -- held by another transaction, or the scope's first write
        perform membank_private.lock_scope_waiting(scope_id, _timeout);
    end if;
    if membank_private.distributed() then
        -- A write to the scope's memories may queue an embedding job (on the
        -- shard, by trigger): the coordinator's index of due work hears of it
        -- here, before the job is written (121_due_work.sql).
        perform membank_private.mark_due(scope_id, 'embedding');
    end if;
end
$$;

-- name: try_lock_scope: take the scope's write lock if no other transaction holds it; false (no wait) if one does.
-- For maintenance over many scopes (compact_scopes): a scope another write
-- holds is skipped and reported, never waited for, as purge_expired_memories
-- skips it. A scope without a lock row yet (its first write is in flight)
-- takes the bounded wait of lock_scope, and MB040 there is also false.
create or replace function membank_private.try_lock_scope(scope_id uuid)
returns boolean
language plpgsql
volatile
security invoker
set search_path to pg_catalog, pg_temp
as $$
declare
    _found boolean;
begin
    select true into _found
    from membank_private.scope_locks as l where l.scope_id = try_lock_scope.scope_id
    for update skip locked;
    if _found then
        return true;
    end if;
    if exists (select from membank_private.scope_locks as l where l.scope_id = try_lock_scope.scope_id) then
        return false;  -- held by another transaction
    end if;
    begin
        perform membank_private.lock_scope(scope_id);
    exception
        when sqlstate 'MB040' then
            return false;
    end;
    return true;
end
$$;

-- Bank-wide rows (the embedding configuration, the retention settings,
-- profile schemas, scope bindings) are the worker's and the admin's. Every
-- function that locks or writes one first sets
--     perform set_config('lock_timeout', membank_private.scope_lock_timeout(), true);
-- (a local setting inside a function with a SET clause ends with the call)
-- and turns lock_not_available into MB040 with raise_bank_row_busy: a
-- caller holding such a row open makes others fail after
-- membank.lock_timeout, never wait until statement_timeout.

-- name: raise_bank_row_busy: raise MB040 for a wait on a bank-wide row that outlasted membank.lock_timeout.
create or replace function membank_private.raise_bank_row_busy(argument text, what text)
returns void
language plpgsql
stable
security invoker
set search_path to pg_catalog, pg_temp
as $$
begin
    raise exception '%: another call held % for longer than %', argument, what, membank_private.scope_lock_timeout()
        using errcode = 'MB040', detail = format('argument: %s', argument),
              hint = 'nothing was written; retry the call (the wait limit is the setting membank.lock_timeout)';
end
$$;
