drop function if exists membank.refresh_role_bindings();
drop function if exists membank_private.local_role_oid(oid, name, jsonb);
drop function if exists membank_private.worker_role_oids(name);
drop function if exists membank_private.prune_dropped_roles();
drop function if exists membank_private.refuse_off_coordinator(text);
alter table membank_private.bound_roles drop constraint bound_roles_worker_oids_check;
alter table membank_private.bound_roles drop column worker_oids;
alter table membank_private.bound_roles drop column role_name;
