-- Per-scope HNSW indexes for the few big scopes.
--
-- The vector leg of a scope ranks Hamming distances over the scope's whole
-- range of the covering index (vector_candidates), so its cost grows with
-- the scope: ~30k codes for the biggest. One global HNSW index filtered by
-- scope does not fix that (small scopes get fewer than k rows, big ones need
-- iterative scans that cost ~100 ms). A partial HNSW index per big scope
-- (WHERE scope_id = that scope) is a graph of that scope only: a probe costs
-- what an unscoped probe costs, whatever the scope's size, and returns k rows
-- whenever the scope holds k (iterative scan). HNSW: Malkov & Yashunin, "Efficient
-- and robust approximate nearest neighbor search using Hierarchical Navigable
-- Small World graphs", TPAMI 2020; pgvector's implementation, m 16,
-- ef_construction 64.
--
-- The catalog is the registry: an index named scope_hnsw_<scope id>_<dimension>
-- serves that scope once PostgreSQL marks it valid. Its predicate also holds
-- the dimension, so a vector of another model (after `membank reembed`) is
-- simply not in it, never a cast error on insert. Indexes are built and
-- dropped with CREATE/DROP INDEX CONCURRENTLY, which cannot run inside a
-- function: scope_vector_index_plan says what to run, and the admin runs it
-- (`membank scope-indexes`) as the tables' owner.

-- name: scope_hnsw_index_name: the name of a scope's partial HNSW index for vectors of dimension.
create or replace function membank_private.scope_hnsw_index_name(scope_id uuid, dimension integer)
returns text
language sql
immutable
security invoker
set search_path to pg_catalog, pg_temp
as $$
    select format('scope_hnsw_%s_%s', replace(scope_id::text, '-', ''), dimension);
$$;

-- name: scope_hnsw_ready_here: true when this server's catalog holds the scope's valid partial HNSW index.
create or replace function membank_private.scope_hnsw_ready_here(scope_id uuid, dimension integer)
returns boolean
language sql
stable
security invoker
set search_path to pg_catalog, pg_temp
as $$
    -- An index that CREATE INDEX CONCURRENTLY left invalid (a failed or
    -- running build) is ignored, as the planner ignores it.
    select coalesce((select i.indisvalid and i.indisready
                     from pg_catalog.pg_index as i
                     where i.indexrelid = pg_catalog.to_regclass(
                         format('membank_private.%I', membank_private.scope_hnsw_index_name(scope_id, dimension)))),
                    false);
$$;

-- name: scope_hnsw_ready: true when the scope's partial HNSW index for this dimension is valid where its rows are.
-- On a Citus coordinator the index lives on the scope's shard, on the
-- worker holding it, out of the coordinator's catalog: the check runs
-- there, inside a router read of the scope's shard (one shard command, to
-- the scope's worker; a scope with no vector has no index to use), unless
-- the routed statement of this retrieval (retrieve_on_shard, 070) already
-- asked it there (remember_scope_hnsw, below). On one server and on a
-- worker, this server's catalog. PL/pgSQL: the memo is looked at before the
-- read, which Citus would otherwise run first, as a sub-plan.
create or replace function membank_private.scope_hnsw_ready(scope_id uuid, dimension integer)
returns boolean
language plpgsql
stable
security invoker
set search_path to pg_catalog, pg_temp
as $$
declare
    _memo text;
begin
    if not (membank_private.distributed() and membank_private.node_group() = 0) then
        return membank_private.scope_hnsw_ready_here(scope_id, dimension);
    end if;
    _memo := current_setting('membank.scope_hnsw', true);
    -- Any role can set the setting itself: a forged answer could only make
    -- the caller's own retrieval probe an index that is not there (an exact
    -- scan) or skip one (the Hamming step).
    if _memo ~ ('^' || md5(statement_timestamp()::text || scope_id::text || '|' || dimension) || '\|(true|false)$') then
        return split_part(_memo, '|', 2)::boolean;
    end if;
    return coalesce((select membank_private.scope_hnsw_ready_here(e.scope_id, dimension)
                     from membank_private.memory_embeddings as e
                     where e.scope_id = scope_hnsw_ready.scope_id limit 1), false);
end
$$;

-- name: remember_scope_hnsw: keep whether the scope's HNSW index is ready, for scope_hnsw_ready in this statement.
create or replace function membank_private.remember_scope_hnsw(scope_id uuid, dimension integer, ready boolean)
returns void
language plpgsql
volatile
security invoker
set search_path to pg_catalog, pg_temp
as $$
begin
    perform set_config('membank.scope_hnsw',
                       md5(statement_timestamp()::text || scope_id::text || '|' || dimension) || '|' || ready, true);
end
$$;

-- name: hnsw_statement: hnsw_candidates' probe of one scope's partial HNSW index, on embeddings; $1 query, $2 depth.
-- Written once, as text: hnsw_candidates runs it on the distributed table,
-- a Citus node on the scope's shard by name inside retrieve_on_shard (070),
-- where the shard's copy of the index serves it. Rows: name, distance.
create or replace function membank_private.hnsw_statement(scope_id uuid, dimension integer, embeddings text)
returns text
language sql
immutable
parallel safe
security invoker
set search_path to pg_catalog, pg_temp
as $$
    -- The scope id and dimension are literals: the planner matches a
    -- partial index's predicate against constants only.
    select format(
        'select c.name, c.distance from ('
        '  select e.name, e.embedding <=> $1 as distance'
        '  from %s as e'
        '  where e.scope_id = %L::uuid and vector_dims(e.embedding) = %s'
        '    and (e.expire_time is null or e.expire_time > statement_timestamp())'
        '  order by e.embedding::vector(%s) <=> $1::vector(%s)'
        '  limit $2) as c '
        'order by c.distance, c.name',
        embeddings, scope_id, dimension, dimension, dimension);
$$;

-- name: hnsw_candidates: the depth nearest vectors of one scope through its partial HNSW index.
create or replace function membank_private.hnsw_candidates(scope_id uuid, query vector, depth integer)
returns table (name uuid, distance double precision)
language plpgsql
stable
security invoker
set search_path from current
-- ef_search 100 (pgvector's ef_search 40 lost ~2% of the top 50 on LoCoMo
-- vectors); iterative scan, so expired rows skipped never leave fewer than
-- depth rows; relaxed order is re-sorted by exact distance below.
set "hnsw.ef_search" to 100
set "hnsw.iterative_scan" to relaxed_order
as $$
declare
    _dimension integer := vector_dims(query);
begin
    if membank_private.distributed() then
        -- The probe runs on the scope's worker, which never sees this
        -- function's settings: carried to the transaction's connections.
        perform membank_private.carry_setting('hnsw.ef_search', '100');
        perform membank_private.carry_setting('hnsw.iterative_scan', 'relaxed_order');
    end if;
    -- hnsw_statement (above) says how the index is probed
    return query execute membank_private.hnsw_statement(scope_id, _dimension, 'membank_private.memory_embeddings')
    using query, depth;
end
$$;

-- name: scope_vector_index_plan: the CREATE/DROP INDEX CONCURRENTLY statements for per-scope HNSW indexes.
create or replace function membank.scope_vector_index_plan(min_memories integer default 10000)
returns table (action text, scope_id uuid, memories bigint, index_name text, statement text)
language plpgsql
stable
security definer
set search_path to pg_catalog, pg_temp
as $$
declare
    _config membank_private.embedding_config;
    _schema text;
begin
    perform membank_private.refuse_bound_caller('scope_vector_index_plan');  -- every scope's maintenance
    if min_memories is null or min_memories < 1 then
        perform membank_private._raise_invalid('min_memories',
            format('must be >= 1, got %s', coalesce(min_memories::text, 'null')),
            'the default, 10000, indexes the scopes whose vector leg costs more than one HNSW probe');
    end if;
    select * into _config from membank_private.embedding_config;
    select n.nspname into _schema
    from pg_catalog.pg_extension as x
    inner join pg_catalog.pg_namespace as n on n.oid = x.extnamespace
    where x.extname = 'vector';
    if membank_private.on_citus() then
        -- Each index on the one shard that holds its scope (120_scope_by_scope_jobs.sql).
        return query select * from membank_private.scope_vector_index_plan_on_shards(min_memories, _config.dimension, _schema);
        return;
    end if;
    return query
    with wanted as (
        -- Scopes at min_memories or more get one; an indexed scope keeps it
        -- until it shrinks below half of that, so a scope near the threshold
        -- is not rebuilt back and forth.
        select s.scope_id, s.doc_count::bigint as memories,
               membank_private.scope_hnsw_index_name(s.scope_id, _config.dimension) as index_name
        from membank_private.scope_stats as s
        where _config.dimension is not null and s.doc_count >= min_memories / 2
    ), existing as (
        select c.relname::text as index_name, substr(c.relname, 12, 32)::uuid as scope_id,
               i.indisvalid and i.indisready as valid
        from pg_catalog.pg_index as i
        inner join pg_catalog.pg_class as c on c.oid = i.indexrelid
        where i.indrelid = 'membank_private.memory_embeddings'::regclass
          and c.relname ~ '^scope_hnsw_[0-9a-f]{32}_[0-9]+$'
    ), actions as (
        -- gone: no longer wanted, or left invalid by a failed build (dropped, then rebuilt)
        select 'drop' as action, x.index_name, x.scope_id,
               coalesce((select s.doc_count from membank_private.scope_stats as s where s.scope_id = x.scope_id),
                        0)::bigint as memories,
               1 as step
        from existing as x
        left join wanted as w on w.index_name = x.index_name
        where w.index_name is null or not x.valid
        union all
        select 'create', w.index_name, w.scope_id, w.memories, 2
        from wanted as w
        left join existing as x on x.index_name = w.index_name
        where (x.index_name is null and w.memories >= min_memories) or not x.valid
    )
    select a.action, a.scope_id, a.memories,
           a.index_name,
           case a.action
               when 'drop' then format('drop index concurrently if exists membank_private.%I', a.index_name)
               else format('create index concurrently if not exists %I on membank_private.memory_embeddings'
                           ' using hnsw ((embedding::%I.vector(%s)) %I.vector_cosine_ops)'
                           ' with (m = 16, ef_construction = 64)'
                           ' where scope_id = %L::uuid and %I.vector_dims(embedding) = %s',
                           a.index_name, _schema, _config.dimension, _schema, a.scope_id, _schema,
                           _config.dimension)
           end
    from actions as a
    order by a.step, a.memories desc nulls last, a.index_name;
end
$$;

comment on function membank.scope_vector_index_plan(integer) is
$$Admin: the statements that bring the per-scope partial HNSW indexes on memory vectors up to date, one row each
(action 'drop' or 'create', scope_id, memories: the scope's memory count, index_name, statement), drops first. A scope
with at least min_memories memories (default 10000) gets an index (m 16, ef_construction 64, cosine) over its vectors
of the bank's dimension; it is dropped when the scope falls below min_memories / 2, when the bank's model changes,
and when a failed build left it invalid (then rebuilt). Each statement is CREATE or DROP INDEX CONCURRENTLY: run each
on its own, outside a transaction, as the owner of membank's tables (`membank scope-indexes` does). Retrieval uses
an index once it is valid and otherwise ranks the scope as before, so running the plan never changes results beyond
HNSW's approximation (overlap of the top 10 with exact search >= 0.95 in bench/retrieval_latency.py).
HNSW: Malkov & Yashunin, TPAMI 2020. Raises 22023 naming min_memories when it is below 1, 42501 for a role bound to scopes.
Columns:
- action: drop or create.
- scope_id: the scope's id (membank.scope_id(scope)).
- memories: the scope's memory count.
- index_name: the index to drop or create.
- statement: the DROP or CREATE INDEX CONCURRENTLY statement to run on its own, outside a transaction.$$;
