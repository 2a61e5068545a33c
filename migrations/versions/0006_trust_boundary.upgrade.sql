-- 0006 upgrade: the worker role, scope write locks as rows, compare-and-set edits.

-- membank_worker carries the job queues (claim/store/complete/fail), whose
-- rows hold every scope's text: never the application's role. The admin
-- role runs maintenance (purges, reembed) and may run a worker.
do $roles$
begin
    if not exists (select from pg_catalog.pg_roles where rolname = 'membank_worker') then
        create role membank_worker nologin;
    end if;
end
$roles$;

grant membank_worker to membank_admin;
grant usage on schema membank to membank_worker;

-- One row per scope that has ever been written. A scope's write lock is a
-- FOR UPDATE lock on its row, which only membank's own functions can take
-- (no role holds any privilege on this table); an advisory lock key could be
-- computed and held by any connecting role.
create table membank_private.scope_locks (
    scope_id uuid primary key
);
comment on table membank_private.scope_locks is
'One row per scope id (md5 of the scope as jsonb text); membank_private.lock_scope() locks it FOR UPDATE.';
revoke all on membank_private.scope_locks from public;

insert into membank_private.scope_locks (scope_id)
select distinct m.scope_id from membank_private.memories as m
union
select distinct o.scope_id from membank_private.operations as o
on conflict do nothing;

-- expected_revision joins update_memory, delete_memory and rollback_memory:
-- the old signatures of an existing install go (db/functions creates the new ones).
drop function if exists membank.update_memory(
    uuid, text, text[], jsonb, interval, timestamptz, jsonb, jsonb, jsonb, text[]
);
drop function if exists membank.update_memory(
    text, text, text[], jsonb, interval, timestamptz, jsonb, jsonb, jsonb, text[]
);
drop function if exists membank.delete_memory(uuid, jsonb, jsonb);
drop function if exists membank.delete_memory(text, jsonb, jsonb);
drop function if exists membank.rollback_memory(uuid, integer, jsonb);
drop function if exists membank.rollback_memory(text, integer, jsonb);
