-- 0006 downgrade: back to advisory scope locks; the compare-and-set
-- signatures, the batched purge and the scope lock rows go. The 0004
-- signatures of update_memory, delete_memory and rollback_memory come back
-- with the 0004 release's `membank db upgrade`. membank_worker stays: roles
-- are cluster-wide and may hold grants in other databases.
drop procedure if exists membank.purge_memories_in_batches(jsonb, jsonb, text[], integer, bigint);
drop function if exists membank_private.purge_memories_batch(jsonb, jsonb, text[], integer);
drop function if exists membank.update_memory(
    uuid, text, text[], jsonb, interval, timestamptz, jsonb, jsonb, jsonb, text[], integer
);
drop function if exists membank.update_memory(
    text, text, text[], jsonb, interval, timestamptz, jsonb, jsonb, jsonb, text[], integer
);
drop function if exists membank.delete_memory(uuid, jsonb, jsonb, integer);
drop function if exists membank.delete_memory(text, jsonb, jsonb, integer);
drop function if exists membank.rollback_memory(uuid, integer, jsonb, integer);
drop function if exists membank.rollback_memory(text, integer, jsonb, integer);
drop function if exists membank_private.check_revision(uuid, integer, integer);

create or replace function membank_private.lock_scope(scope_id uuid)
returns void
language sql
volatile
security invoker
set search_path to pg_catalog, pg_temp
as $$
    select pg_advisory_xact_lock(hashtextextended(scope_id::text, 1836016206));
$$;
drop function if exists membank_private.scope_lock_timeout();
drop table if exists membank_private.scope_locks;
