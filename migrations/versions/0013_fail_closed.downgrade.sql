-- 0013 downgrade: one app_states row per app; bindings by role name. A
-- restricted role left with no scope binding is unrestricted again under
-- 0012's rules (the reason for 0013).
drop function if exists membank.unrestrict_role(name);
drop function if exists membank_private.refuse_bound_caller(text);
drop function if exists membank_private.bound_role_oids();
drop function if exists membank_private.resolve_role(name);
drop function if exists membank_private.app_state(text);
drop function if exists membank_private.merge_app_state(text, uuid, jsonb);
drop function if exists membank_private.raise_bank_row_busy(text, text);

create table membank_private.app_states (
    app_name text not null primary key,
    state jsonb not null default '{}',
    update_time timestamptz not null default statement_timestamp()
);
insert into membank_private.app_states (app_name, state, update_time)
select
    e.app_name,
    jsonb_object_agg(e.key, e.value) as state,
    max(e.create_time) as update_time
from (
    select distinct on (x.app_name, x.key)
        x.app_name,
        x.key,
        x.value,
        x.create_time
    from membank_private.app_state_entries as x
    order by x.app_name asc, x.key asc, x.seq desc
) as e
group by e.app_name;
drop table membank_private.app_state_entries;

alter table membank_private.scope_bindings drop constraint scope_bindings_role_oid_fkey;
alter table membank_private.scope_bindings drop constraint scope_bindings_pkey;
alter table membank_private.scope_bindings add column role_name name;
update membank_private.scope_bindings as b set role_name = r.rolname
from pg_catalog.pg_roles as r
where r.oid = b.role_oid;
delete from membank_private.scope_bindings
where role_name is null;
alter table membank_private.scope_bindings alter column role_name set not null;
alter table membank_private.scope_bindings drop column role_oid;
alter table membank_private.scope_bindings add constraint scope_bindings_pkey primary key (role_name, scope_id);
drop table membank_private.bound_roles;
