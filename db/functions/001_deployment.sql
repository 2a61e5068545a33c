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
