-- Citus only (a no-op on plain PostgreSQL): the workers' DateStyle,
-- IntervalStyle and float digits for the batch functions of the procedures,
-- applied after every procedure file is (re)created, since CREATE OR REPLACE
-- resets a function's settings (db/functions/990_citus.sql says why public
-- functions run with them). A procedure keeps its caller's styles (its
-- COMMITs forbid a SET clause); each of its transactions is one of these
-- functions (privileges.sql grants them), which compared the scopes' times
-- with the time it read, sent to the worker as text in the caller's style:
-- under 'SQL, DMY' on December 3rd purge_expired_memories' time arrived as
-- March 12th, and nothing that expired since then was purged (from the 13th
-- of a month, an error).
do $$
declare
    _routine regprocedure;
begin
    if not membank_private.distributed() then
        return;
    end if;
    foreach _routine in array array[
        'membank_private.purge_expired_batch(integer)',
        'membank_private.purge_memories_batch(jsonb, jsonb, text[], integer)',
        'membank_private.retention_batch(integer)',
        'membank_private.retention_batch_full(jsonb, integer)',
        'membank_private.retention_totals(jsonb, jsonb)',
        'membank_private.rebuild_due_work()'
    ]::regprocedure [] loop
        execute format('alter function %s set datestyle to %L', _routine, 'ISO, MDY');
        execute format('alter function %s set intervalstyle to %L', _routine, 'postgres');
        execute format('alter function %s set extra_float_digits to 1', _routine);
    end loop;
end
$$;
