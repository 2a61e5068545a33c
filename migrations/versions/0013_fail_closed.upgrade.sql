-- 0013 upgrade: restricted roles by OID; ADK app: state as append-only entries.

-- A role restricted by bind_role_to_scope, keyed by the role's OID: the
-- restriction belongs to the role object, not to its name (a dropped and
-- re-created role of the same name is another role) nor to how many scopes
-- it still has (a restricted role with no scope reaches nothing).
create table membank_private.bound_roles (
    role_oid oid not null primary key,
    create_time timestamptz not null default statement_timestamp()
);

-- Bindings move from the role's name to its OID. A name that no longer
-- resolves belonged to a dropped role: it restricts nobody and goes.
alter table membank_private.scope_bindings add column role_oid oid;
update membank_private.scope_bindings as b set role_oid = r.oid
from pg_catalog.pg_roles as r
where r.rolname = b.role_name;
delete from membank_private.scope_bindings
where role_oid is null;
insert into membank_private.bound_roles (role_oid, create_time)
select
    b.role_oid,
    min(b.create_time) as create_time
from membank_private.scope_bindings as b
group by b.role_oid;
alter table membank_private.scope_bindings drop constraint scope_bindings_pkey;
alter table membank_private.scope_bindings drop column role_name;
alter table membank_private.scope_bindings alter column role_oid set not null;
alter table membank_private.scope_bindings add constraint scope_bindings_pkey primary key (role_oid, scope_id);
alter table membank_private.scope_bindings
add constraint scope_bindings_role_oid_fkey foreign key (role_oid)
references membank_private.bound_roles (role_oid) on delete cascade;

-- ADK "app:" state: one row per key written, never updated; a read takes
-- the latest row (highest seq) of each key. Writers only insert, so no
-- user's call waits for another user's open transaction. scope_id is the
-- writer's scope (erase_scope unlinks it); superseded rows are deleted by
-- later writers with SKIP LOCKED.
create table membank_private.app_state_entries (
    app_name text not null,
    key text not null,
    seq bigint generated always as identity,
    value jsonb not null,
    scope_id uuid,
    create_time timestamptz not null default statement_timestamp(),
    primary key (app_name, key, seq)
);
create index app_state_entries_scope_idx
on membank_private.app_state_entries (scope_id) where scope_id is not null;
insert into membank_private.app_state_entries (app_name, key, value, create_time)
select
    a.app_name,
    k.key,
    k.value,
    a.update_time
from membank_private.app_states as a
cross join lateral jsonb_each(a.state) as k
order by a.app_name, k.key;
drop table membank_private.app_states;
