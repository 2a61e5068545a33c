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
