-- A restricted role's name and each Citus worker's OID of it (by group id).
-- The names are read here, one row at a time, so that on a distributed bank
-- each UPDATE of the reference table names constants (every node's copy gets
-- the coordinator's answer). Rows of roles dropped since restrict nobody.
alter table membank_private.bound_roles add column role_name name;
alter table membank_private.bound_roles add column worker_oids jsonb not null default '{}';

do $$
declare
    _key oid;
    _name name;
begin
    for _key in select b.role_oid from membank_private.bound_roles as b loop
        _name := (select r.rolname from pg_catalog.pg_roles as r where r.oid = _key);
        if _name is null then
            delete from membank_private.bound_roles as b where b.role_oid = _key;
        else
            update membank_private.bound_roles as b set role_name = _name where b.role_oid = _key;
        end if;
    end loop;
end
$$;

alter table membank_private.bound_roles alter column role_name set not null;
alter table membank_private.bound_roles
add constraint bound_roles_worker_oids_check check (jsonb_typeof(worker_oids) = 'object');
