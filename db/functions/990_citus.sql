-- Citus only (a no-op on plain PostgreSQL): settings of the distributed
-- deployment, applied after every function is (re)created, since CREATE OR
-- REPLACE resets a function's settings.
--
-- Retrieval runs with custom plans on Citus: Citus picks a statement's shard
-- from its scope_id values, which a generic plan does not have ("could not
-- create distributed plan"). On one server retrieval keeps its generic plans
-- (070_retrieve_memories.sql says why; custom plans cost it about 2.5x there).
do $$
declare
    _routine record;
begin
    if not exists (select from pg_catalog.pg_extension where extname = 'citus') then
        return;  -- one server (pg_dist_partition below exists only with Citus)
    end if;
    if not exists (select from pg_catalog.pg_class as t
                      inner join pg_catalog.pg_namespace as n on n.oid = t.relnamespace
                      inner join pg_catalog.pg_dist_partition as p on p.logicalrelid = t.oid
                      where n.nspname = 'membank_private' and t.relname = 'memories') then
        return;
    end if;
    create or replace function membank_private.distributed()
    returns boolean
    language sql
    immutable
    parallel safe
    security invoker
    set search_path to pg_catalog, pg_temp
    return true;
    -- Each node reads its own group (the body is the same on every node; Citus copies it to the workers).
    -- PL/pgSQL, whose plan is kept for the session: a SQL function with a
    -- SET clause is planned on every call, 0.1 to 0.25 ms of each write's
    -- mark_due on a worker (lab cluster, 2026-12-02).
    create or replace function membank_private.node_group()
    returns integer
    language plpgsql
    stable
    parallel safe
    security invoker
    set search_path to pg_catalog, pg_temp
    as $node_group$
    begin
        return (select g.groupid from pg_catalog.pg_dist_local_group as g);
    end
    $node_group$;
    alter function membank.retrieve_memories(
        jsonb, text, real[], integer, double precision, jsonb, text[], text, timestamptz, timestamptz,
        text, double precision, double precision, integer, text, integer, integer, text, text[], real[],
        double precision, double precision, boolean
    ) set plan_cache_mode to force_custom_plan;
    -- The setting holds for every function retrieval calls, also those that
    -- read no table, whose statements were then planned again on every call:
    -- a query's lexemes (query_lexemes, twice per query text, and its
    -- cjk_tokens) cost 2.3 ms of planning per retrieval on the coordinator
    -- (lab cluster, 2026-12-02). They keep PostgreSQL's default.
    alter function membank_private.query_lexemes(text) set plan_cache_mode to auto;
    alter function membank_private.cjk_tokens(text) set plan_cache_mode to auto;
    -- Citus sends a statement's parameters to the worker as text written in
    -- the coordinator session's styles, and the worker reads them in its own
    -- (ISO, MDY; postgres; shortest exact floats). A caller's DateStyle
    -- 'SQL, DMY' sent 2027-01-05 as 05/01/2027 (May 1st on the worker, and
    -- an error from the 13th), an extra_float_digits below 1 rounded every
    -- float. Every public function that can read or write a distributed
    -- table (all but the immutable ones) writes them in the workers' styles;
    -- its result reaches the caller typed, printed in the caller's own.
    -- Procedures are left out: a SET clause forbids their COMMITs (their
    -- batch functions get these settings in db/procedures/990_citus_styles.sql).
    for _routine in
        select p.oid::regprocedure as signature
        from pg_catalog.pg_proc as p
        where p.pronamespace = 'membank'::regnamespace and p.prokind = 'f' and p.provolatile <> 'i'
    loop
        execute format('alter function %s set datestyle to %L', _routine.signature, 'ISO, MDY');
        execute format('alter function %s set intervalstyle to %L', _routine.signature, 'postgres');
        execute format('alter function %s set extra_float_digits to 1', _routine.signature);
    end loop;
end
$$;
