-- One writer per scope at a time. Every write to a scope's memories takes
-- this transaction-level advisory lock before it locks or writes a row:
-- consolidation holds it while it re-checks its candidates and applies, and
-- the lexicon trigger needs it to keep document frequencies consistent.
-- Taking it first, always, means no writer waits for it while holding a
-- row that the lock holder needs: no deadlock between writers of a scope.

-- name: lock_scope: take the scope's write lock until the transaction ends (re-entrant).
create or replace function membank_private.lock_scope(scope_id uuid)
returns void
language sql
volatile
security invoker
set search_path to pg_catalog, pg_temp
as $$
    select pg_advisory_xact_lock(hashtextextended(scope_id::text, 1836016206));
$$;
