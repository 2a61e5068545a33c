-- Applied first, in the same transaction as every other db/ file: puts the
-- schema that holds pgvector (wherever the DBA installed it) into this
-- transaction's search_path, so that functions declared with
-- `set search_path from current` pin exactly pg_catalog, that schema and
-- pg_temp. Functions that do not use pgvector pin pg_catalog, pg_temp.
select
    set_config(
        'search_path', format('pg_catalog, %I, pg_temp', n.nspname), true
    ) as search_path
from pg_catalog.pg_extension as e
inner join pg_catalog.pg_namespace as n on e.extnamespace = n.oid
where e.extname = 'vector';
