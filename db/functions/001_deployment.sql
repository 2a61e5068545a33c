-- Which deployment this database is: one server, or a Citus cluster whose
-- tables are distributed by scope_id. 990_citus.sql redefines it on Citus,
-- after every db/ file has been applied, so the answer is a constant (no
-- catalog read per call on one server).

-- name: distributed: whether membank's tables are distributed by scope_id (Citus).
create or replace function membank_private.distributed()
returns boolean
language sql
immutable
parallel safe
security invoker
set search_path to pg_catalog, pg_temp
return false;

comment on function membank_private.distributed() is
$$Whether membank's tables are distributed by scope_id on a Citus cluster: false on one server; membank db
distribute (990_citus.sql) makes it true. A constant: no catalog read.$$;

-- name: node_group: the Citus group id of the node this runs on (0: one server, or a Citus coordinator).
-- Role OIDs are per node (every node's pg_authid gives a role its own), so
-- the scope bindings record each worker's OID of a bound role by group id
-- (110_scoped_views.sql); this says which entry is this node's.
-- 990_citus.sql redefines it on Citus to read pg_dist_local_group.
create or replace function membank_private.node_group()
returns integer
language sql
immutable
parallel safe
security invoker
set search_path to pg_catalog, pg_temp
return 0;

comment on function membank_private.node_group() is
$$The Citus group id of the node the call runs on: 0 on one server and on a Citus coordinator, the worker's group
(pg_dist_local_group) on a Citus worker once the tables are distributed (990_citus.sql). Raises nothing.$$;

-- name: check_node_privileges: refuse calls on a Citus worker membank has not set up (privileges, reference tables).
-- A worker added to the cluster after `membank db upgrade` gets membank's
-- functions from Citus (citus_add_node copies distributed objects with their
-- GRANTs) but not db/privileges.sql's REVOKEs: a function Citus creates there
-- keeps PostgreSQL's default EXECUTE for PUBLIC, so any login reaching that
-- worker could call every membank function, a reader's role could write, and
-- a login with no membank role would count as unrestricted. Until the
-- upgrade is run again (it revokes on every node), such a node serves no
-- call: the scope checks every API call passes through (scope_allowed,
-- bound_scopes, 110_scoped_views.sql) call this first. The sign is this very
-- function: db/privileges.sql revokes EXECUTE on every membank_private
-- function from PUBLIC, so a node where PUBLIC still holds it, or where it is
-- missing, was not set up by membank. Only workers are checked: one server
-- and the coordinator are the nodes the upgrade itself runs on.
create or replace function membank_private.check_node_privileges()
returns void
language plpgsql
stable
security invoker
set search_path to pg_catalog, pg_temp
as $$
begin
    if membank_private.node_group() = 0 then
        return;
    end if;
    if coalesce(pg_catalog.has_function_privilege(
                    'public', pg_catalog.to_regprocedure('membank_private.check_node_privileges()'), 'execute'),
                true) then
        raise exception 'membank''s privileges are not set up on this node (Citus group %)', membank_private.node_group()
            using errcode = 'insufficient_privilege',
                  detail = 'PUBLIC may execute membank''s functions here: this worker was added to the cluster after'
                           ' membank db upgrade, and Citus copies GRANTs to a new node but not REVOKEs',
                  hint = 'run membank db upgrade on the coordinator again (docs/scale-out.md, "A worker added later");'
                         ' until then this node serves no membank call';
    end if;
    -- A worker added to the cluster gets copies of the reference tables only
    -- when the rebalancer runs (citus_rebalance_start copies them before it
    -- moves a shard; a lone citus_move_shard_placement does not) or
    -- replicate_reference_tables() does. Until then Citus sends its reads of them to another node, and the
    -- binding check's query (bound_role_oids: the bindings joined to this
    -- node's role catalogs) fails there with a Citus error as soon as one role
    -- is bound; this says what to do instead, whether or not a role is bound.
    if not exists (select from pg_catalog.pg_dist_placement as p
                   inner join pg_catalog.pg_dist_shard as s on s.shardid = p.shardid
                   where s.logicalrelid = 'membank_private.bound_roles'::regclass
                     and p.groupid = membank_private.node_group()) then
        raise exception 'membank''s reference tables have no copy on this node yet (Citus group %)',
            membank_private.node_group()
            using errcode = 'object_not_in_prerequisite_state',
                  detail = 'a worker added to the cluster gets the reference tables (the tenant bindings among them)'
                           ' when the rebalancer or replicate_reference_tables() runs',
                  hint = 'on the coordinator: select citus_rebalance_start(); or select replicate_reference_tables();'
                         ' (docs/scale-out.md, "A worker added later")';
    end if;
end
$$;

comment on function membank_private.check_node_privileges() is
$$Fail closed on a Citus worker whose membank privileges were never set up (added after membank db upgrade, so its
membank functions kept EXECUTE for PUBLIC): raises 42501 (insufficient_privilege) with a hint to run membank db
upgrade again; and on a worker that holds no copy of membank's reference tables yet (added, not yet rebalanced):
raises 55000 (object_not_in_prerequisite_state) with a hint to rebalance or run replicate_reference_tables().
Returns nothing on one server, on the coordinator and on a worker set up by both. Called first by
membank_private.scope_allowed and bound_scopes, which every API call passes through.$$;
